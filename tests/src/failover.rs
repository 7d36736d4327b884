//! What the failover suites share (issue 32): the workload of worker processes on the mutex
//! with fenced writes to stores outside the deployment ([`Stores`]: the compare-and-set on a
//! separate Redis, SQLite and PostgreSQL through `lock-fence`), the run around the faults a
//! suite injects, the checker's verdict, and the published table.
//!
//! A suite starts a [`Workload`] against its deployment (the worker's `<lock-url>`), injects
//! its faults one after another, noting each one's [`Window`] (from the fault until the
//! deployment is whole again, plus a lease), then calls [`Workload::finish`], which stops the
//! workers and checks everything they recorded ([`Findings`]): the hard invariants
//! ([`Findings::assert_invariants`]: no stale write accepted, no lost update, no token
//! regression or overlap outside the fault windows, a grant after every fault) and the
//! counted figures per fault ([`Findings::rows`], printed by [`print_table`]).
//!
//! The workload: [`PROCESSES`] `lock-worker chaos` processes, [`TASKS`] tasks each, on
//! [`KEYS`] lock names (`chaos:0`, `chaos:1`, `chaos:2`), each fenced in a store of its own
//! (`chaos:<k>` in store `k mod 3` of [`Stores`]: every fault hits every store); half the
//! sections take their token with the grant (fenced), half ask for it in the section; lease
//! [`WATCHDOG_MS`]. See `src/bin/lock-worker.rs` and [`crate::chaos`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::chaos::sql::SqlStore;
use crate::chaos::{self, FailoverReport, Record, Report, StoreState};
use crate::{PostgresServer, RedisServer};

/// Lock names of the workload: `chaos:0` … `chaos:<KEYS - 1>`, one per store of [`Stores`].
pub const KEYS: usize = 3;
/// Worker processes.
pub const PROCESSES: usize = 3;
/// Tasks per worker process.
pub const TASKS: usize = 3;
/// The lease (the workers' watchdog timeout), as in issue 32's adopter run.
pub const WATCHDOG_MS: u64 = 1500;

/// Waits (bounded) until `cond` holds; whether it did.
pub async fn until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cond()
}

/// The records a worker appended to `path` (a torn last line, from a killed worker, is
/// skipped).
pub fn read_records(path: &Path) -> Vec<Record> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(Record::parse)
        .collect()
}

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

/// One fault: what it was, and the window `[from, to)` on [`crate::mono_ns`] from its
/// injection until the deployment was whole again plus a lease (holders of grants the fault
/// took with it are told within that).
#[derive(Debug, Clone)]
pub struct Window {
    /// The fault, as the table names it.
    pub fault: &'static str,
    /// When it was injected.
    pub from: u64,
    /// When its effects are over.
    pub to: u64,
}

/// The worker processes of one run and the fenced stores they write to.
#[derive(Debug)]
pub struct Workload {
    dir: PathBuf,
    outs: Vec<PathBuf>,
    workers: Vec<Child>,
    stores: Stores,
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
    /// they recorded against the store, with `windows` the faults injected.
    pub async fn finish(mut self, windows: &[Window]) -> Findings {
        tokio::time::sleep(Duration::from_secs(2)).await;
        for w in &mut self.workers {
            let _ = w.start_kill();
        }
        for w in &mut self.workers {
            let _ = tokio::time::timeout(Duration::from_secs(10), w.wait()).await;
        }
        let records = self.records();
        let states = self.stores.read(KEYS).await;
        let stores = per_store(&states);
        let state: HashMap<String, StoreState> = states.into_iter().flatten().collect();
        let spans: Vec<(u64, u64)> = windows.iter().map(|w| (w.from, w.to)).collect();
        Findings {
            checked: chaos::check(&records, &state, &spans),
            failover: chaos::failover_report(&records, &spans),
            stale: chaos::stale_writes_accepted(&state),
            stores,
            windows: windows.to_vec(),
            records_dir: self.dir.clone(),
        }
    }
}

