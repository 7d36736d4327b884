//! The background releaser: releases handed over by `Drop` (guards, cancelled acquires).
//!
//! `Drop` cannot await, so it queues a job on an unbounded channel (never blocks) and this task
//! runs it within milliseconds: every queued job goes out in one pipeline (on a cluster, where a
//! pipeline may not span slots, one call per lock, all at once). Failed releases are
//! retried with backoff until the lease they protect would have run out anyway.
//!
//! The task holds a clone of the command connection, not the client: it drains what was
//! queued and exits once the client (the only sender) is gone.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::backend::Conn;
use crate::names::LockNames;
use crate::script::{self, Publishing};
use crate::stats::Counters;
use std::sync::Arc;

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
}

impl ReleaseJob {
    pub(crate) fn new(names: &Arc<LockNames>, owner: &Arc<str>, lease_end: Instant) -> ReleaseJob {
        ReleaseJob {
            names: names.clone(),
            owner: owner.clone(),
            give_up_at: lease_end,
        }
    }
}

pub(crate) struct Releaser {
    tx: mpsc::UnboundedSender<ReleaseJob>,
}

impl Releaser {
    pub(crate) fn start(
        conn: Conn,
        publishing: Publishing,
        response_timeout: Duration,
        counters: Arc<Counters>,
    ) -> Releaser {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(conn, publishing, response_timeout, rx, counters));
        Releaser { tx }
    }

    /// Queues a release; never blocks.
    pub(crate) fn submit(&self, job: ReleaseJob) {
        // The receiver lives as long as any sender; it cannot be gone while we hold one.
        let _ = self.tx.send(job);
    }
}

async fn run(
    mut conn: Conn,
    publishing: Publishing,
    response_timeout: Duration,
    mut rx: mpsc::UnboundedReceiver<ReleaseJob>,
    counters: Arc<Counters>,
) {
    let mut jobs: Vec<ReleaseJob> = Vec::new();
    let mut backoff = Duration::from_millis(20);
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
        if jobs.is_empty() {
            continue;
        }
        match release_all(&mut conn, publishing.release, &mut jobs, response_timeout).await {
            Ok(released) => {
                tracing::debug!(released, "background release done");
                Counters::add(&counters.background_releases, released as u64);
                backoff = Duration::from_millis(20);
            }
            Err(e) => {
                tracing::warn!(error = %e, pending = jobs.len(), retry_in = ?backoff, "background release failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// Releases `jobs`, removing those that are done; returns how many were.
async fn release_all(
    conn: &mut Conn,
    release: &redis::Script,
    jobs: &mut Vec<ReleaseJob>,
    #[cfg_attr(not(feature = "cluster"), allow(unused_variables))] limit: Duration,
) -> redis::RedisResult<usize> {
    #[cfg(feature = "cluster")]
    if let Conn::Cluster(cluster) = conn {
        // A pipeline may not span slots: one call per lock, all at once.
        let args: Vec<(&str, &str, &str)> = jobs
            .iter()
            .map(|j| (j.names.key.as_str(), j.names.channel.as_str(), &*j.owner))
            .collect();
        let failed = crate::cluster::release_each(cluster, release, &args, limit).await;
        let total = jobs.len();
        let mut i = 0;
        jobs.retain(|_| {
            i += 1;
            failed.contains(&(i - 1))
        });
        return if failed.is_empty() {
            Ok(total)
        } else if failed.len() == total {
            Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "every background release failed",
            )))
        } else {
            Ok(total - failed.len())
        };
    }
    let mut pipe = redis::pipe();
    for job in jobs.iter() {
        pipe.cmd("EVALSHA")
            .arg(release.get_hash())
            .arg(2)
            .arg(&job.names.key)
            .arg(&job.names.channel)
            .arg(&*job.owner)
            .ignore();
    }
    match pipe.exec_async(&mut *conn).await {
        Err(e) if script::is_no_script(&e) => {
            release.prepare_invoke().load_async(conn).await?;
            pipe.exec_async(conn).await
        }
        other => other,
    }?;
    let n = jobs.len();
    jobs.clear();
    Ok(n)
}
