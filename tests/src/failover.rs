//! What the failover suites share (issue 32): the workload of worker processes on the mutex
//! with fenced writes to stores outside the deployment ([`Stores`]: the compare-and-set on a
//! separate Redis, SQLite and PostgreSQL through `lock-fence`), and with the lock family if a
//! suite asks for it, the run around the faults a suite injects, the checker's verdict, and the
//! published tables.
//!
//! A suite starts a [`Workload`] against its deployment (the worker's `<lock-url>`, with a
//! [`Setting`]'s suffix), injects its faults one after another, noting each one's [`Window`]
//! (from the fault until the deployment is whole again, plus a lease; with the [`Promotion`]
//! it caused and the [`Cut`] of one worker, if any), then calls [`Workload::finish`], which
//! stops the workers and checks everything they recorded ([`Findings`]): the hard invariants
//! ([`Findings::assert_invariants`]: no stale write accepted, no lost update, no token
//! regression or overlap outside the fault windows, a grant after every fault, a cut worker
//! told of its losses, the lock family's promises) and the counted figures per fault
//! ([`Findings::rows`], printed by [`print_table`]; the lock family's by
//! [`print_family_table`]).
//!
//! The workload: [`PROCESSES`] `lock-worker chaos` processes, [`TASKS`] tasks each, on
//! [`KEYS`] lock names (`chaos:0`, `chaos:1`, `chaos:2`), each fenced in a store of its own
//! (`chaos:<k>` in store `k mod 3` of [`Stores`]: every fault hits every store); half the
//! sections take their token with the grant (fenced), half ask for it in the section; lease
//! [`WATCHDOG_MS`]. With [`Workload::start_with_family`], each process adds two tasks on a
//! semaphore of [`PERMITS`] permits and two on a read/write lock, each section using a fenced
//! resource on the Redis store ([`crate::chaos::family_store`]). Through Sentinel, each worker
//! notes which master its client used when, so every grant is attributed to a master
//! ([`Findings::sides`]). See `src/bin/lock-worker.rs` and [`crate::chaos`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::chaos::family_store::{SemaphoreLog, check_semaphore_log, rw_keys, semaphore_keys};
use crate::chaos::sql::SqlStore;
use crate::chaos::{self, FailoverReport, Record, Report, Sides, StoreState};
use crate::family::{FamilyReport, PERMITS, Section, check_family};
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
    /// The master it deposed, if the suite knows (grants are attributed to masters through
    /// Sentinel only: [`Findings::sides`]).
    pub promotion: Option<Promotion>,
    /// The worker process it cut off, if it did.
    pub cut: Option<Cut>,
}

impl Window {
    /// The window of `fault`, `[from, to)`, with neither a promotion nor a cut noted.
    pub fn new(fault: &'static str, from: u64, to: u64) -> Window {
        Window {
            fault,
            from,
            to,
            promotion: None,
            cut: None,
        }
    }
}

/// A failover as the suite saw it: when the new master was promoted, and the address (the
/// proxy's `host:port`, as the clients name it) of the master it deposed.
#[derive(Debug, Clone)]
pub struct Promotion {
    /// When the suite saw the promotion ([`crate::mono_ns`]).
    pub at: u64,
    /// The deposed master's address.
    pub deposed: String,
}

/// One worker process cut off from a master while the others still reach it: from its
/// [`from`](Cut::from) (the partition in place) to its [`to`](Cut::to) (healed).
///
/// Judged ([`Findings::assert_invariants`]): every section of the cut worker that started more
/// than a lease after the cut began, before it ended, was told of the loss by its end (its
/// holds cannot be renewed, and in-memory hand-offs stop at the lease's deadline; one that was
/// not means the cut missed a connection, or a hold outlived its lease). Counted
/// ([`Findings::cut_report`]): the other workers' grants meanwhile.
#[derive(Debug, Clone, Copy)]
pub struct Cut {
    /// The worker (index in the order of [`Workload::worker_pid`]).
    pub worker: usize,
    /// When the partition was in place.
    pub from: u64,
    /// When it was healed.
    pub to: u64,
}