/// What the checker found in one run.
#[derive(Debug)]
pub struct Findings {
    /// The chaos checker's verdict (exclusion outside the windows, store consistency).
    pub checked: Report,
    /// Overlaps, unaware writes, token regressions and recoveries, per window.
    pub failover: FailoverReport,
    /// Writes the fenced stores accepted out of token order.
    pub stale: usize,
    /// Per store: its name, the writes it committed, the stale writes it accepted.
    pub stores: Vec<(&'static str, usize, usize)>,
    /// The faults, in order.
    pub windows: Vec<Window>,
    /// Where the workers' records are: kept until
    /// [`assert_invariants`](Findings::assert_invariants) passes, for a failed run's analysis.
    pub records_dir: PathBuf,
}

impl Findings {
    /// The window the section that started at `start_ns` started in, if any.
    fn window_of(&self, start_ns: u64) -> Option<usize> {
        (self.windows.iter()).position(|w| (w.from..w.to).contains(&start_ns))
    }

    /// Token regressions per window (the later section's start in it), like overlaps.
    pub fn regressions_per_window(&self) -> Vec<usize> {
        let mut counts = vec![0; self.windows.len()];
        for &at in &self.failover.token_regressions_at {
            if let Some(i) = self.window_of(at) {
                counts[i] += 1;
            }
        }
        counts
    }

    /// Each token regression, with the fault whose window it fell in and how long after the
    /// fault the later section started.
    pub fn regressions(&self) -> Vec<String> {
        (self.failover.token_regressions.iter())
            .zip(&self.failover.token_regressions_at)
            .map(|(what, &at)| match self.window_of(at) {
                Some(i) => format!(
                    "{what}\n  in window {i} ({}), {:?} after the fault",
                    self.windows[i].fault,
                    Duration::from_nanos(at - self.windows[i].from)
                ),
                None => format!("{what}\n  outside every fault window"),
            })
            .collect()
    }

    /// One line on the run, for the log.
    pub fn summary(&self) -> String {
        format!(
            "{} sections, {} commits, {} rejected by the store, {} told lost; overlapping pairs {} \
             (in fault windows, excused: {}), per fault {:?}, unaware writes {}, stale writes \
             accepted {} (per store, commits / stale: {}), token regressions {} (per fault {:?}), \
             recoveries {:?}",
            self.checked.records,
            self.checked.commits,
            self.checked.rejected,
            self.checked.lost,
            self.failover.overlaps,
            self.checked.excused_overlaps,
            self.failover.overlaps_per_fault,
            self.failover.unaware_writes,
            self.stale,
            describe_stores(&self.stores),
            self.failover.token_regressions.len(),
            self.regressions_per_window(),
            (self.failover.recovery_ns.iter())
                .map(|ns| ns.map(Duration::from_nanos))
                .collect::<Vec<_>>()
        )
    }

    /// The hard invariants: no stale write accepted, the chaos checker's verdict (no lost
    /// update, tokens committed in order, no overlap outside the fault windows), no token
    /// regression outside the fault windows, something committed, and a grant after every
    /// fault. Then the records are deleted (a failed run keeps them in
    /// [`records_dir`](Findings::records_dir)).
    ///
    /// A regression in a window is counted, not judged, like an overlap: it is one seen
    /// through the network's delay (a deposed master granted, and its reply reached the client
    /// after a rival, granted later by the new master with a larger token, had finished); the
    /// fenced store refuses the lower token, which the stale-write count proves.
    ///
    /// # Panics
    /// With what broke.
    pub fn assert_invariants(&self) {
        assert_eq!(self.stale, 0, "a fenced store accepted a stale write");
        assert_stores(&self.stores);
        assert!(
            self.checked.violations.is_empty(),
            "{}",
            self.checked.violations.join("\n")
        );
        let outside: Vec<String> = (self.regressions().into_iter())
            .filter(|r| r.ends_with("outside every fault window"))
            .collect();
        assert!(outside.is_empty(), "{}", outside.join("\n"));
        assert!(self.checked.commits > 0, "nothing was committed");
        assert!(
            self.failover.recovery_ns.iter().all(Option::is_some),
            "no grant after a fault: {:?}",
            self.failover.recovery_ns
        );
        let _ = std::fs::remove_dir_all(&self.records_dir);
    }

