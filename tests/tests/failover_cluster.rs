//! The failover suite on Redis Cluster (issue 32): worker processes contend on the mutex
//! through a Redis Cluster of 3 masters with a replica each, every node behind proxies
//! (`RedisCluster::start_partitionable`), while the master that owns the workload's slots
//! fails again and again, with `replica_ack` off and on. The faults take turns:
//! - `kill -9` of that master, restarted at once (empty; it keeps its `nodes.conf`, rejoins,
//!   and is demoted to a replica of the node that took its slots);
//! - `SIGSTOP` of it until its replica has taken its slots over, then `SIGCONT`;
//! - a minority partition: it is cut from every other node (cluster bus and replication, both
//!   ways) while clients still reach it, until its replica has taken over and a lease more;
//!   `cluster-node-timeout` makes it refuse writes (`CLUSTERDOWN`) on its own;
//! - one worker process cut off from that master (the one the partition before it promoted;
//!   clients of the other workers still reach it) for two leases: its holds there are lost, the others take the names over; any
//!   section the cut worker started after its lease must have been told of the loss (checked,
//!   so a cut that missed a connection fails the run).
//!
//! Each critical section does a fenced read-modify-write on a store outside the cluster
//! (`lock_tests::failover`, shared with the Sentinel suite): `chaos:0` on the compare-and-set of
//! a separate Redis, `chaos:1` on SQLite and `chaos:2` on PostgreSQL, both through `lock-fence`
//! (one PostgreSQL server per test). Hard invariants, every run: stale writes accepted 0 by every
//! store, each of which committed something, no lost update, no token regression and no overlap
//! outside the fault windows, a grant after every fault. Counted and printed, not judged:
//! overlaps and token regressions in the fault windows (a master resumed after `SIGSTOP`
//! grants until it hears of its demotion; see SAFETY.md), writes made unaware of a loss, the
//! longest pause in grants per fault.
//!
//! Short form (the normal suite): each fault once per `replica_ack` setting, the two settings
//! side by side (about 30 s). Long form: `FAILOVER_LONG=1` (68 faults per setting, 17 of each:
//! 102 failovers in all, plus 34 client cuts) or `FAILOVER_COUNT=<n>` per setting.
//!
//! Clock skew (`tokens_through_a_cluster_failover_to_a_replica_with_a_skewed_clock`): the
//! master's replica restarted with its clock 5 s behind (or ahead of) the master's, the master
//! cut off for 2 s under load (the counter writes it made meanwhile lost) and killed: tokens
//! ordered by the promoted node's epoch neither go back nor repeat. One fault in the short
//! form; `FAILOVER_LONG=1`: four of each kind, with `replica_ack` off and on.

use std::time::{Duration, Instant};

use lock_tests::failover::{
    self, Cut, SKEW_LAG, SKEW_US, Setting, Skew, WATCHDOG_MS, Window, Workload,
};
use lock_tests::topology::{RedisCluster, key_slot};
use lock_tests::{Peers, PostgresServer, RedisServer, Resp, mono_ns};

const WORKER: &str = env!("CARGO_BIN_EXE_lock-worker");

/// The faults, in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Kill,
    Stop,
    Partition,
    ClientCut,
}

const FAULTS: [Fault; 4] = [Fault::Kill, Fault::Stop, Fault::Partition, Fault::ClientCut];

impl Fault {
    fn describe(self) -> &'static str {
        match self {
            Fault::Kill => "kill -9 of the master, restarted empty",
            Fault::Stop => "SIGSTOP of the master past the failover, then SIGCONT",
            Fault::Partition => "master cut from the cluster bus, clients still reach it",
            Fault::ClientCut => "one client cut off from the master for 2 leases",
        }
    }
}