/// What a [`Cut`] did to the workers' sections.
#[derive(Debug, Clone, Default)]
pub struct CutReport {
    /// Sections the cut worker started during the cut.
    pub cut_sections: usize,
    /// Of them, those told of the loss by their end.
    pub cut_told_lost: usize,
    /// Sections the cut worker started more than a lease into the cut without being told of a
    /// loss (each a broken promise).
    pub late_unaware: Vec<Record>,
    /// Sections the other workers started during the cut.
    pub others_granted: usize,
}

/// What protects the grants: nothing, `replica_ack(1, 100 ms)` on the clients, or
/// `min-replicas-to-write 1` / `min-replicas-max-lag 1` on every data node (the recommended
/// production setting: a master cut off from its replicas refuses writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// Neither.
    Plain,
    /// `replica_ack(1, 100 ms)` (the `+ack` suffix of the worker's `<lock-url>`).
    Ack,
    /// `min-replicas-to-write 1` / `min-replicas-max-lag 1` on the data nodes.
    MinReplicas,
}

impl Setting {
    /// `Plain` or `Ack`.
    pub fn acked(ack: bool) -> Setting {
        if ack { Setting::Ack } else { Setting::Plain }
    }

    /// The suffix of the worker's `<lock-url>`: `+ack` for [`Setting::Ack`].
    pub fn url_suffix(self) -> &'static str {
        if self == Setting::Ack { "+ack" } else { "" }
    }

    /// The extra `redis-server` arguments of every data node.
    pub fn server_args(self) -> &'static [&'static str] {
        match self {
            Setting::MinReplicas => &[
                "--min-replicas-to-write",
                "1",
                "--min-replicas-max-lag",
                "1",
            ],
            _ => &[],
        }
    }
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Setting::Plain => "off",
            Setting::Ack => "replica_ack(1, 100 ms)",
            Setting::MinReplicas => "off; min-replicas-to-write 1, max-lag 1 on the masters",
        })
    }
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