    /// One row per fault in `faults` (in that order), for `topology` with `ack`.
    pub fn rows(&self, topology: &'static str, ack: bool, faults: &[&'static str]) -> Vec<Row> {
        faults
            .iter()
            .map(|&fault| {
                let mine: Vec<usize> = (self.windows.iter().enumerate())
                    .filter(|(_, w)| w.fault == fault)
                    .map(|(i, _)| i)
                    .collect();
                let mut recoveries: Vec<u64> = mine
                    .iter()
                    .filter_map(|&i| self.failover.recovery_ns[i])
                    .collect();
                recoveries.sort_unstable();
                let regressions = self.regressions_per_window();
                let pick = |i: usize| Duration::from_nanos(recoveries.get(i).copied().unwrap_or(0));
                Row {
                    topology,
                    fault,
                    ack,
                    faults: mine.len(),
                    overlaps: mine
                        .iter()
                        .map(|&i| self.failover.overlaps_per_fault[i])
                        .sum(),
                    unaware: self.failover.unaware_writes,
                    stale: self.stale,
                    regressions: mine.iter().map(|&i| regressions[i]).sum(),
                    recovery_p50: pick(recoveries.len() / 2),
                    recovery_max: pick(recoveries.len().saturating_sub(1)),
                }
            })
            .collect()
    }
}

