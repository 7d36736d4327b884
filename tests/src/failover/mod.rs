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
//! The workload: [`PROCESSES`] `lock-worker chaos` processes, [`TASKS`] tasks each, on [`KEYS`]
//! lock names (`chaos:0`, `chaos:1`, `chaos:2`), each fenced in a store of its own (`chaos:<k>` in
//! store `k mod 3` of [`Stores`]: every fault hits every store); half the sections take their token
//! with the grant (fenced), half ask for it in the section; lease [`WATCHDOG_MS`]. With
//! [`Workload::start_with_family`], each process adds two tasks on a semaphore of
//! [`PERMITS`](crate::family::PERMITS) permits and two on a read/write lock, each section using a
//! fenced resource on the Redis store ([`crate::chaos::family_store`]). Through Sentinel, each
//! worker notes which master its client used when, so every grant is attributed to a master
//! ([`Findings::sides`]). See `src/bin/lock-worker/` and [`crate::chaos`].
//!
//! Here: the settings and the faults' records ([`Setting`], [`Window`], [`Promotion`], [`Cut`]);
//! `workload.rs`: the stores and the worker processes; `findings.rs`: the checker's verdict and
//! the published table; `family.rs`: the lock family's part of both.

mod family;
mod findings;
mod workload;

pub use family::{FamilyFindings, FamilyRow, print_family_table};
pub use findings::{
    Findings, Row, STALL_MIN_COMMITS, STALL_RATIO, assert_stores, describe_stores, print_table,
};
pub use workload::{Stores, WorkerLog, Workload, per_store};

/// How far the clock of the replica a clock-skew fault promotes is off its master's (the
/// Sentinel and Cluster suites' `tokens_through_…_skewed_clock`): more than a lease
/// ([`WATCHDOG_MS`]).
pub const SKEW_US: i64 = 5_000_000;
/// How long a clock-skew fault keeps the master's last writes from the replica it promotes
/// before the master is killed: the counter writes of that time are lost in the failover.
pub const SKEW_LAG: std::time::Duration = std::time::Duration::from_secs(2);

/// Which way a clock-skew fault's promoted replica is off its master's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skew {
    /// [`SKEW_US`] behind: clock-floored tokens go back.
    Behind,
    /// [`SKEW_US`] ahead.
    Ahead,
}

impl Skew {
    /// The replica's clock offset from its master's whose offset from this machine's clock is
    /// `master_us`, in µs.
    pub fn offset_from(self, master_us: i64) -> i64 {
        match self {
            Skew::Behind => master_us - SKEW_US,
            Skew::Ahead => master_us + SKEW_US,
        }
    }
}

use std::path::Path;
use std::time::{Duration, Instant};

use crate::chaos::Record;

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
/// ([`Findings::cut_report`]): the other workers' grants meanwhile, and the cut worker's
/// sections granted by the master the failover deposed (its client had not switched yet: the
/// split brain of "What Redis gives up", which the sides count).
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
    /// Of them, those granted by the master the failover before the cut deposed (the worker's
    /// client had not switched yet: the split brain Redis gives up, not judged here).
    pub on_deposed: usize,
    /// Sections the cut worker started more than a lease into the cut without being told of a
    /// loss, not granted by the deposed master (each a broken promise).
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
