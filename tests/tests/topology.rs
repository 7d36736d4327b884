//! Self-tests of the scale-out harnesses: cluster routing and failover, replication, and a
//! sentinel failover.

use std::collections::BTreeMap;
use std::time::Instant;

use lock_tests::Resp;
use lock_tests::topology::{RedisCluster, ReplicatedPair, SentinelGroup, key_slot};

/// `SET key value` then `WAIT replicas timeout_ms` on one connection (WAIT counts acks of the
/// connection's own writes); returns WAIT's reply.
fn set_and_wait(url: &str, key: &str, value: &str, replicas: u32, timeout_ms: u64) -> i64 {
    let client = redis::Client::open(url).unwrap();
    let mut con = client
        .get_connection()
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query(&mut con)
        .unwrap_or_else(|e| panic!("SET {key} on {url}: {e}"));
    redis::cmd("WAIT")
        .arg(replicas)
        .arg(timeout_ms)
        .query(&mut con)
        .unwrap_or_else(|e| panic!("WAIT on {url}: {e}"))
}

fn role(reply: Resp) -> String {
    reply.items()[0]
        .text()
        .expect("ROLE's first item")
        .to_string()
}

#[test]
fn key_slot_is_crc16_of_the_hash_tag() {
    // The reference value of the Redis Cluster spec: CRC16("123456789") = 0x31C3.
    assert_eq!(key_slot("123456789"), 0x31C3);
    assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
    assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
    assert_eq!(key_slot("foo{bar}{zap}"), key_slot("bar"));
}

#[test]
fn cluster_routes_by_slot_and_fails_over() {
    let t = Instant::now();
    let mut cluster = RedisCluster::start(3, 1);
    let up = t.elapsed();
    assert_eq!(cluster.masters().len(), 3);
    assert_eq!(cluster.replicas().len(), 3);
    assert_eq!(cluster.urls().len(), 6);

    // Our slot function agrees with the server's, tags included.
    for key in [
        "a",
        "lock:{order-1}",
        "{user1000}.following",
        "foo{}{bar}",
        "foo{{bar}}zap",
        "{}",
        "ключ",
    ] {
        let server = cluster.node(0).cmd(&["CLUSTER", "KEYSLOT", key]).int();
        assert_eq!(Some(i64::from(key_slot(key))), server, "slot of {key:?}");
    }

    // One key per master.
    let mut by_master = BTreeMap::new();
    for i in 0.. {
        let key = format!("key-{i}");
        by_master
            .entry(cluster.master_index_for_key(&key))
            .or_insert(key);
        if by_master.len() == 3 {
            break;
        }
    }
    for (&master, key) in &by_master {
        let server = cluster.master_for_key(key);
        assert_eq!(server.port(), cluster.node(master).port());
        // Replicated before anything is killed, so the value must survive the failover.
        assert_eq!(
            set_and_wait(&server.url(), key, key, 1, 5000),
            1,
            "WAIT for {key}"
        );
        assert_eq!(server.cmd(&["GET", key]), Resp::Bulk(Some(key.clone())));
        for other in cluster.master_indices() {
            if other == master {
                continue;
            }
            let reply = cluster.node(other).cmd(&["GET", key]);
            let moved = format!("MOVED {} 127.0.0.1:{}", key_slot(key), server.port());
            assert_eq!(reply, Resp::Error(moved), "GET {key} on node {other}");
        }
    }
    let mut keys = cluster.keys("key-*");
    keys.sort();
    let mut expected: Vec<String> = by_master.values().cloned().collect();
    expected.sort();
    assert_eq!(keys, expected);

    // Graceful failover of one shard.
    let mut keys_by_master = by_master.values().cloned();
    let graceful_key = keys_by_master.next().unwrap();
    let old = cluster.master_index_for_key(&graceful_key);
    let replica = cluster.replicas_of(old)[0];
    let t_manual = Instant::now();
    cluster.failover_manual(replica);
    let manual = t_manual.elapsed();
    assert_eq!(cluster.master_index_for_key(&graceful_key), replica);
    assert_eq!(role(cluster.node(old).cmd(&["ROLE"])), "slave");
    assert_eq!(
        cluster.node(replica).cmd(&["GET", &graceful_key]),
        Resp::Bulk(Some(graceful_key.clone()))
    );

    // Kill the master of another shard.
    let key = keys_by_master.next().unwrap();
    let t_kill = Instant::now();
    let killed = cluster.kill_master_of(&key);
    let promoted = cluster.wait_for_failover(killed);
    let failover = t_kill.elapsed();
    assert_ne!(promoted, killed);
    assert_eq!(cluster.master_index_for_key(&key), promoted);
    assert_eq!(role(cluster.node(promoted).cmd(&["ROLE"])), "master");
    assert_eq!(
        cluster.node(promoted).cmd(&["GET", &key]),
        Resp::Bulk(Some(key.clone()))
    );
    assert_eq!(
        cluster.node(promoted).cmd(&["SET", &key, "after"]),
        Resp::Simple("OK".into())
    );

    // The killed node comes back empty and rejoins as a replica of the promoted one.
    let t_back = Instant::now();
    cluster.node_mut(killed).restart();
    cluster.wait_until_stable();
    let back = t_back.elapsed();
    assert_eq!(role(cluster.node(killed).cmd(&["ROLE"])), "slave");
    assert_eq!(cluster.replicas_of(promoted), vec![killed]);
    eprintln!(
        "cluster: up in {up:?}, manual failover {manual:?}, failover after SIGKILL {failover:?}, \
         rejoin {back:?}, total {:?}",
        t.elapsed()
    );
}