/// `Redis CAS 120 / 0, SQLite 98 / 0, …`: each store's commits and stale writes accepted; a
/// stalled store (see [`assert_stores`]) is marked `(stalled)`.
pub fn describe_stores(stores: &[(&'static str, usize, usize)]) -> String {
    (stores.iter())
        .map(|&(name, commits, stale)| {
            let stalled = if stalled_store(stores, name, commits).is_some() {
                " (stalled)"
            } else {
                ""
            };
            format!("{name} {commits} / {stale}{stalled}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every store accepted no stale write, committed something (so each was under the faults),
/// and none stalled: committed a tiny fraction of what another store did in the same run.
///
/// The workers pick the fenced names at random, evenly over the stores, and a section's time
/// is the lock's and the workload's pause far more than the store's, so healthy stores commit
/// about as many writes each (within 5 % in the published runs, loaded machine or not). A store
/// whose transactions wait out a busy timeout behind a transaction that no one ends commits
/// next to nothing (SQLite 8 against about 2,300 for the others, issue 32). The rule is
/// generous: a store fails only below 1/[`STALL_RATIO`] of the busiest other store's commits,
/// and only when that store committed at least [`STALL_MIN_COMMITS`] (fewer is too few to
/// tell a stall from chance, and the `commits > 0` check stands alone there).
///
/// # Panics
/// With the store that did not, and the figures.
pub fn assert_stores(stores: &[(&'static str, usize, usize)]) {
    for &(name, commits, stale) in stores {
        assert_eq!(stale, 0, "{name} accepted a stale write");
        assert!(commits > 0, "nothing was committed to {name}");
        if let Some((busiest, most)) = stalled_store(stores, name, commits) {
            panic!(
                "{name} stalled: it committed {commits} writes, {busiest} {most} in the same run \
                 (a healthy store commits about as many; the rule fails below 1/{STALL_RATIO}): \
                 {}",
                describe_stores(stores)
            );
        }
    }
}

/// See [`assert_stores`]: a store below 1/`STALL_RATIO` of the busiest other store's commits
/// stalled.
pub const STALL_RATIO: usize = 20;

/// See [`assert_stores`]: the stall rule applies once the busiest other store committed this
/// many writes.
pub const STALL_MIN_COMMITS: usize = 100;

/// The busiest other store and its commits, if the store `name` with `commits` stalled next
/// to it (see [`assert_stores`]).
fn stalled_store(
    stores: &[(&'static str, usize, usize)],
    name: &str,
    commits: usize,
) -> Option<(&'static str, usize)> {
    let (busiest, most) = (stores.iter())
        .filter(|&&(other, _, _)| other != name)
        .map(|&(other, commits, _)| (other, commits))
        .max_by_key(|&(_, commits)| commits)?;
    (most >= STALL_MIN_COMMITS && commits.saturating_mul(STALL_RATIO) < most)
        .then_some((busiest, most))
}

#[cfg(test)]
mod stall_tests {
    use super::*;

    #[test]
    fn a_store_with_a_tiny_fraction_of_the_others_commits_fails_the_run() {
        // The Sentinel mid-size run of issue 32.
        let stores = [
            ("Redis CAS", 2_310, 0),
            ("SQLite", 8, 0),
            ("PostgreSQL", 2_290, 0),
        ];
        assert_eq!(
            stalled_store(&stores, "SQLite", 8),
            Some(("Redis CAS", 2_310))
        );
        assert!(describe_stores(&stores).contains("SQLite 8 / 0 (stalled)"));
        let failed = std::panic::catch_unwind(|| assert_stores(&stores)).unwrap_err();
        let message = failed.downcast_ref::<String>().unwrap();
        assert!(
            message.contains("SQLite stalled: it committed 8 writes, Redis CAS 2310"),
            "{message}"
        );
    }

    #[test]
    fn healthy_stores_and_short_runs_pass() {
        // Published runs, and a store at a tenth of the others: slow, not stalled.
        assert_stores(&[
            ("Redis CAS", 5_561, 0),
            ("SQLite", 5_510, 0),
            ("PostgreSQL", 5_294, 0),
        ]);
        assert_stores(&[
            ("Redis CAS", 1_000, 0),
            ("SQLite", 100, 0),
            ("PostgreSQL", 900, 0),
        ]);
        // Too few commits to tell a stall from chance: only "something was committed".
        assert_stores(&[
            ("Redis CAS", 60, 0),
            ("SQLite", 1, 0),
            ("PostgreSQL", 50, 0),
        ]);
        assert!(!describe_stores(&[("Redis CAS", 60, 0), ("SQLite", 1, 0)]).contains("stalled"));
    }
}

/// One row of the published table: one fault with one `replica_ack` setting.
#[derive(Debug, Clone)]
pub struct Row {
    /// `Sentinel`, `Cluster`.
    pub topology: &'static str,
    /// The fault.
    pub fault: &'static str,
    /// Whether `replica_ack(1, 100 ms)` was on.
    pub ack: bool,
    /// How many times the fault was injected.
    pub faults: usize,
    /// Overlapping pairs whose later section started in one of its windows.
    pub overlaps: usize,
    /// Of the whole run (every fault): writes made unaware of a loss.
    pub unaware: usize,
    /// Of the whole run: stale writes accepted.
    pub stale: usize,
    /// Token regressions whose later section started in one of its windows.
    pub regressions: usize,
    /// Median of the longest pause in grants per fault.
    pub recovery_p50: Duration,
    /// Largest of them.
    pub recovery_max: Duration,
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per100 = self.overlaps as f64 * 100.0 / self.faults.max(1) as f64;
        let ack = if self.ack {
            "replica_ack(1, 100 ms)"
        } else {
            "off"
        };
        write!(
            f,
            "| {} | {} | {ack} | {} | {per100:.0} ({}) | {} | {} | {} | {:.2} s / {:.2} s |",
            self.topology,
            self.fault,
            self.faults,
            self.overlaps,
            self.unaware,
            self.stale,
            self.regressions,
            self.recovery_p50.as_secs_f64(),
            self.recovery_max.as_secs_f64(),
        )
    }
}

/// Prints the table of `rows` (Markdown) to stderr.
pub fn print_table(rows: &[Row]) {
    eprintln!(
        "| topology | fault | replica_ack | faults | overlaps per 100 faults (pairs) | unaware writes (run) | stale writes accepted (run) | token regressions | longest pause in grants p50 / max |"
    );
    eprintln!("|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        eprintln!("{row}");
    }
}
