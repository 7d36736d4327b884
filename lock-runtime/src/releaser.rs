//! The background releaser: releases handed over by `Drop` (guards, cancelled acquires).
//!
//! `Drop` cannot await, so it queues a job on an unbounded channel (never blocks) and this task
//! runs it within milliseconds: every queued job goes to the backend in one batch (one pipeline
//! on one server; one call per lock on a cluster, where a pipeline may not span slots). Failed
//! releases are retried with backoff until the lease they protect would have run out anyway.
//!
//! A job from a dropped guard whose lock other tasks of this client wait for is a hand-off
//! (`handoff.rs`): it goes out on its own, at once, and grants the lock to the first of them.
//!
//! The task holds the backend, not the client: it drains what was queued and exits once the
//! client (the only sender) is gone.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::backend::{Backend, Release};
use crate::handoff::{self, HandOffs, Next, Orphan, Streak};
use crate::keys::LockNames;
use crate::retry::Backoff;
use crate::stats::Counters;

/// Releases per pipeline.
const BATCH: usize = 256;

/// One release to run in the background.
#[derive(Debug, Clone)]
pub(crate) struct ReleaseJob {
    // Shared, not copied: a job is built for every acquire attempt in case it is cancelled.
    names: Arc<LockNames>,
    owner: Arc<str>,
    /// Past this the lease has run out by itself; stop retrying.
    give_up_at: Instant,
    /// `Some(streak)`: hand the lock to a waiting task of this client, if there is one, as the
    /// guard's own release would (see `handoff.rs`).
    streak: Option<Streak>,
}

impl ReleaseJob {
    pub(crate) fn new(names: &Arc<LockNames>, owner: &Arc<str>, lease_end: Instant) -> ReleaseJob {
        ReleaseJob {
            names: names.clone(),
            owner: owner.clone(),
            give_up_at: lease_end,
            streak: None,
        }
    }

    /// The release of a grant whose waiter left before it arrived; it may pass the lock on.
    pub(crate) fn orphan(names: &Arc<LockNames>, orphan: Orphan) -> ReleaseJob {
        ReleaseJob::new(names, &orphan.owner, Instant::now() + orphan.lease)
            .handing_off(orphan.streak)
    }

    /// The release of a held lock (not of a possible hold of an interrupted acquire): it may
    /// hand the lock to a waiting task. `streak`: the turn of local hand-overs that led to it.
    pub(crate) fn handing_off(mut self, streak: Streak) -> ReleaseJob {
        self.streak = Some(streak);
        self
    }
}

pub(crate) struct Releaser {
    tx: mpsc::UnboundedSender<ReleaseJob>,
}

impl Releaser {
    pub(crate) fn start(
        backend: Arc<dyn Backend>,
        handoffs: Arc<HandOffs>,
        (response_timeout, fence_retention): (Duration, Duration),
        counters: Arc<Counters>,
    ) -> Releaser {
        let (tx, rx) = mpsc::unbounded_channel();
        let hand_offs = HandOffTasks {
            backend: backend.clone(),
            handoffs,
            retention_ms: fence_retention.as_millis() as u64,
            // Weak: the task exits once the client, the only strong sender, is gone.
            resubmit: tx.downgrade(),
            counters: counters.clone(),
        };
        tokio::spawn(run(backend, hand_offs, response_timeout, rx, counters));
        Releaser { tx }
    }

    /// Queues a release; never blocks.
    pub(crate) fn submit(&self, job: ReleaseJob) {
        // The receiver lives as long as any sender; it cannot be gone while we hold one.
        let _ = self.tx.send(job);
    }
}

/// What a background hand-off needs.
#[derive(Clone)]
struct HandOffTasks {
    backend: Arc<dyn Backend>,
    handoffs: Arc<HandOffs>,
    retention_ms: u64,
    resubmit: mpsc::WeakUnboundedSender<ReleaseJob>,
    counters: Arc<Counters>,
}

