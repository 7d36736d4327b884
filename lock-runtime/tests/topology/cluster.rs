//! Redis Cluster (feature `cluster`): real clusters of 3 masters with a replica each, one per
//! test; each test's scenarios run in sequence on its cluster (the last one kills a master).
#![cfg(feature = "cluster")]

use crate::common;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, MultiLock};
use lock_tests::topology::{RedisCluster, key_slot};

async fn cluster_client(cluster: &RedisCluster, watchdog: Duration) -> LockClient {
    LockClient::cluster_builder([cluster.seed_url()])
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("connect to the cluster")
}

/// Lock names whose keys land on every master, `per_master` each.
fn names_on_every_master(cluster: &RedisCluster, prefix: &str, per_master: usize) -> Vec<String> {
    let masters = cluster.master_indices();
    let mut by_master: HashMap<usize, Vec<String>> = HashMap::new();
    for i in 0.. {
        let name = format!("{prefix}{i}");
        let master = cluster.master_index_for_key(&format!("lock:{{{name}}}"));
        let list = by_master.entry(master).or_default();
        if list.len() < per_master {
            list.push(name);
        }
        if masters
            .iter()
            .all(|m| by_master.get(m).is_some_and(|l| l.len() == per_master))
        {
            break;
        }
    }
    by_master.into_values().flatten().collect()
}

fn trace() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Starts a cluster of 3 masters with a replica each, saying how long it took.
fn start_cluster() -> RedisCluster {
    let t = Instant::now();
    let cluster = RedisCluster::start(3, 1);
    eprintln!("cluster up in {:?}", t.elapsed());
    cluster
}

/// Runs one scenario, saying how long it took.
async fn step(what: &str, scenario: impl std::future::Future<Output = ()>) {
    let t = Instant::now();
    scenario.await;
    eprintln!("{what}: {:?}", t.elapsed());
}