fn beside(out: &Path, suffix: &str) -> PathBuf {
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
        let spans: Vec<(u64, u64)> = windows.iter().map(|w| (w.from, w.to)).collect();
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
    /// Per worker process: its records and masters.
    pub workers: Vec<WorkerLog>,
    /// The lock family's findings, if the workload ran it.
    pub family: Option<FamilyFindings>,
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
             accepted {} (per store, commits / stale: {}), token regressions {} (per fault {:?}; \
             of fenced grants {}; judged from the acquire's start instead of the granting \
             request's send: {}), tokens issued twice {}, recoveries {:?}",
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
            self.failover.fenced_regressions,
            self.failover.regressions_from_invocation,
            self.failover.duplicate_tokens.len(),
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
        if self.windows.iter().any(|w| w.promotion.is_some()) {
            assert!(
                self.workers.iter().all(|w| !w.masters.is_empty()),
                "every worker noted its master"
            );
        }
        let late: Vec<String> = (self.windows.iter().enumerate())
            .filter_map(|(i, w)| Some((i, w.cut?)))
            .filter_map(|(i, cut)| {
                let report = self.cut_report(cut);
                let first = report.late_unaware.first()?;
                Some(format!(
                    "window {i}: worker {} started {} sections more than a lease into its cut, \
                     not told of a loss, the first {first}",
                    cut.worker,
                    report.late_unaware.len()
                ))
            })
            .collect();
        assert!(late.is_empty(), "{}", late.join("\n"));
        if let Some(family) = &self.family {
            family.assert_invariants();
        }
        let _ = std::fs::remove_dir_all(&self.records_dir);
    }

    /// Per window: the sides of its failover ([`chaos::sides`]: each section attributed to the
    /// master its client used when it was granted), from the promotion to the window's end;
    /// `None` where no promotion was noted.
    pub fn sides(&self) -> Vec<Option<Sides>> {
        let attributed: Vec<(&Record, Option<&str>)> = (self.workers.iter())
            .flat_map(|w| (w.records.iter()).map(|r| (r, chaos::master_at(&w.masters, r.start_ns))))
            .collect();
        (self.windows.iter())
            .map(|w| {
                let p = w.promotion.as_ref()?;
                Some(chaos::sides(&attributed, &p.deposed, p.at, w.to))
            })
            .collect()
    }

    /// Per window with a promotion: when each worker's client switched away from the deposed
    /// master, in ms from the promotion (negative: before it; `None`: not in the log): how long
    /// the split brain lasted for that client.
    pub fn switches(&self) -> Vec<(usize, Vec<Option<i64>>)> {
        (self.windows.iter().enumerate())
            .filter_map(|(i, w)| {
                let p = w.promotion.as_ref()?;
                let lags = (self.workers.iter())
                    .map(|worker| {
                        (worker.masters.iter())
                            .find(|(t, addr)| *t >= w.from && *addr != p.deposed)
                            .map(|(t, _)| (*t as i64 - p.at as i64) / 1_000_000)
                    })
                    .collect();
                Some((i, lags))
            })
            .collect()
    }

    /// What `cut` did to the workers' sections (see [`Cut`]).
    pub fn cut_report(&self, cut: Cut) -> CutReport {
        let during = |r: &&Record| (cut.from..cut.to).contains(&r.start_ns);
        let mut report = CutReport::default();
        for (i, worker) in self.workers.iter().enumerate() {
            let started: Vec<&Record> = worker.records.iter().filter(during).collect();
            if i != cut.worker {
                report.others_granted += started.len();
                continue;
            }
            report.cut_sections = started.len();
            report.cut_told_lost = started.iter().filter(|r| r.lost).count();
            report.late_unaware = (started.into_iter())
                .filter(|r| r.start_ns > cut.from + WATCHDOG_MS * 1_000_000 && !r.lost)
                .cloned()
                .collect();
        }
        report
    }

    /// One row per fault in `faults` (in that order) that was injected, for `topology` with
    /// `setting`.
    pub fn rows(
        &self,
        topology: &'static str,
        setting: Setting,
        faults: &[&'static str],
    ) -> Vec<Row> {
        let sides = self.sides();
        let regressions = self.regressions_per_window();
        (faults.iter())
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
                let sum = |of: &[usize]| mine.iter().map(|&i| of[i]).sum::<usize>();
                let pick = |i: usize| Duration::from_nanos(recoveries.get(i).copied().unwrap_or(0));
                Row {
                    topology,
                    fault,
                    setting,
                    faults: mine.len(),
                    overlaps: sum(&self.failover.overlaps_per_fault),
                    unaware: sum(&self.failover.unaware_per_fault),
                    stale: self.stale,
                    regressions: sum(&regressions),
                    sides: (mine.iter()).filter_map(|&i| sides[i]).reduce(add_sides),
                    recovery_p50: pick(recoveries.len() / 2),
                    recovery_max: pick(recoveries.len().saturating_sub(1)),
                }
            })
            .filter(|row| row.faults > 0)
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