#[test]
fn replicated_pair_replicates_until_the_replica_stops() {
    let t = Instant::now();
    let mut pair = ReplicatedPair::start();
    let up = t.elapsed();
    assert_eq!(role(pair.master().cmd(&["ROLE"])), "master");
    assert_eq!(role(pair.replica().cmd(&["ROLE"])), "slave");

    assert_eq!(set_and_wait(&pair.master_url(), "k", "v1", 1, 1000), 1);
    assert_eq!(
        pair.replica().cmd(&["GET", "k"]),
        Resp::Bulk(Some("v1".into()))
    );

    pair.replica_mut().stop();
    assert_eq!(set_and_wait(&pair.master_url(), "k", "v2", 1, 200), 0);

    pair.replica_mut().restart();
    pair.wait_for_sync();
    assert_eq!(
        pair.replica().cmd(&["GET", "k"]),
        Resp::Bulk(Some("v2".into()))
    );
    assert_eq!(set_and_wait(&pair.master_url(), "k", "v3", 1, 1000), 1);
    eprintln!("pair: up in {up:?}, total {:?}", t.elapsed());
}

#[test]
fn sentinels_promote_the_replica_when_the_master_dies() {
    let t = Instant::now();
    let mut group = SentinelGroup::start(3);
    let up = t.elapsed();
    let old = group.current_master_port();
    assert_eq!(old, group.pair().master().port());
    assert_eq!(group.sentinel_urls().len(), 3);
    for s in group.sentinels() {
        assert_eq!(s.cmd(&["PING"]), Resp::Simple("PONG".into()));
        assert_eq!(s.master_port(group.master_name()).unwrap(), old);
    }
    assert_eq!(
        set_and_wait(&group.pair().master_url(), "k", "v", 1, 5000),
        1
    );

    let t_kill = Instant::now();
    assert_eq!(group.kill_master(), old);
    let new = group.wait_for_failover(old);
    let failover = t_kill.elapsed();
    assert_eq!(new, group.pair().replica().port());
    assert_eq!(group.current_master_port(), new);
    assert_eq!(role(group.server(new).cmd(&["ROLE"])), "master");
    assert_eq!(
        group.current_master().cmd(&["GET", "k"]),
        Resp::Bulk(Some("v".into()))
    );
    assert_eq!(
        group.current_master().cmd(&["SET", "k", "w"]),
        Resp::Simple("OK".into())
    );
    eprintln!(
        "sentinel: up in {up:?}, failover after SIGKILL {failover:?}, total {:?}",
        t.elapsed()
    );
}
