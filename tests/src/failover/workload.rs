//! The run: the fenced stores outside the deployment ([`Stores`]) and the worker processes
//! ([`Workload`]), from their start to the records they leave.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::chaos::sql::SqlStore;
use crate::chaos::{self, Record, StoreState};
use crate::{PostgresServer, RedisServer};

use super::family::FamilyFindings;
use super::findings::Findings;
use super::{KEYS, PROCESSES, TASKS, WATCHDOG_MS, Window, read_records, until};

/// The fenced stores of one run, none of them part of the faulted deployment: the chaos
/// suite's compare-and-set on a Redis of its own, a SQLite file, and a database on a
/// PostgreSQL server (started once per test: [`PostgresServer::start`]), the last two fenced
/// through `lock-fence` ([`SqlStore`]). Lock `chaos:<k>` writes to store `k mod 3`, in the
/// order of [`Stores::NAMES`].
#[derive(Debug)]
pub struct Stores {
    redis: RedisServer,
    sqlite: String,
    postgres: String,
}

impl Stores {
    /// The stores' names, in the order of [`urls`](Stores::urls).
    pub const NAMES: [&'static str; 3] = ["Redis CAS", "SQLite", "PostgreSQL"];

    /// Starts a Redis, and prepares a SQLite file in `dir` and a new database `database` on
    /// `postgres` (the fence table and the workload's tables).
    ///
    /// # Panics
    /// If a store cannot be started or prepared.
    pub async fn start(dir: &Path, postgres: &PostgresServer, database: &str) -> Stores {
        let redis = tokio::task::block_in_place(RedisServer::start);
        let sqlite = format!("sqlite://{}", dir.join("store.db").display());
        let postgres = tokio::task::block_in_place(|| postgres.create_database(database));
        for url in [&sqlite, &postgres] {
            let store = SqlStore::connect(url)
                .await
                .expect("connect to a SQL store");
            store.prepare().await.expect("prepare a SQL store");
            store.close().await;
        }
        Stores {
            redis,
            sqlite,
            postgres,
        }
    }

    /// The worker's `<store-url>`: the three URLs, comma-separated.
    pub fn urls(&self) -> String {
        [self.redis.url(), self.sqlite.clone(), self.postgres.clone()].join(",")
    }

    /// The Redis store (the lock family's fenced resources live there too).
    pub fn redis(&self) -> &RedisServer {
        &self.redis
    }

    /// What each store holds for the locks `chaos:0` … `chaos:<keys - 1>` it fences, by store
    /// (in the order of [`NAMES`](Stores::NAMES)).
    ///
    /// # Panics
    /// If a SQL store cannot be read.
    pub async fn read(&self, keys: usize) -> Vec<HashMap<String, StoreState>> {
        let mine = |store: usize| -> Vec<String> {
            (0..keys)
                .filter(|k| k % Self::NAMES.len() == store)
                .map(|k| format!("chaos:{k}"))
                .collect()
        };
        let mut states = vec![tokio::task::block_in_place(|| {
            chaos::read_store_keys(&self.redis, &mine(0))
        })];
        for (i, url) in [&self.sqlite, &self.postgres].into_iter().enumerate() {
            let store = SqlStore::connect(url)
                .await
                .expect("connect to a SQL store");
            states.push(store.read(&mine(i + 1)).await.expect("read a SQL store"));
            store.close().await;
        }
        states
    }
}

/// Per store (in the order of [`Stores::NAMES`]): its name, the writes it committed and the
/// stale writes it accepted.
pub fn per_store(states: &[HashMap<String, StoreState>]) -> Vec<(&'static str, usize, usize)> {
    (Stores::NAMES.iter().zip(states))
        .map(|(&name, state)| {
            let commits: usize = state.values().map(|s| s.log.len()).sum();
            (name, commits, chaos::stale_writes_accepted(state))
        })
        .collect()
}

/// A worker process's records and, through Sentinel, its client's masters over time
/// (`(mono_ns, "host:port")`, [`chaos::read_masters`]; empty otherwise).
#[derive(Debug, Clone, Default)]
pub struct WorkerLog {
    /// Its critical sections.
    pub records: Vec<Record>,
    /// The master its client used, from each switch on.
    pub masters: Vec<(u64, String)>,
}

pub(super) fn beside(out: &Path, suffix: &str) -> PathBuf {
    let mut name = out.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The worker processes of one run and the fenced stores they write to.
#[derive(Debug)]
pub struct Workload {
    dir: PathBuf,
    outs: Vec<PathBuf>,
    workers: Vec<Child>,
    stores: Stores,
    family: bool,
}

impl Workload {
    /// Starts the [`Stores`] (a database named after `run` on `postgres`) and [`PROCESSES`]
    /// `worker` (`lock-worker`) processes running the chaos workload against `lock_url` (the
    /// worker's `<lock-url>` form), recording into a fresh temp dir named after `run`; returns
    /// once every worker has committed something.
    ///
    /// # Panics
    /// If a worker cannot be spawned, or the workers commit nothing within 30 s.
    pub async fn start(
        worker: &str,
        run: &str,
        lock_url: &str,
        postgres: &PostgresServer,
    ) -> Workload {
        Workload::launch(worker, run, lock_url, postgres, false).await
    }

    /// Like [`start`](Workload::start), with the lock family's tasks in every worker (a
    /// semaphore and a read/write lock, fenced on the Redis store), checked by
    /// [`finish`](Workload::finish) too ([`FamilyFindings`]).
    ///
    /// # Panics
    /// As [`start`](Workload::start).
    pub async fn start_with_family(
        worker: &str,
        run: &str,
        lock_url: &str,
        postgres: &PostgresServer,
    ) -> Workload {
        Workload::launch(worker, run, lock_url, postgres, true).await
    }

    async fn launch(
        worker: &str,
        run: &str,
        lock_url: &str,
        postgres: &PostgresServer,
        family: bool,
    ) -> Workload {
        let dir = std::env::temp_dir().join(format!("lock-{run}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("workload dir");
        let database: String = (run.chars())
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        let stores = Stores::start(&dir, postgres, &database).await;
        let outs: Vec<PathBuf> = (0..PROCESSES)
            .map(|i| dir.join(format!("w{i}.tsv")))
            .collect();
        let workers = outs
            .iter()
            .map(|out| {
                Command::new(worker)
                    .args(["chaos", lock_url, &stores.urls()])
                    .args([
                        KEYS.to_string(),
                        TASKS.to_string(),
                        // Ended by the suite (killed) once the faults are over.
                        (3_600_000u64).to_string(),
                        WATCHDOG_MS.to_string(),
                    ])
                    .arg(out)
                    .args(family.then_some("family"))
                    .stdout(Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .expect("spawn lock-worker")
            })
            .collect();
        let workload = Workload {
            dir,
            outs,
            workers,
            stores,
            family,
        };
        let loaded = until(Duration::from_secs(30), || {
            workload.outs.iter().all(|o| !read_records(o).is_empty())
        })
        .await;
        assert!(loaded, "the workers never got going");
        workload
    }

    /// The process id of worker `index`.
    pub fn worker_pid(&self, index: usize) -> u32 {
        self.workers[index].id().expect("the worker runs")
    }

    /// The records worker `index` has written so far.
    pub fn worker_records(&self, index: usize) -> Vec<Record> {
        read_records(&self.outs[index])
    }

    /// Every record written so far.
    pub fn records(&self) -> Vec<Record> {
        self.outs.iter().flat_map(|o| read_records(o)).collect()
    }

    /// Two seconds of quiet load after the last fault, then stops the workers and checks what
    /// they recorded against the stores, with `windows` the faults injected.
    pub async fn finish(mut self, windows: &[Window]) -> Findings {
        tokio::time::sleep(Duration::from_secs(2)).await;
        for w in &mut self.workers {
            let _ = w.start_kill();
        }
        for w in &mut self.workers {
            let _ = tokio::time::timeout(Duration::from_secs(10), w.wait()).await;
        }
        let workers: Vec<WorkerLog> = (self.outs.iter())
            .map(|o| WorkerLog {
                records: read_records(o),
                masters: chaos::read_masters(&beside(o, ".masters")),
            })
            .collect();
        let records: Vec<Record> = workers.iter().flat_map(|w| w.records.clone()).collect();
        let states = self.stores.read(KEYS).await;
        let stores = per_store(&states);
        let state: HashMap<String, StoreState> = states.into_iter().flatten().collect();
        let mut spans: Vec<(u64, u64)> = windows.iter().map(|w| (w.from, w.to)).collect();
        let unplanned = unplanned_failovers(&workers, &spans);
        if !unplanned.is_empty() {
            eprintln!(
                "{} switch(es) of master the suite did not inject (the sentinels' own failover: \
                 under load a master can miss its down-after), judged as fault windows: {unplanned:?}",
                unplanned.len()
            );
        }
        spans.extend(unplanned);
        let family =
            (self.family).then(|| FamilyFindings::read(&self.outs, &spans, self.stores.redis()));
        Findings {
            // Token regressions in the windows are counted (`failover_report`) and judged per
            // deployment by the suites; holding order is not promised there, like exclusion.
            checked: chaos::check_with(&records, &state, &spans, &spans),
            failover: chaos::failover_report(&records, &spans),
            stale: chaos::stale_writes_accepted(&state),
            stores,
            windows: windows.to_vec(),
            records_dir: self.dir.clone(),
            workers,
            family,
        }
    }
}

/// The failovers the suite did not inject: every switch of master a client made (after its
/// first) outside the injected windows opens one, from [`UNPLANNED_BEFORE`] before it to two
/// leases after it. Under load a master that misses the sentinels' `down-after-milliseconds`
/// (1 s here) is replaced like a failed one, and its last grants may be lost with it: what
/// Redis gives up then is judged as in an injected failover, and the failovers are reported.
fn unplanned_failovers(workers: &[WorkerLog], injected: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let after = 2 * WATCHDOG_MS * 1_000_000;
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for worker in workers {
        for &(at, _) in worker.masters.iter().skip(1) {
            let inside =
                |spans: &[(u64, u64)]| spans.iter().any(|&(from, to)| from <= at && at < to);
            if !inside(injected) && !inside(&spans) {
                spans.push((
                    at.saturating_sub(UNPLANNED_BEFORE.as_nanos() as u64),
                    at + after,
                ));
            }
        }
    }
    spans
}

/// How long before a switch the suite did not inject its failover may have begun: the
/// sentinels' `down-after-milliseconds`, an election retried, the switch itself.
const UNPLANNED_BEFORE: Duration = Duration::from_secs(6);