/// One row of the published table: one fault with one [`Setting`].
#[derive(Debug, Clone)]
pub struct Row {
    /// `Sentinel`, `Cluster`.
    pub topology: &'static str,
    /// The fault.
    pub fault: &'static str,
    /// What protected the grants.
    pub setting: Setting,
    /// How many times the fault was injected.
    pub faults: usize,
    /// Overlapping pairs whose later section started in one of its windows.
    pub overlaps: usize,
    /// Of those, pairs whose earlier holder committed a write after the rival's grant without
    /// having been told of the loss.
    pub unaware: usize,
    /// Of the whole run: stale writes accepted.
    pub stale: usize,
    /// Token regressions whose later section started in one of its windows.
    pub regressions: usize,
    /// The sides of its failovers, summed ([`Findings::sides`]), where promotions were noted.
    pub sides: Option<Sides>,
    /// Median of the longest pause in grants per fault.
    pub recovery_p50: Duration,
    /// Largest of them.
    pub recovery_max: Duration,
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per100 = self.overlaps as f64 * 100.0 / self.faults.max(1) as f64;
        write!(
            f,
            "| {} | {} | {} | {} | {per100:.0} ({}) | {} | {} | {} |",
            self.topology,
            self.fault,
            self.setting,
            self.faults,
            self.overlaps,
            self.unaware,
            self.stale,
            self.regressions,
        )?;
        if let Some(s) = self.sides {
            write!(
                f,
                " {} / {} / {} / {} |",
                s.deposed, s.deposed_accepted, s.deposed_won, s.legitimate_refused
            )?;
        }
        write!(
            f,
            " {:.2} s / {:.2} s |",
            self.recovery_p50.as_secs_f64(),
            self.recovery_max.as_secs_f64(),
        )
    }
}

/// Prints the table of `rows` (Markdown) to stderr; with the column of the deposed master's
/// side if the rows have it (they all do, or none: one suite's rows).
pub fn print_table(rows: &[Row]) {
    let sides = rows.iter().any(|r| r.sides.is_some());
    eprintln!(
        "| topology | fault | replica_ack | faults | overlaps per 100 faults (pairs) | of them: committed unaware of the loss | stale writes accepted (run) | token regressions |{} longest pause in grants p50 / max |",
        if sides {
            " deposed master after promotion: grants / writes accepted / of which over a rival / new master's holders refused |"
        } else {
            ""
        }
    );
    eprintln!(
        "|---|---|---|---|---|---|---|---|---|{}",
        if sides { "---|" } else { "" }
    );
    for row in rows {
        eprintln!("{row}");
    }
}

fn add_sides(a: Sides, b: Sides) -> Sides {
    Sides {
        deposed: a.deposed + b.deposed,
        deposed_accepted: a.deposed_accepted + b.deposed_accepted,
        deposed_won: a.deposed_won + b.deposed_won,
        legitimate_refused: a.legitimate_refused + b.legitimate_refused,
    }
}

/// What the lock family showed in one run ([`Workload::start_with_family`]): the sections the
/// workers noted (`<out>.family`) checked against the fault windows, and the fenced resources'
/// own logs on the Redis store replayed.
#[derive(Debug)]
pub struct FamilyFindings {
    /// The sections checked outside the fault windows: the promises (never more semaphore
    /// holders than permits, no writer overlapping another section).
    pub away: FamilyReport,
    /// The same findings over the whole run, fault windows included: counted, not judged.
    pub in_windows: usize,
    /// Sections whose resource the store refused.
    pub refused: usize,
    /// The semaphore's resource log replayed.
    pub semaphore: SemaphoreLog,
    /// The entries of that log.
    pub semaphore_entries: usize,
    /// The read/write lock's fenced counter.
    pub rw: StoreState,
    /// The chaos checker's verdict on that counter (writers' tokens increasing, no lost
    /// update).
    pub rw_violations: Vec<String>,
}