impl HandOffTasks {
    /// Takes the jobs that hand a lock to a waiting task out of `jobs` and runs each on its own
    /// task, at once.
    ///
    /// A semaphore's release that ends this client's turn of passing its permits in memory
    /// (`HandOffs::ends_turn`) runs on its own task too, letting the clients waiting elsewhere
    /// go first.
    fn start(&self, jobs: &mut Vec<ReleaseJob>) {
        jobs.retain(|job| {
            let Some(streak) = job.streak else {
                return true;
            };
            if self.handoffs.ends_turn(&job.names, streak) {
                tokio::spawn(self.clone().end_turn(job.clone(), streak));
                return false;
            }
            let next = Some(streak)
                .filter(|_| job.names.family().hands_off())
                .and_then(|streak| self.handoffs.choose(&job.names.key, streak));
            let Some(next) = next else {
                return true;
            };
            tokio::spawn(self.clone().run(job.clone(), next));
            false
        });
    }

    /// A release that ends this client's turn (see [`HandOffTasks::start`]); retried as a
    /// plain release if it fails.
    async fn end_turn(self, job: ReleaseJob, streak: Streak) {
        let reply = handoff::release_plainly(
            &*self.backend,
            &self.handoffs,
            &job.names,
            &job.owner,
            streak,
            self.retention_ms,
        )
        .await;
        self.settle(job, reply.map(drop));
    }

    async fn run(self, job: ReleaseJob, next: Next) {
        let (reply, orphan) = handoff::release_to(
            &*self.backend,
            &self.handoffs,
            &job.names,
            &job.owner,
            next,
            self.retention_ms,
        )
        .await;
        if let (Some(orphan), Some(tx)) = (orphan, self.resubmit.upgrade()) {
            // The waiter left before its grant arrived: release it, or pass it on.
            let _ = tx.send(ReleaseJob::orphan(&job.names, orphan));
        }
        self.settle(job, reply.map(drop));
    }

    /// Counts a background release that went through; queues one that failed again, as a
    /// plain release.
    fn settle(&self, job: ReleaseJob, reply: redis::RedisResult<()>) {
        let Some(tx) = self.resubmit.upgrade() else {
            return;
        };
        match reply {
            Ok(()) => {
                Counters::add(&self.counters.background_releases, 1);
                crate::metrics::background_releases(1);
            }
            Err(e) => {
                tracing::debug!(error = %e, "background release failed; retrying as a plain release");
                let _ = tx.send(ReleaseJob {
                    streak: None,
                    ..job
                });
            }
        }
    }
}

async fn run(
    backend: Arc<dyn Backend>,
    hand_offs: HandOffTasks,
    response_timeout: Duration,
    mut rx: mpsc::UnboundedReceiver<ReleaseJob>,
    counters: Arc<Counters>,
) {
    let mut jobs: Vec<ReleaseJob> = Vec::new();
    let mut backoff = Backoff::new();
    loop {
        if jobs.is_empty() {
            match rx.recv().await {
                Some(job) => jobs.push(job),
                None => return,
            }
        }
        while jobs.len() < BATCH {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let now = Instant::now();
        jobs.retain(|j| j.give_up_at > now);
        hand_offs.start(&mut jobs);
        if jobs.is_empty() {
            continue;
        }

        match release_all(&*backend, &mut jobs, response_timeout).await {
            Ok(released) => {
                tracing::debug!(released, "background release done");
                Counters::add(&counters.background_releases, released as u64);
                crate::metrics::background_releases(released as u64);
                backoff.reset();
            }
            Err(e) => {
                tracing::warn!(error = %e, pending = jobs.len(), retry_in = ?backoff.pause(), "background release failed");
                tokio::time::sleep(backoff.pause()).await;
                backoff.failed();
            }
        }
    }
}

/// Releases `jobs`, removing those that are done; returns how many were. An error when every
/// one failed.
async fn release_all(
    backend: &dyn Backend,
    jobs: &mut Vec<ReleaseJob>,
    limit: Duration,
) -> redis::RedisResult<usize> {
    let batch: Vec<Release<'_>> = jobs
        .iter()
        .map(|j| Release {
            names: &j.names,
            owner: &j.owner,
        })
        .collect();
    let failed = backend.release_many(&batch, limit).await?;
    let total = jobs.len();
    let mut i = 0;
    jobs.retain(|_| {
        i += 1;
        failed.contains(&(i - 1))
    });
    Ok(total - jobs.len())
}