/// A cluster whose workload names (`chaos:0` … `chaos:2`) all live on one master: the slot of
/// every name but the first is moved to the first one's master.
async fn cluster_for_the_workload() -> RedisCluster {
    let cluster = RedisCluster::start_partitionable(3, 1).await;
    tokio::task::block_in_place(|| {
        let home = cluster.master_index_for_key("chaos:0");
        for k in 1..failover::KEYS {
            let slot = key_slot(&format!("chaos:{k}"));
            if cluster.master_index_for_slot(slot) != home {
                cluster.migrate_slot(slot, home);
            }
        }
    });
    cluster
}

/// Whether a write of `key`'s slot is refused by `node` (asked directly, not through its
/// proxy): `CLUSTERDOWN` once it knows it is in a minority, `MOVED` once it is demoted.
fn refuses_writes(node: &RedisServer, key: &str) -> bool {
    let probe = format!("failover-probe:{{{key}}}");
    matches!(node.try_cmd(&["SET", &probe, "1"]), Ok(Resp::Error(_)))
}

/// Cuts node `index` of `cluster` off from its peers, and measures what the cluster does:
/// returns (when the cut node first refused a write, when another node had taken the slot
/// over), in time since the cut, both watched in one loop (every 10 ms or so).
fn partition_and_measure(
    cluster: &RedisCluster,
    index: usize,
    slot_key: &str,
) -> (Duration, Duration) {
    let slot = key_slot(slot_key);
    let cut_at = Instant::now();
    cluster.isolate_node(index);
    let (mut refused, mut taken) = (None, None);
    let deadline = cut_at + Duration::from_secs(45);
    while (refused.is_none() || taken.is_none()) && Instant::now() < deadline {
        if refused.is_none() && refuses_writes(cluster.node(index), slot_key) {
            refused = Some(cut_at.elapsed());
        }
        if taken.is_none() && cluster.taken_over(slot, index).is_some() {
            taken = Some(cut_at.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    (
        refused.expect("the cut master never refused a write"),
        taken.expect("no node took the cut master's slots over"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitionable_cluster_routes_everything_through_its_proxies_and_cuts_a_master_off() {
    let cluster = cluster_for_the_workload().await;
    let urls = cluster.client_urls();
    let proxy_ports: Vec<u16> = (0..urls.len())
        .map(|i| cluster.client_proxy(i).port())
        .collect();
    // CLUSTER SLOTS names the proxies, not the nodes' own ports.
    let slots = cluster.node(0).cmd(&["CLUSTER", "SLOTS"]);
    for range in slots.items() {
        let port = range.items()[2].items()[1].int().expect("port") as u16;
        assert!(
            proxy_ports.contains(&port),
            "CLUSTER SLOTS names port {port}, not a proxy: {proxy_ports:?}"
        );
    }
    let home = cluster.master_index_for_key("chaos:0");
    for k in 1..failover::KEYS {
        assert_eq!(cluster.master_index_for_key(&format!("chaos:{k}")), home);
    }

    let (refused, taken) =
        tokio::task::block_in_place(|| partition_and_measure(&cluster, home, "chaos:0"));
    eprintln!("cut master refused writes after {refused:?}; its slots taken over after {taken:?}");
    // Clients still reach the cut master through its proxy: it answers, and refuses the write.
    let mut client = redis::Client::open(urls[home].as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("clients still reach the cut master");
    let reply: redis::RedisResult<()> = redis::cmd("SET")
        .arg("failover-probe:{chaos:0}")
        .arg("1")
        .query_async(&mut client)
        .await;
    assert!(reply.is_err(), "the cut master took a write: {reply:?}");
    cluster.heal();
    tokio::task::block_in_place(|| cluster.wait_until_stable());
    assert!(
        cluster.replica_indices().contains(&home),
        "the old master rejoined as a replica"
    );
}

/// One peer process cut off: only its connections go silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_cuts_off_one_process_and_lets_the_others_through() {
    let server = RedisServer::start();
    let proxy = lock_tests::TcpProxy::start(([127, 0, 0, 1], server.port()).into())
        .await
        .unwrap();
    proxy.isolate(Peers::of_process(std::process::id()));
    // This process's connection is accepted and goes nowhere.
    let mine = redis::Client::open(proxy.url()).unwrap();
    let attempt = tokio::time::timeout(
        Duration::from_millis(500),
        mine.get_multiplexed_async_connection(),
    )
    .await;
    assert!(!matches!(attempt, Ok(Ok(_))), "this process got through");
    // Another process's goes through.
    let pong = tokio::process::Command::new("redis-cli")
        .args(["-u", &proxy.url(), "PING"])
        .output()
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&pong.stdout).trim(), "PONG");
    proxy.heal();
    let mut conn = mine.get_multiplexed_async_connection().await.unwrap();
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
}

/// Runs `count` faults (in turn) under load with `replica_ack` on or off; the findings, and
/// per partition how long the cut master took to refuse writes and its replica to take over.
async fn faults_under_load(
    ack: bool,
    count: usize,
) -> (failover::Findings, Vec<(Duration, Duration)>) {
    // PostgreSQL starts (a second or two) while the cluster does.
    let postgres = tokio::task::spawn_blocking(PostgresServer::start);
    let mut cluster = cluster_for_the_workload().await;
    let postgres = postgres.await.expect("start PostgreSQL");
    let spec = format!(
        "cluster:{}{}",
        cluster.client_urls().join(","),
        if ack { "+ack" } else { "" }
    );
    let run = format!("failover-cluster-{}", if ack { "ack" } else { "plain" });
    let workload = Workload::start(WORKER, &run, &spec, &postgres).await;
    let lease = Duration::from_millis(WATCHDOG_MS);
    let slot = key_slot("chaos:0");
    let mut windows = Vec::new();
    let mut partitions = Vec::new();
    for round in 0..count {
        let fault = FAULTS[round % FAULTS.len()];
        let started = Instant::now();
        let old = tokio::task::block_in_place(|| cluster.master_index_for_key("chaos:0"));
        let at = mono_ns();
        let mut cut = None;
        let new = match fault {
            Fault::Kill => tokio::task::block_in_place(|| {
                cluster.kill_node(old);
                let new = cluster.wait_for_failover(old);
                cluster.node_mut(old).restart();
                new
            }),
            Fault::Stop => tokio::task::block_in_place(|| {
                cluster.node(old).freeze();
                let new = cluster.wait_for_takeover(slot, old);
                cluster.node(old).thaw();
                new
            }),
            Fault::Partition => {
                let (refused, taken) =
                    tokio::task::block_in_place(|| partition_and_measure(&cluster, old, "chaos:0"));
                partitions.push((refused, taken));
                // The split brain lasts a lease more before the partition heals.
                tokio::time::sleep(lease).await;
                cluster.heal();
                tokio::task::block_in_place(|| cluster.master_index_for_key("chaos:0"))
            }
            Fault::ClientCut => {
                let proxy = cluster.client_proxy(old);
                proxy.isolate(Peers::of_process(workload.worker_pid(0)));
                tokio::time::sleep(2 * lease).await;
                // The cut worker reaches no master of its names: judged by the checker
                // (`failover::Cut`: told of every loss a lease into the cut).
                cut = Some(Cut {
                    worker: 0,
                    from: at,
                    to: mono_ns(),
                });
                proxy.heal();
                old
            }
        };
        // Whole again: every node agrees, the old master replicates from the new one.
        tokio::task::block_in_place(|| cluster.wait_until_stable());
        // A lease of load after the cluster is whole, before the next fault.
        tokio::time::sleep(lease).await;
        windows.push(Window {
            cut,
            ..Window::new(fault.describe(), at, mono_ns() + WATCHDOG_MS * 1_000_000)
        });
        eprintln!(
            "ack={ack} round {round} ({fault:?}): node {old} -> {new} in {:?}",
            started.elapsed()
        );
    }
    let findings = workload.finish(&windows).await;
    tokio::task::block_in_place(|| drop(postgres));
    (findings, partitions)
}

fn faults_per_setting() -> usize {
    std::env::var("FAILOVER_COUNT")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if std::env::var("FAILOVER_LONG").is_ok() {
            17 * FAULTS.len()
        } else {
            FAULTS.len()
        })
}

async fn fencing_holds_through_cluster_faults(ack: bool) {
    let started = Instant::now();
    let (findings, partitions) = faults_under_load(ack, faults_per_setting()).await;
    eprintln!("ack={ack}: {}", findings.summary());
    for regression in findings.regressions() {
        eprintln!("ack={ack}: {regression}");
    }
    for duplicate in &findings.failover.duplicate_tokens {
        eprintln!("ack={ack}: {duplicate}");
    }
    eprintln!(
        "ack={ack}: partitions (cut master refused writes after, slots taken over after): {partitions:?}"
    );
    let faults: Vec<&'static str> = FAULTS.iter().map(|f| f.describe()).collect();
    failover::print_table(&findings.rows("Cluster", Setting::acked(ack), &faults));
    for (i, w) in findings.windows.iter().enumerate() {
        if let Some(cut) = w.cut {
            eprintln!("ack={ack} window {i}: {:?}", findings.cut_report(cut));
        }
    }
    eprintln!("cluster failover suite, ack={ack}: {:?}", started.elapsed());
    findings.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_holds_through_cluster_faults_without_replica_ack() {
    fencing_holds_through_cluster_faults(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_holds_through_cluster_faults_with_replica_ack() {
    fencing_holds_through_cluster_faults(true).await;
}

/// What a Cluster clock-skew fault is called in the table.
fn describe(skew: Skew) -> &'static str {
    match skew {
        Skew::Behind => {
            "a replica with its clock 5 s behind its master's promoted, the master cut off 2 s then killed"
        }
        Skew::Ahead => {
            "a replica with its clock 5 s ahead of its master's promoted, the master cut off 2 s then killed"
        }
    }
}

/// One clock-skew fault on the master that owns the workload's slots: its replica restarted
/// with its clock [`SKEW_US`] off the master's (`clocks`: each node's offset from this
/// machine's clock, in µs) and back in sync; then the master cut off from every other node (its
/// replica's stream included) for [`SKEW_LAG`] under load, while its clients still reach it,
/// and killed, its replica promoted; the old master restarted empty, with the machine's clock.
/// Returns the old master, the new one, and when (`mono_ns`) the cut began, the old master was
/// killed and the new one had its slots.
fn inject_skewed(
    cluster: &mut RedisCluster,
    clocks: &mut [i64],
    skew: Skew,
) -> (usize, usize, [u64; 3]) {
    let old = cluster.master_index_for_key("chaos:0");
    let replica = cluster.replicas_of(old)[0];
    let offset = skew.offset_from(clocks[old]);
    cluster.node_mut(replica).restart_with_clock(offset);
    clocks[replica] = offset;
    cluster.wait_until_stable();
    let measured = cluster.node(replica).clock_offset_us() - cluster.node(old).clock_offset_us();
    assert!(
        (measured - (offset - clocks[old])).abs() < 500_000,
        "the replica's clock is {measured} µs off its master's, not {}",
        offset - clocks[old]
    );
    let at = mono_ns();
    cluster.isolate_node(old);
    std::thread::sleep(SKEW_LAG);
    cluster.kill_node(old);
    let killed = mono_ns();
    let new = cluster.wait_for_failover(old);
    let promoted = mono_ns();
    assert_eq!(new, replica, "the skewed replica was not the one promoted");
    cluster.heal();
    cluster.node_mut(old).restart();
    clocks[old] = 0;
    cluster.wait_until_stable();
    (old, new, [at, killed, promoted])
}

/// A failover to a replica whose clock is behind its master's by more than a lease (and one
/// ahead), with the last counter writes lost in the failover, as the Sentinel suite's
/// `tokens_through_a_failover_to_a_replica_with_a_skewed_clock` does. A cluster node orders
/// its tokens by its own epoch (`cluster_my_epoch`), which the promotion raises above its old
/// master's, so the promoted clock behind cannot send tokens back. Judged: no token regression
/// (the deposed master's grants ranking below its successor's are counted apart), no token
/// issued twice, and `Findings::assert_invariants`. One fault, the clock behind, without
/// `replica_ack`; `FAILOVER_LONG=1`: four of each kind, without and with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_through_a_cluster_failover_to_a_replica_with_a_skewed_clock() {
    let long = std::env::var("FAILOVER_LONG").is_ok();
    let (rounds, skews, acks): (usize, &[Skew], &[bool]) = if long {
        (4, &[Skew::Behind, Skew::Ahead], &[false, true])
    } else {
        (1, &[Skew::Behind], &[false])
    };
    let started = Instant::now();
    let postgres = tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .expect("start PostgreSQL");
    let mut rows = Vec::new();
    for &ack in acks {
        for &skew in skews {
            let mut cluster = cluster_for_the_workload().await;
            let spec = format!(
                "cluster:{}{}",
                cluster.client_urls().join(","),
                if ack { "+ack" } else { "" }
            );
            let run = format!(
                "skew-cluster-{skew:?}-{}",
                if ack { "ack" } else { "plain" }
            );
            let workload = Workload::start(WORKER, &run, &spec, &postgres).await;
            let mut clocks = vec![0i64; cluster.nodes().len()];
            let (mut windows, mut cuts) = (Vec::new(), Vec::new());
            for round in 0..rounds {
                let (old, new, [at, killed, promoted]) =
                    tokio::task::block_in_place(|| inject_skewed(&mut cluster, &mut clocks, skew));
                cuts.push((at, killed));
                // Until the promoted clock behind has caught up with every token the old master
                // issued (its clock, at most the cut past the last synced write), and a lease
                // more, and at least a lease past the whole cluster.
                let caught_up = promoted
                    + (SKEW_US as u64 + SKEW_LAG.as_nanos() as u64 / 1_000 + WATCHDOG_MS * 1_000)
                        * 1_000;
                tokio::time::sleep(Duration::from_millis(WATCHDOG_MS)).await;
                let now = mono_ns();
                if now < caught_up {
                    tokio::time::sleep(Duration::from_nanos(caught_up - now)).await;
                }
                windows.push(Window::new(describe(skew), at, mono_ns()));
                eprintln!(
                    "{skew:?} ack={ack} round {round}: node {old} -> {new} (promoted after {:?}; clocks now {clocks:?} µs)",
                    Duration::from_nanos(promoted - at)
                );
            }
            let findings = workload.finish(&windows).await;
            eprintln!("{skew:?} ack={ack}: {}", findings.summary());
            rows.extend(findings.rows("Cluster", Setting::acked(ack), &[describe(skew)]));
            // Judged: every regression but those whose later section the cut-off master could
            // still have granted (cut, not yet killed: the deposed side's last grants, which
            // rank below its successor's by the epoch; the cluster's clients record no master
            // to tell them apart, so they are printed, not judged).
            let failover = &findings.failover;
            let mut judged = Vec::new();
            for (what, &at) in failover
                .token_regressions
                .iter()
                .zip(&failover.token_regressions_at)
            {
                let deposed_side = cuts.iter().any(|&(from, to)| (from..to).contains(&at));
                eprintln!(
                    "{skew:?} ack={ack}: regression{}: {what}",
                    if deposed_side {
                        " (the cut-off master's grant)"
                    } else {
                        ""
                    }
                );
                if !deposed_side {
                    judged.push(what.clone());
                }
            }
            assert!(judged.is_empty(), "{}", judged.join("\n"));
            assert!(
                findings.failover.duplicate_tokens.is_empty(),
                "{}",
                findings.failover.duplicate_tokens.join("\n")
            );
            findings.assert_invariants();
        }
    }
    failover::print_table(&rows);
    eprintln!("cluster clock-skew failovers: {:?}", started.elapsed());
    tokio::task::block_in_place(|| drop(postgres));
}