impl FamilyFindings {
    fn read(outs: &[PathBuf], windows: &[(u64, u64)], store: &RedisServer) -> FamilyFindings {
        let noted: Vec<(Section, bool)> = (outs.iter())
            .flat_map(|o| {
                std::fs::read_to_string(beside(o, ".family"))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| Some((Section::parse(l)?, l.contains("Rejected"))))
                    .collect::<Vec<_>>()
            })
            .collect();
        let sections: Vec<Section> = noted.iter().map(|(s, _)| *s).collect();
        let texts = |key: &str| -> Vec<String> {
            let log = tokio::task::block_in_place(|| store.cmd(&["LRANGE", key, "0", "-1"]));
            (log.items().iter())
                .filter_map(|e| e.text().map(str::to_owned))
                .collect()
        };
        let semaphore_log = texts(&semaphore_keys("family:sem")[1]);
        let [_, _, value_key, log_key] = rw_keys("family:rw");
        let value = tokio::task::block_in_place(|| store.cmd(&["GET", &value_key]));
        let rw = StoreState {
            value: value.text().and_then(|v| v.parse().ok()).unwrap_or(0),
            log: (texts(&log_key).iter())
                .filter_map(|t| t.parse().ok())
                .collect(),
        };
        let rw_state = HashMap::from([("family:rw".to_string(), rw.clone())]);
        FamilyFindings {
            away: check_family(&sections, windows, windows),
            in_windows: check_family(&sections, &[], &[]).violations.len(),
            refused: noted.iter().filter(|(_, refused)| *refused).count(),
            semaphore: check_semaphore_log(&semaphore_log, PERMITS),
            semaphore_entries: semaphore_log.len(),
            rw,
            rw_violations: chaos::check(&[], &rw_state, &[]).violations,
        }
    }

    /// One line on the lock family, for the log.
    pub fn summary(&self) -> String {
        format!(
            "{}; in fault windows: {} findings; store: {:?} (log of {}), rw writes {}",
            self.away,
            self.in_windows,
            self.semaphore,
            self.semaphore_entries,
            self.rw.log.len()
        )
    }

    /// The lock family's promises outside the fault windows, and the fenced resources' logs:
    /// never more occupants than permits, no use from outside, the writers' tokens increasing,
    /// no lost update; and the family's workload ran.
    ///
    /// # Panics
    /// With what broke.
    pub fn assert_invariants(&self) {
        assert!(
            self.away.violations.is_empty(),
            "{:?}",
            self.away.violations
        );
        assert!(
            self.semaphore.violations.is_empty(),
            "{:?}",
            self.semaphore.violations
        );
        assert!(self.rw_violations.is_empty(), "{:?}", self.rw_violations);
        assert!(
            self.semaphore.used > 0 && !self.rw.log.is_empty(),
            "the family workload ran"
        );
    }

    /// The row of the family's table for `setting`.
    pub fn row(&self, setting: Setting) -> FamilyRow {
        FamilyRow {
            setting,
            sections: self.away.sections,
            refused: self.refused,
            in_windows: self.in_windows,
            most_permits: self.semaphore.most,
            evicted: self.semaphore.evicted,
            writes: self.rw.log.len(),
        }
    }
}

/// One row of the lock family's table: one setting's run.
#[derive(Debug, Clone)]
pub struct FamilyRow {
    /// The setting.
    pub setting: Setting,
    /// Sections per kind: semaphore, read, write, fair.
    pub sections: [usize; 4],
    /// Sections whose resource the store refused.
    pub refused: usize,
    /// Findings (over capacity, a writer overlapping) in fault windows: counted, not judged.
    pub in_windows: usize,
    /// The most occupants the semaphore's resource admitted at once.
    pub most_permits: usize,
    /// Occupants it fenced off (a permit granted again with a larger token).
    pub evicted: usize,
    /// Writes the read/write lock's counter committed.
    pub writes: usize,
}

impl std::fmt::Display for FamilyRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [sem, read, write, _] = self.sections;
        write!(
            f,
            "| {} | {sem} / {read} / {write} | {} | {} | {} of {PERMITS} | {} | {} | 0 | 0 |",
            self.setting,
            self.in_windows,
            self.refused,
            self.most_permits,
            self.evicted,
            self.writes,
        )
    }
}

/// Prints the lock family's table of `rows` (Markdown) to stderr.
pub fn print_family_table(rows: &[FamilyRow]) {
    eprintln!(
        "| replica_ack | semaphore / read / write sections | over capacity or writer overlaps in fault windows | refused by the store | most occupants the store admitted | permits fenced off by the store | writes committed | stale writes accepted | violations outside fault windows |"
    );
    eprintln!("|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        eprintln!("{row}");
    }
}
