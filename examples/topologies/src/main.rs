//! The same locked read-modify-write on every topology.
//!
//! ```text
//! cargo run -p example-topologies -- single
//! cargo run -p example-topologies -- cluster  [--kill-master]
//! cargo run -p example-topologies -- sentinel [--kill-master]
//! cargo run -p example-topologies -- redlock  [--kill-master]
//! ```
//!
//! It starts the topology itself on free loopback ports (one server; a 3-master cluster with a
//! replica each; a master, a replica and 3 sentinels; 5 independent servers), then 4 tasks on
//! 2 clients each add 1 to a counter 25 times by reading it, waiting, and writing it back,
//! holding the lock. With `--kill-master` the master holding the lock (or, for RedLock, two of
//! the five servers) is killed halfway: the clients ride out the failover and the count still
//! comes out right.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, RedLock};
use lock_tests::RedisServer;
use lock_tests::topology::{RedisCluster, SentinelGroup};

const TASKS: usize = 4;
const ROUNDS: u32 = 25;
const LOCK: &str = "counter";

/// Where the counter lives; the lock protects its read-modify-write.
#[derive(Clone)]
struct Counter {
    /// Incremented only under the lock, to show what the lock protects.
    value: Arc<AtomicU32>,
}

impl Counter {
    /// Read, think, write: without the lock concurrent calls would lose increments.
    async fn add_one(&self) {
        let seen = self.value.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(2)).await;
        self.value.store(seen + 1, Ordering::SeqCst);
    }
}

enum Lockers {
    Clients(Vec<LockClient>),
    RedLock(Vec<RedLock>),
}

impl Lockers {
    async fn locked_add(&self, who: usize, counter: &Counter) -> Result<(), LockError> {
        match self {
            Lockers::Clients(clients) => {
                let guard = clients[who % clients.len()]
                    .lock(LOCK)
                    .try_acquire(Duration::from_secs(30))
                    .await?;
                guard.run(counter.add_one()).await?;
                guard.release().await
            }
            Lockers::RedLock(locks) => {
                let guard = locks[who % locks.len()]
                    .try_acquire(Duration::from_secs(30))
                    .await?;
                guard.run(counter.add_one()).await?;
                guard.release().await
            }
        }
    }
}

/// Keeps the processes of a topology alive, and kills what `--kill-master` kills.
enum Topology {
    Single(RedisServer),
    Cluster(RedisCluster),
    Sentinel(SentinelGroup),
    RedLock(Vec<RedisServer>),
}

impl Topology {
    fn kill_master(&mut self) -> String {
        match self {
            Topology::Single(server) => format!(
                "a single server (port {}) has no replica to fail over to: not killing it",
                server.port()
            ),
            Topology::Cluster(cluster) => {
                let killed = cluster.kill_master_of(&format!("lock:{{{LOCK}}}"));
                format!("killed cluster node {killed}, the master of the lock's slot")
            }
            Topology::Sentinel(group) => {
                let port = group.kill_master();
                format!("killed the master on port {port}")
            }
            Topology::RedLock(servers) => {
                servers[0].kill();
                servers[1].kill();
                "killed 2 of the 5 RedLock servers".into()
            }
        }
    }
}

async fn client(builder: lock_runtime::LockClientBuilder) -> LockClient {
    builder
        .failover_grace(Duration::from_secs(20))
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind = args.first().map(String::as_str).unwrap_or("single");
    let kill = args.iter().any(|a| a == "--kill-master");

    let started = Instant::now();
    let (mut topology, lockers) = start(kind).await;
    println!("{kind}: started in {:?}", started.elapsed());

    let counter = Counter {
        value: Arc::new(AtomicU32::new(0)),
    };
    let lockers = Arc::new(lockers);
    let errors = Arc::new(AtomicU32::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for who in 0..TASKS {
        let (lockers, counter, errors) = (lockers.clone(), counter.clone(), errors.clone());
        tasks.push(tokio::spawn(add_rounds(who, lockers, counter, errors)));
    }
    if kill {
        let total = TASKS as u32 * ROUNDS;
        while counter.value.load(Ordering::SeqCst) < total / 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        println!("{}", topology.kill_master());
    }
    for task in tasks {
        task.await.expect("task");
    }
    let expected = TASKS as u32 * ROUNDS;
    let got = counter.value.load(Ordering::SeqCst);
    println!(
        "{kind}: counter = {got} (expected {expected}), {} errors, {:?}",
        errors.load(Ordering::Relaxed),
        started.elapsed()
    );
    if got != expected && errors.load(Ordering::Relaxed) == 0 {
        if kill && kind != "redlock" {
            // Possible by design: the killed master may take a grant with it before its replica
            // received it (replica_ack narrows that; fencing tokens stop the stale writer).
            println!(
                "{} increments lost to the failover: see TOPOLOGIES.md on replica_ack and fencing",
                expected - got
            );
        } else {
            eprintln!("lost updates without any reported error: that would be a bug");
            std::process::exit(1);
        }
    }
}

/// One task's [`ROUNDS`] locked increments; an error is counted, printed and retried (a lost
/// lock's round counts as done: its increment may have landed).
async fn add_rounds(who: usize, lockers: Arc<Lockers>, counter: Counter, errors: Arc<AtomicU32>) {
    let mut done = 0;
    while done < ROUNDS {
        match lockers.locked_add(who, &counter).await {
            Ok(()) => done += 1,
            Err(e) => {
                // Lost mid-way (the increment may or may not have landed) or Redis
                // unavailable for longer than the failover grace: say so and retry.
                errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("task {who}: {e}");
                if e.is_lost() {
                    done += 1;
                }
            }
        }
    }
}

/// Starts the deployment `kind` names and two clients of it (or two RedLocks over five
/// servers).
async fn start(kind: &str) -> (Topology, Lockers) {
    match kind {
        "single" => {
            let server = RedisServer::start();
            let url = server.url();
            let clients = vec![
                client(LockClient::builder(&url)).await,
                client(LockClient::builder(&url)).await,
            ];
            (Topology::Single(server), Lockers::Clients(clients))
        }
        "cluster" => {
            let cluster = RedisCluster::start(3, 1);
            let mut clients = Vec::new();
            for _ in 0..2 {
                clients.push(client(LockClient::cluster_builder(cluster.urls())).await);
            }
            (Topology::Cluster(cluster), Lockers::Clients(clients))
        }
        "sentinel" => {
            let group = SentinelGroup::start(3);
            let mut clients = Vec::new();
            for _ in 0..2 {
                clients.push(
                    client(LockClient::sentinel_builder(
                        group.sentinel_urls(),
                        group.master_name(),
                    ))
                    .await,
                );
            }
            (Topology::Sentinel(group), Lockers::Clients(clients))
        }
        "redlock" => {
            let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
            let mut locks = Vec::new();
            for _ in 0..2 {
                let mut nodes = Vec::new();
                for server in &servers {
                    nodes.push(client(LockClient::builder(&server.url())).await);
                }
                locks.push(RedLock::new(nodes, LOCK).expect("redlock"));
            }
            (Topology::RedLock(servers), Lockers::RedLock(locks))
        }
        other => {
            eprintln!("unknown topology {other:?}: use single, cluster, sentinel or redlock");
            std::process::exit(2);
        }
    }
}
