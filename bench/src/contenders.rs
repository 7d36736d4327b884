//! The locks under comparison and the scenarios each of them runs.

use std::time::Duration;

use crate::hot::{Hot, hot_in_process, hot_processes};
use crate::impls::Kind;
use crate::process_peer::{self, ProcessPeer};
use crate::uncontended::{Uncontended, beside_ping, uncontended};
use crate::wake::{Wake, wake};
use crate::{Plan, Results, median_of, progress};

/// A lock under comparison: one of the Rust locks in this process (and its children), or a
/// peer's in driver processes of its own (Redisson's in JVMs, redsync's in Go binaries).
#[derive(Clone, Copy)]
pub(crate) enum Contender<'a> {
    Rust(Kind),
    Process(&'a process_peer::ProcessPeer),
}

impl<'a> Contender<'a> {
    /// The lock whose rows are named `name`: a Rust lock's, or one of `peers`.
    pub(crate) fn named(name: &str, peers: &'a [ProcessPeer]) -> Option<Contender<'a>> {
        Kind::parse(name).map(Contender::Rust).or_else(|| {
            peers
                .iter()
                .find(|p| p.name == name)
                .map(Contender::Process)
        })
    }

    /// The name of its rows.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Contender::Rust(kind) => kind.name(),
            Contender::Process(peer) => peer.name,
        }
    }

    /// Each of `workers` locking its own key for `run`, with the server's PING p50 timed beside
    /// the run (right before and right after it) and kept with its figures.
    pub(crate) async fn uncontended(self, url: &str, workers: usize, run: Duration) -> Uncontended {
        beside_ping(url, async {
            match self {
                Contender::Rust(kind) => uncontended(kind, url, workers, run).await,
                Contender::Process(peer) => peer.uncontended(url, workers, run).await,
            }
        })
        .await
    }

    /// `procs` processes × `tasks` tasks on one key (one process: this one, for the Rust locks).
    pub(crate) async fn hot(self, url: &str, procs: usize, tasks: usize, run: Duration) -> Hot {
        match self {
            Contender::Rust(kind) if procs == 1 => hot_in_process(kind, url, tasks, run).await,
            Contender::Rust(kind) => hot_processes(kind, url, procs, tasks, run).await,
            Contender::Process(peer) => peer.hot(url, procs, tasks, run).await,
        }
    }

    async fn wake(self, url: &str, cycles: usize) -> Wake {
        match self {
            Contender::Rust(kind) => wake(kind, url, cycles).await,
            Contender::Process(peer) => peer.wake(url, cycles).await,
        }
    }
}

/// The peers the one-run commands (`uncontended`, `hot`) can name besides the Rust locks:
/// Redisson's two and redsync, those that are built. None when `name` is a Rust lock's, so that
/// naming one needs neither Maven nor Go.
pub(crate) fn peers_for(name: &str) -> Vec<ProcessPeer> {
    if Kind::parse(name).is_some() {
        return Vec::new();
    }
    let mut peers = crate::redisson_jvm::find();
    peers.extend(crate::redsync::find().map(|(peer, _)| peer));
    peers
}

/// The scenarios every lock runs: uncontended with 1 and 64 workers (each run with the PING
/// timed beside it), the hot key in one and in four processes, and wake-up; medians of
/// `plan.reps` runs go into `r` under its name.
pub(crate) async fn contenders(r: &mut Results, plan: Plan, url: &str, lock: Contender<'_>) {
    let n = lock.name();
    for (workers, map) in [(1, &mut r.uncontended_1), (64, &mut r.uncontended_64)] {
        progress(&format!("uncontended, {workers} worker(s): {n}"));
        let u = median_of(
            plan.reps,
            |u: &Uncontended| u.pairs_per_s,
            || lock.uncontended(url, workers, plan.run),
        )
        .await;
        map.insert(n, u);
    }
    for (procs, tasks, map) in [(1, 16, &mut r.hot_tasks), (4, 4, &mut r.hot_procs)] {
        progress(&format!(
            "hot key, {procs} process(es) × {tasks} tasks: {n}"
        ));
        let h = median_of(
            plan.reps,
            |h: &Hot| h.acq_per_s,
            || lock.hot(url, procs, tasks, plan.run),
        )
        .await;
        map.insert(n, h);
    }
    progress(&format!("wake-up, {} cycles: {n}", plan.wake_cycles));
    let w = median_of(
        plan.reps,
        |w: &Wake| w.p50_us,
        || lock.wake(url, plan.wake_cycles),
    )
    .await;
    r.wake.insert(n, w);
}