// The scenarios in three tests, each on a cluster of its own, so that they run side by side:
// most of their time is waiting (renewal rounds, a migration, a failover).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_a_cluster() {
    trace();
    let cluster = start_cluster();
    step("exclusion", exclusion_across_all_masters(&cluster)).await;
    step("wake-up", prompt_wake_up_through_sharded_pub_sub(&cluster)).await;
    step("lock family", the_lock_family_on_every_master(&cluster)).await;
    names_with_their_own_hash_tag(&cluster).await;
    names_with_braces_anywhere(&cluster).await;
    redisson_layout_on_every_master(&cluster).await;
    multilock_across_masters_and_script_flush(&cluster).await;
    step(
        "batched renewals",
        renewals_are_batched_per_slot_and_node(&cluster),
    )
    .await;
    step(
        "frozen master",
        a_frozen_master_costs_only_its_own_locks(&cluster),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_a_cluster_with_a_frozen_master_and_a_slot_migrating() {
    trace();
    // The frozen-master scenario of subscriptions first, on a cluster nothing was written to
    // yet: its `CLUSTER SLOTS` lists no replica (Redis 7.0 leaves out a replica at replication
    // offset 0), so a request for a slot whose node the client is reconnecting to has no
    // replica of the slot to go to instead (see `Demux::new`).
    let cluster = start_cluster();
    step(
        "frozen shard, subscriptions",
        a_frozen_master_holds_up_no_other_shards_subscriptions(&cluster),
    )
    .await;
    step(
        "mid-migration (ASK)",
        locks_follow_ask_redirects_mid_migration(&cluster),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_a_cluster_through_resharding_and_a_master_failover() {
    trace();
    let mut cluster = start_cluster();
    step("resharding", resharding_mid_hold(&cluster)).await;
    step("failover", master_failover_mid_hold(&mut cluster)).await;
}

async fn exclusion_across_all_masters(cluster: &RedisCluster) {
    let names = names_on_every_master(cluster, "excl-", 3);
    let clients = [
        cluster_client(cluster, Duration::from_secs(5)).await,
        cluster_client(cluster, Duration::from_secs(5)).await,
    ];
    let inside: Arc<HashMap<String, AtomicUsize>> = Arc::new(
        names
            .iter()
            .map(|n| (n.clone(), AtomicUsize::new(0)))
            .collect(),
    );
    let tokens: Arc<std::sync::Mutex<HashMap<String, Vec<u64>>>> = Arc::default();
    let mut tasks = Vec::new();
    for name in &names {
        for (c, client) in clients.iter().enumerate() {
            for t in 0..2 {
                let (client, name, inside, tokens) =
                    (client.clone(), name.clone(), inside.clone(), tokens.clone());
                tasks.push(tokio::spawn(async move {
                    for _ in 0..5 {
                        let guard = client
                            .lock(&name)
                            .try_acquire(Duration::from_secs(10))
                            .await
                            .unwrap_or_else(|e| panic!("{name} client {c} task {t}: {e}"));
                        let n = inside[&name].fetch_add(1, Ordering::SeqCst);
                        assert_eq!(n, 0, "two holders of {name} at once");
                        let token = guard.fencing_token().await.unwrap();
                        tokens
                            .lock()
                            .unwrap()
                            .entry(name.clone())
                            .or_default()
                            .push(token);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        inside[&name].fetch_sub(1, Ordering::SeqCst);
                        guard.release().await.expect("release");
                    }
                }));
            }
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    let tokens = std::mem::take(&mut *tokens.lock().unwrap());
    for name in &names {
        let list = &tokens[name];
        assert_eq!(list.len(), 20, "{name}");
        assert!(
            list.windows(2).all(|w| w[0] < w[1]),
            "fencing tokens of {name} must increase in acquisition order: {list:?}"
        );
    }
    for client in &clients {
        assert!(
            common::eventually(Duration::from_secs(2), || client.held_locks() == 0
                && client.subscribed_channels() == 0)
            .await
        );
    }
    assert!(
        common::eventually(Duration::from_secs(2), || cluster
            .keys("lock:*")
            .iter()
            .all(|k| k.ends_with(":fence")))
        .await,
        "lock keys left: {:?}",
        cluster.keys("lock:*")
    );
}

/// Whether `channel` is (or within 3 s becomes) a shard channel subscribed on `master`.
async fn shard_subscribed(master: &lock_tests::RedisServer, channel: &str) -> bool {
    common::eventually(Duration::from_secs(3), || {
        (master.cmd(&["PUBSUB", "SHARDCHANNELS"]).items().iter()).any(|c| c.text() == Some(channel))
    })
    .await
}

async fn prompt_wake_up_through_sharded_pub_sub(cluster: &RedisCluster) {
    // Long leases: only an unlock message can wake the waiter this fast.
    let holder = cluster_client(cluster, Duration::from_secs(30)).await;
    let waiter = cluster_client(cluster, Duration::from_secs(30)).await;
    for name in names_on_every_master(cluster, "wake-", 1) {
        let key = format!("lock:{{{name}}}");
        let master = cluster.master_for_key(&key);
        let spublish_before = master.command_calls("spublish");
        let guard = holder.lock(&name).acquire().await.expect("hold");
        let waiting = {
            let waiter = waiter.clone();
            let name = name.clone();
            tokio::spawn(async move {
                let guard = waiter
                    .lock(&name)
                    .try_acquire(Duration::from_secs(10))
                    .await
                    .expect("waiter");
                let at = Instant::now();
                drop(guard);
                at
            })
        };
        // The waiter subscribes to the lock's shard channel on the lock's own master.
        let channel = format!("{key}:unlock");
        assert!(
            shard_subscribed(master, &channel).await,
            "{channel} never subscribed on the master of its slot"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let released = Instant::now();
        guard.release().await.expect("release");
        let acquired = waiting.await.expect("waiter task");
        let delay = acquired.saturating_duration_since(released);
        // Its timer was the sooner of the holder's lease (30 s) and its own deadline (10 s), at
        // which it would still try once: woken in half of that, the message woke it.
        assert!(
            delay < Duration::from_secs(5),
            "{name}: woken after {delay:?}, not by the unlock message"
        );
        assert!(
            master.command_calls("spublish") > spublish_before,
            "the release must publish on the shard channel"
        );
    }
}

/// `Layout::Redisson` on a cluster, as Redisson 3.22+ runs on Redis 7: the lock hash is the name
/// itself, the unlock message goes out with `SPUBLISH` on `redisson_lock__channel:{N}` in the
/// name's slot, and a waiter is woken by it; a name whose channel would land in another slot is
/// refused before anything is sent.
async fn redisson_layout_on_every_master(cluster: &RedisCluster) {
    let client = || async {
        LockClient::cluster_builder([cluster.seed_url()])
            .layout(lock_runtime::Layout::Redisson)
            .build()
            .await
            .expect("connect to the cluster")
    };
    let (holder, waiter) = (client().await, client().await);
    let mut masters = BTreeSet::new();
    for i in 0.. {
        let name = format!("sku-{i}");
        if !masters.insert(cluster.master_index_for_key(&name)) {
            continue;
        }
        let master = cluster.master_for_key(&name);
        let guard = holder.lock(&name).acquire().await.expect("hold");
        assert_eq!(
            master.cmd(&["EXISTS", &name]).int(),
            Some(1),
            "the hash is {name}"
        );
        let waiting = {
            let (waiter, name) = (waiter.clone(), name.clone());
            tokio::spawn(async move {
                let guard = waiter
                    .lock(&name)
                    .try_acquire(Duration::from_secs(10))
                    .await;
                (Instant::now(), guard.expect("waiter"))
            })
        };
        let channel = format!("redisson_lock__channel:{{{name}}}");
        assert!(
            shard_subscribed(master, &channel).await,
            "{channel} never subscribed on the master of {name}'s slot"
        );
        let released = Instant::now();
        guard.release().await.expect("release");
        let (acquired, guard) = waiting.await.expect("waiter task");
        let delay = acquired.saturating_duration_since(released);
        // Its timer: the sooner of the holder's lease (30 s) and its deadline (10 s).
        assert!(
            delay < Duration::from_secs(5),
            "{name}: woken after {delay:?}"
        );
        guard.release().await.expect("release");
        if masters.len() == cluster.master_indices().len() {
            break;
        }
    }
    for name in ["a{b", "a}b"] {
        let err = holder
            .lock(name)
            .try_acquire(Duration::ZERO)
            .await
            .unwrap_err();
        assert!(matches!(err, LockError::InvalidName { .. }), "{err:?}");
    }
}

/// Semaphores, read/write and fair locks on every master: their extra keys share the lock's
/// slot, their wake-ups go out on the shard channel (a counted, a broadcast and a directed
/// one), and the watchdog renews them with the node's batch.
///
/// Every hold is taken first, then kept past its first lease by renewal alone (judged by
/// renewal rounds, not by the clock: a loaded machine only makes the wait longer), then each
/// is released and its waiter must be woken by the unlock message.
async fn the_lock_family_on_every_master(cluster: &RedisCluster) {
    type Release = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
    // Each waiter's task releases what it got at once; it returns when it got it.
    type Waiter = tokio::task::JoinHandle<Instant>;
    let lease = Duration::from_secs(2);
    let a = cluster_client(cluster, lease).await;
    let b = cluster_client(cluster, lease).await;
    let mut pairs: Vec<(String, Release, Waiter)> = Vec::new();
    let mut kept = Vec::new();
    for name in names_on_every_master(cluster, "family-", 1) {
        let sem = a.semaphore(&name, 2);
        let p1 = sem.acquire().await.expect("permit");
        kept.push(b.semaphore(&name, 2).acquire().await.expect("permit"));
        let waiter = tokio::spawn({
            let sem = b.semaphore(&name, 2);
            async move {
                let p = sem.acquire().await.expect("permit after release");
                let at = Instant::now();
                p.release().await.expect("release");
                at
            }
        });
        let release = Box::pin(async move { p1.release().await.expect("release") });
        pairs.push((format!("semaphore {name}"), release, waiter));

        let rw_name = format!("{name}-rw");
        let reader = a.rw_lock(&rw_name).read().acquire().await.expect("read");
        let writer = tokio::spawn({
            let rw = b.rw_lock(&rw_name);
            async move {
                let w = rw.write().acquire().await.expect("write");
                let at = Instant::now();
                w.release().await.expect("release write");
                at
            }
        });
        let release = Box::pin(async move { reader.release().await.expect("release") });
        pairs.push((format!("read/write {rw_name}"), release, writer));

        let fair_name = format!("{name}-fair");
        let first = a.fair_lock(&fair_name).acquire().await.expect("fair");
        let next = tokio::spawn({
            let lock = b.fair_lock(&fair_name);
            async move {
                let f = lock.acquire().await.expect("fair after release");
                let at = Instant::now();
                f.release().await.expect("release fair");
                at
            }
        });
        let release = Box::pin(async move { first.release().await.expect("release") });
        pairs.push((format!("fair {fair_name}"), release, next));
    }
    for client in [&a, &b] {
        renewed_for_a_lease(client).await;
    }
    assert!(kept.iter().all(|p| !p.is_lost()), "permits kept by renewal");
    for (what, release, waiter) in pairs {
        assert!(!waiter.is_finished(), "{what}: the waiter waits");
        let released = Instant::now();
        release.await;
        let delay = (waiter.await.expect("waiter")).saturating_duration_since(released);
        // Well under the lease: only the unlock message wakes the waiter this soon.
        assert!(
            delay < Duration::from_secs(1),
            "{what}: woken after {delay:?}"
        );
    }
    for permit in kept {
        permit.release().await.expect("release");
    }
    let left_behind = || {
        cluster
            .keys("lock:*")
            .iter()
            .all(|k| !k.contains("family-") || k.ends_with(":fence"))
    };
    assert!(
        common::eventually(Duration::from_secs(3), left_behind).await,
        "{:?}",
        cluster.keys("lock:*")
    );
}

async fn names_with_their_own_hash_tag(cluster: &RedisCluster) {
    let locks = cluster_client(cluster, Duration::from_secs(5)).await;
    let cart = locks.lock("{user42}:cart").acquire().await.expect("cart");
    let profile = locks
        .lock("{user42}:profile")
        .try_acquire(Duration::ZERO)
        .await
        .expect("a different lock in the same slot");
    assert_ne!(cart.key(), profile.key());
    for guard in [&cart, &profile] {
        assert_eq!(
            key_slot(guard.key()),
            key_slot("user42"),
            "{} must keep the user's hash tag",
            guard.key()
        );
    }
    let busy = cluster_client(cluster, Duration::from_secs(5))
        .await
        .lock("{user42}:cart")
        .try_acquire(Duration::from_millis(100))
        .await
        .expect_err("held");
    assert!(busy.is_busy(), "{busy:?}");
    cart.release().await.expect("release cart");
    profile.release().await.expect("release profile");
}

/// Regression (L6): `}x` was laid out with an empty hash tag, so its lock, fencing counter and
/// unlock channel hashed to three slots and every acquisition failed with CROSSSLOT. Every name
/// must be either rejected as invalid or work: taken, excluded, a waiter woken through the
/// lock's shard channel, released.
async fn names_with_braces_anywhere(cluster: &RedisCluster) {
    // A long lease: only the unlock message can wake the waiter quickly.
    let holder = cluster_client(cluster, Duration::from_secs(30)).await;
    let waiter = cluster_client(cluster, Duration::from_secs(30)).await;
    let names = [
        "}x",
        "}",
        "}}",
        "}{",
        "}{}",
        "}{u}",
        "a}{b}",
        "{}x",
        "{}}",
        "x}",
        "}%",
        "%7Dx",
        "{u}:fence",
    ];
    for name in names {
        let guard = match holder.lock(name).try_acquire(Duration::from_secs(2)).await {
            Ok(guard) => guard,
            Err(LockError::InvalidName { reason, .. }) => {
                eprintln!("{name:?} rejected: {reason}");
                continue;
            }
            Err(e) => panic!("{name:?}: {e}"),
        };
        let waiting = {
            let waiter = waiter.clone();
            tokio::spawn(async move {
                let guard = waiter.lock(name).try_acquire(Duration::from_secs(10)).await;
                (guard, Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "{name:?} granted to two holders");
        let released = Instant::now();
        guard
            .release()
            .await
            .unwrap_or_else(|e| panic!("release {name:?}: {e}"));
        let (second, at) = waiting.await.expect("waiter task");
        let second = second.unwrap_or_else(|e| panic!("waiter for {name:?}: {e}"));
        let delay = at.saturating_duration_since(released);
        assert!(
            delay < Duration::from_secs(2),
            "{name:?}: waiter woken after {delay:?}, not by the unlock message"
        );
        second
            .release()
            .await
            .unwrap_or_else(|e| panic!("release {name:?}: {e}"));
    }
}

async fn renewals_are_batched_per_slot_and_node(cluster: &RedisCluster) {
    let watchdog = Duration::from_secs(2);
    let locks = cluster_client(cluster, watchdog).await;
    // 3 hash tags (one per master) × 20 locks: 60 locks in 3 slots.
    let tags = names_on_every_master(cluster, "batch-", 1);
    let mut guards = Vec::new();
    for tag in &tags {
        for i in 0..20 {
            guards.push(
                locks
                    .lock(format!("{{{tag}}}:{i}"))
                    .acquire()
                    .await
                    .expect("acquire"),
            );
        }
    }
    let slots: BTreeSet<u16> = guards.iter().map(|g| key_slot(g.key())).collect();
    assert_eq!(slots.len(), 3);
    let evalsha =
        |c: &RedisCluster| -> u64 { c.masters().iter().map(|m| m.command_calls("evalsha")).sum() };
    let before = locks.stats();
    let calls_before = evalsha(cluster);
    // Six rounds (two leases), however long a loaded machine takes for them.
    assert!(
        common::eventually(Duration::from_secs(60), || locks
            .stats()
            .renewal_round_trips
            >= before.renewal_round_trips + 6)
        .await,
        "renewal rounds stalled"
    );
    // Calls first: a round that starts between the two reads is counted in `rounds` only.
    let calls = evalsha(cluster) - calls_before;
    let rounds = locks.stats().renewal_round_trips - before.renewal_round_trips;
    eprintln!("batched renewals: {rounds} rounds, {calls} renew script calls for 60 locks");
    assert!(
        guards.iter().all(|g| !g.is_lost()),
        "every lock must stay held"
    );
    // One renew script call per slot per round, not one per lock.
    assert!(
        calls <= (rounds + 1) * 3 + 3,
        "{calls} renew calls in {rounds} rounds for 60 locks in 3 slots"
    );
    for guard in guards {
        guard.release().await.expect("release");
    }
}

async fn multilock_across_masters_and_script_flush(cluster: &RedisCluster) {
    let watchdog = Duration::from_secs(2);
    let locks = cluster_client(cluster, watchdog).await;
    let names = names_on_every_master(cluster, "multi-", 1);
    let multi = MultiLock::new(names.iter().map(|n| locks.lock(n))).expect("multi");
    let guard = multi.acquire().await.expect("all three, on three masters");
    assert_eq!(guard.guards().len(), 3);
    let masters: BTreeSet<usize> = guard
        .guards()
        .iter()
        .map(|g| cluster.master_index_for_key(g.key()))
        .collect();
    assert_eq!(masters.len(), 3, "one member per master");

    // Scripts flushed on every master: renewals reload them and carry on.
    for master in cluster.masters() {
        master.cmd(&["SCRIPT", "FLUSH"]);
    }
    renewed_for_a_lease(&locks).await;
    assert!(
        !guard.is_lost(),
        "renewal must survive SCRIPT FLUSH on every master"
    );

    // One member deleted behind our back: the multi-lock reports the loss.
    let victim = guard.guards()[1].key().to_owned();
    cluster.master_for_key(&victim).cmd(&["DEL", &victim]);
    let lost = tokio::time::timeout(watchdog * 5, guard.lost())
        .await
        .expect("loss seen within a lease");
    assert!(lost.is_lost(), "{lost:?}");
    assert!(guard.release().await.is_err(), "release reports the loss");
    assert!(
        common::eventually(Duration::from_secs(2), || cluster
            .keys("lock:{multi-*")
            .iter()
            .all(|k| k.ends_with(":fence")))
        .await,
        "members left: {:?}",
        cluster.keys("lock:{multi-*")
    );
}

async fn a_frozen_master_holds_up_no_other_shards_subscriptions(cluster: &RedisCluster) {
    let holder = cluster_client(cluster, Duration::from_secs(30)).await;
    let waiter = cluster_client(cluster, Duration::from_secs(30)).await;
    let names = names_on_every_master(cluster, "shard-", 1);
    let (frozen_name, healthy_name) = (names[0].clone(), names[1].clone());
    let frozen = cluster.master_for_key(&format!("lock:{{{frozen_name}}}"));
    let healthy = cluster.master_for_key(&format!("lock:{{{healthy_name}}}"));
    assert_ne!(frozen.port(), healthy.port());

    let mut held = Vec::new();
    let mut waiting = Vec::new();
    for name in [&frozen_name, &healthy_name] {
        held.push(holder.lock(name).acquire().await.expect("hold"));
        let (waiter, name) = (waiter.clone(), name.clone());
        waiting.push(tokio::spawn(async move {
            waiter
                .lock(&name)
                .try_acquire(Duration::from_secs(20))
                .await
        }));
    }
    assert!(
        common::eventually(Duration::from_secs(3), || waiter.subscribed_channels() == 2).await,
        "both waiters subscribed"
    );

    // One master hangs; the waiter's pub/sub connection to another one drops. Everything is
    // resubscribed: the healthy shard's channel must be confirmed at once, not after the frozen
    // shard's request gives up (a response timeout, 2 s).
    frozen.freeze();
    healthy.kill_clients("pubsub");
    let dropped = Instant::now();
    assert!(
        common::eventually(Duration::from_secs(3), || waiter.subscribed_channels() < 2).await,
        "the dropped connection was noticed"
    );
    let confirmed = common::eventually(Duration::from_millis(1500), || {
        waiter.subscribed_channels() >= 1
    })
    .await;
    let after = dropped.elapsed();
    frozen.thaw();
    assert!(
        confirmed,
        "the healthy shard's channel was not confirmed within 1.5 s while another shard hung"
    );
    eprintln!("healthy shard resubscribed {after:?} after the drop, with another shard frozen");

    cluster.wait_until_stable();
    for guard in held {
        guard.release().await.expect("release");
    }
    for task in waiting {
        task.await
            .expect("task")
            .expect("waiter gets the lock")
            .release()
            .await
            .expect("release");
    }
}

async fn a_frozen_master_costs_only_its_own_locks(cluster: &RedisCluster) {
    let watchdog = Duration::from_millis(600);
    let locks = cluster_client(cluster, watchdog).await;
    let mut guards = Vec::new();
    for name in names_on_every_master(cluster, "frozen-", 2) {
        guards.push(locks.lock(&name).acquire().await.expect("acquire"));
    }
    let frozen = cluster.master_for_key(guards[0].key());
    // Asked before the freeze: the harness asks a node (maybe the frozen one) for the map.
    let (on_frozen, elsewhere): (Vec<_>, Vec<_>) = guards
        .iter()
        .partition(|g| cluster.master_for_key(g.key()).port() == frozen.port());
    // Shorter than the cluster node timeout (no failover), longer than the lease.
    frozen.freeze();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let lost_on_frozen = on_frozen.iter().filter(|g| g.is_lost()).count();
    let lost_elsewhere = elsewhere.iter().filter(|g| g.is_lost()).count();
    frozen.thaw();
    assert_eq!(
        lost_on_frozen,
        on_frozen.len(),
        "locks on the frozen master must be declared lost before their lease runs out"
    );
    assert_eq!(
        lost_elsewhere, 0,
        "a frozen master must not cost the other masters' locks their renewal"
    );
    cluster.wait_until_stable();
    drop(guards);
    assert!(common::eventually(Duration::from_secs(3), || locks.held_locks() == 0).await);
}

async fn locks_follow_ask_redirects_mid_migration(cluster: &RedisCluster) {
    // Long enough that a loaded machine's stalls during the migration (six nodes and the
    // harness's `CLUSTER SETSLOT`/`MIGRATE` calls share the cores) do not cost the lock: with
    // 600 ms, a renewal confirmed more than 540 ms after the last one rightly lost it.
    let watchdog = Duration::from_secs(3);
    let locks = cluster_client(cluster, watchdog).await;
    let tag = names_on_every_master(cluster, "ask-", 1).remove(0);
    let guard = locks
        .lock(format!("{{{tag}}}:held"))
        .acquire()
        .await
        .expect("hold");
    let slot = key_slot(guard.key());
    let from = cluster.master_index_for_key(guard.key());
    let to = *cluster
        .master_indices()
        .iter()
        .find(|&&m| m != from)
        .expect("another master");

    // The lock's keys now live on the target while the source still owns the slot: every
    // command for them gets `ASK`.
    // The harness's calls block (up to 30 s until the cluster agrees): off the runtime's
    // workers, so the watchdog and the waiting task keep running meanwhile.
    let from = tokio::task::block_in_place(|| cluster.begin_slot_migration(slot, to));
    // Two renewals confirmed while every command for the keys gets `ASK`: they reached the
    // importing node (no round count or time window: a loaded machine only makes them later).
    let renewed = locks.stats().renewals;
    assert!(
        common::eventually(Duration::from_secs(30), || locks.stats().renewals
            >= renewed + 2)
        .await,
        "renewal must follow ASK to the importing node"
    );
    assert!(!guard.is_lost(), "held while the slot migrates");
    let busy = cluster_client(cluster, watchdog)
        .await
        .lock(format!("{{{tag}}}:held"))
        .try_acquire(Duration::ZERO)
        .await
        .expect_err("still held, on the importing node");
    assert!(!busy.is_lost(), "{busy:?}");

    // A script over keys that do not exist yet (a new lock's hash and fencing counter) gets
    // `TRYAGAIN` until the migration ends: the acquisition waits it out.
    let fresh = {
        let (locks, tag) = (locks.clone(), tag.clone());
        tokio::spawn(async move {
            locks
                .lock(format!("{{{tag}}}:fresh"))
                .try_acquire(Duration::from_secs(20))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::task::block_in_place(|| cluster.finish_slot_migration(slot, from, to));
    let fresh = fresh
        .await
        .expect("task")
        .expect("a new lock once the migration ends");
    assert!(!guard.is_lost(), "held through the whole migration");
    fresh.release().await.expect("release");
    guard.release().await.expect("release");
    assert!(
        // `lock:#…` are lock hashes only (their fences are `lock:fence:#…`).
        common::eventually(Duration::from_secs(2), || cluster
            .keys(&format!("lock:#{{{tag}}}*"))
            .is_empty())
        .await,
        "keys left: {:?}",
        cluster.keys(&format!("lock:#{{{tag}}}*"))
    );
}

/// Waits for four renewal rounds of `client` (one every third of the lease): its locks have
/// then been kept past a whole lease by renewal alone. Judged by rounds, not by the clock, so a
/// loaded machine makes the wait longer, never the verdict different.
async fn renewed_for_a_lease(client: &LockClient) {
    let rounds = client.stats().renewal_round_trips;
    assert!(
        common::eventually(Duration::from_secs(60), || client
            .stats()
            .renewal_round_trips
            >= rounds + 4)
        .await,
        "renewal rounds stalled"
    );
}

/// The `configEpoch` of a cluster node (`cluster_my_epoch` of `CLUSTER INFO`).
fn node_epoch(cluster: &RedisCluster, index: usize) -> u64 {
    let info = cluster.node(index).cmd(&["CLUSTER", "INFO"]);
    (info.text().expect("CLUSTER INFO").lines())
        .find_map(|l| l.strip_prefix("cluster_my_epoch:"))
        .and_then(|e| e.trim().parse().ok())
        .expect("cluster_my_epoch")
}

/// The failover epoch a token of this crate's layout carries, read with this machine's clock
/// (the nodes share it): `2^52 + epoch × 2^34 + µs since 2026`, the clock within seconds against
/// a span of 4.8 hours.
fn epoch_of(token: u64) -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_micros() as i64
        - 1_767_225_600_000_000;
    let span = 1i64 << 34;
    ((token as i64 - (1i64 << 52) - since + span / 2) / span) as u64
}

fn shard_channels(server: &lock_tests::RedisServer) -> Vec<String> {
    server
        .cmd(&["PUBSUB", "SHARDCHANNELS"])
        .items()
        .iter()
        .filter_map(|c| c.text().map(str::to_owned))
        .collect()
}

async fn resharding_mid_hold(cluster: &RedisCluster) {
    let watchdog = Duration::from_secs(2);
    let holder = cluster_client(cluster, watchdog).await;
    let waiter = cluster_client(cluster, Duration::from_secs(30)).await;
    let name = names_on_every_master(cluster, "reshard-", 1).remove(0);
    let key = format!("lock:{{{name}}}");
    let channel = format!("{key}:unlock");
    let slot = key_slot(&key);
    let from = cluster.master_index_for_key(&key);
    let to = *cluster
        .master_indices()
        .iter()
        .find(|&&m| m != from)
        .expect("another master");

    let guard = holder.lock(&name).acquire().await.expect("hold");
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move {
            let result = waiter
                .lock(&name)
                .try_acquire(Duration::from_secs(15))
                .await;
            (Instant::now(), result)
        })
    };
    assert!(
        common::eventually(Duration::from_secs(3), || shard_channels(
            cluster.node(from)
        )
        .contains(&channel))
        .await,
        "waiter never subscribed on the source master"
    );

    cluster.migrate_slot(slot, to);
    assert_eq!(cluster.master_index_for_key(&key), to);

    // Renewals follow the slot (MOVED → slot map refreshed), so the lock stays held and its
    // lease keeps being extended on the new owner.
    renewed_for_a_lease(&holder).await;
    assert!(!guard.is_lost(), "renewal must follow the migrated slot");
    let pttl = cluster.node(to).cmd(&["PTTL", &key]).int().unwrap_or(-2);
    assert!(
        pttl > 0 && pttl <= watchdog.as_millis() as i64,
        "lease on the new owner: PTTL {pttl}"
    );
    // The waiter's shard subscription moved with the slot.
    assert!(
        common::eventually(Duration::from_secs(5), || shard_channels(cluster.node(to))
            .contains(&channel))
        .await,
        "waiter not resubscribed on the new owner: {:?}",
        shard_channels(cluster.node(to))
    );
    assert!(!waiting.is_finished(), "the waiter must still wait");

    let released = Instant::now();
    guard.release().await.expect("release after resharding");
    let (acquired, result) = waiting.await.expect("waiter task");
    let delay = acquired.saturating_duration_since(released);
    eprintln!("resharding: waiter woken {delay:?} after the release");
    result
        .expect("waiter gets the lock")
        .release()
        .await
        .expect("release");
    assert!(
        delay < Duration::from_millis(500),
        "waiter woken after {delay:?}, not by the unlock message"
    );
}

async fn master_failover_mid_hold(cluster: &mut RedisCluster) {
    // Grants must reach the replica, so the promoted replica still knows the holder.
    let build = || {
        LockClient::cluster_builder(cluster.urls())
            .watchdog_timeout(Duration::from_secs(10))
            .replica_ack(1, Duration::from_millis(500))
            .failover_grace(Duration::from_secs(20))
            .build()
    };
    let holder = build().await.expect("holder");
    let rival = build().await.expect("rival");
    let name = names_on_every_master(cluster, "failover-", 1).remove(0);
    let key = format!("lock:{{{name}}}");
    let guard = holder.lock(&name).acquire().await.expect("hold");

    let rival_task = {
        let rival = rival.clone();
        let name = name.clone();
        tokio::spawn(async move {
            let result = rival.lock(&name).try_acquire(Duration::from_secs(30)).await;
            (Instant::now(), result)
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;

    // A fenced grant in the same slot carries its master's epoch (the node reads its own).
    let tagged = format!("{{{name}}}:epoch");
    let fenced_token = |locks: LockClient, tagged: String| async move {
        let guard = locks
            .lock(tagged)
            .fenced()
            .try_acquire(Duration::from_secs(30))
            .await
            .expect("a fenced grant");
        let token = guard.issued_token().expect("its token");
        guard.release().await.expect("release");
        token
    };
    let old_master = cluster.master_index_for_key(&key);
    let before = fenced_token(holder.clone(), tagged.clone()).await;
    let old_epoch = node_epoch(cluster, old_master);
    assert_eq!(epoch_of(before), old_epoch, "{before}");

    let killed = cluster.kill_master_of(&key);
    let promoted = cluster.wait_for_failover(killed);
    assert_eq!(cluster.master_index_for_key(&key), promoted);

    assert_eq!(
        cluster.node(promoted).cmd(&["EXISTS", &key]).int(),
        Some(1),
        "the acknowledged grant must have survived on the promoted replica"
    );
    // The promoted master has no replica until the old master comes back as one; until then
    // no write on its slots can be acknowledged.
    cluster.node_mut(killed).restart();
    cluster.wait_until_stable();
    // The promoted replica's epoch is above every other node's: so are its tokens.
    let after = fenced_token(rival.clone(), tagged).await;
    let new_epoch = node_epoch(cluster, promoted);
    assert!(new_epoch > old_epoch, "epochs {old_epoch} then {new_epoch}");
    assert_eq!(epoch_of(after), new_epoch, "{after}");
    assert!(after > before, "{after} after {before}");

    // Hold across the failover for a while: either the holder keeps it (renewals moved to the
    // new master) or it sees lost(); the rival must not have it meanwhile.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let lost_at_release = guard.is_lost();
    assert!(
        lost_at_release || !rival_task.is_finished(),
        "silent double hold: the rival got the lock while the holder still held it"
    );
    let released = Instant::now();
    let released_ok = guard.release().await;
    let (acquired_at, rival_result) = rival_task.await.expect("rival task");
    eprintln!(
        "failover: holder lost = {lost_at_release}, release = {released_ok:?}, rival woken {:?} after the release",
        acquired_at.saturating_duration_since(released)
    );
    let rival_guard = rival_result.expect("the rival gets the lock after the release");
    if !lost_at_release {
        released_ok.expect("a lock kept across the failover releases cleanly");
        assert!(
            acquired_at >= released,
            "the rival acquired before the holder released"
        );
        // Woken by the unlock message on the promoted master's shard channel.
        assert!(
            acquired_at.saturating_duration_since(released) < Duration::from_secs(1),
            "rival woken after {:?}",
            acquired_at.saturating_duration_since(released)
        );
    } else if let Err(e) = released_ok {
        assert!(matches!(e, LockError::Lost { .. }), "{e:?}");
    }
    rival_guard.release().await.expect("rival release");

    // New locks on the promoted master work.
    let fresh = holder
        .lock(&name)
        .try_acquire(Duration::from_secs(5))
        .await
        .expect("lock on the promoted master");
    fresh.release().await.expect("release");
}
