//! One acquire round trip, reconciled: retried with the same owner id while its outcome is
//! unknown or a failing-over deployment is unavailable, rolled back when replicas did not
//! acknowledge it, and released in the background if the acquire stops while it may hold.

use std::time::Duration;

use tokio::time::Instant;

use super::{Acquire, Attempt, Busy};
use crate::backend::{Acked, Approach, Reply};
use crate::error::Shortfall;
use crate::keys::Mode;
use crate::releaser::ReleaseJob;
use crate::retry::AcquireRetry;
use crate::{LockClient, LockError};

impl Acquire<'_> {
    /// One acquire round trip, reconciled: an unknown outcome is retried with the same owner
    /// id (retaking our own hold is idempotent), and if we give up or are cancelled while a
    /// request may have taken the lock, the possible hold is released in the background.
    /// `approach`: which attempt of the acquire this is (see [`Approach`]).
    pub(super) async fn attempt(&self, approach: Approach) -> Result<Attempt, LockError> {
        let config = &self.client.inner.config;
        // Armed whenever a request that may have taken the lock is in flight or ended with an
        // unknown outcome; dropping it (cancellation, or giving up) releases in the background.
        let mut cleanup = Cleanup {
            client: self.client,
            job: None,
        };
        let grace = self
            .client
            .inner
            .backend
            .fails_over()
            .then_some(config.failover_grace);
        let mut reconcile = AcquireRetry::new(grace, self.deadline);
        loop {
            let job = ReleaseJob::new(self.names, &self.owner, Instant::now() + self.lease);
            cleanup.job = Some(job);
            let sent = Instant::now();
            let Acked { reply, shortfall } = match self.send_acquire(approach).await {
                Ok(acked) => acked,
                Err(e) => match reconcile.retry_after(&e) {
                    Some(pause) => {
                        boxed_sleep(pause).await;
                        continue;
                    }
                    None => {
                        if reconcile.settled_by(&e) {
                            cleanup.job = None;
                        }
                        return Err(LockError::backend("acquire", e));
                    }
                },
            };
            let token = match self.read_reply(reply) {
                Ok(token) => token,
                // Definite answers also settle earlier unknown outcomes: had one of them taken
                // the lock, this retry (same owner) would have re-taken it.
                Err(decided) => {
                    cleanup.job = None;
                    return decided;
                }
            };
            if let Some(shortfall) = shortfall {
                // Still armed: cancelled during the roll-back, it is finished in the background.
                reconcile.unresolved = !self.roll_back().await;
                if !reconcile.unresolved {
                    cleanup.job = None;
                }
                self.unacknowledged(shortfall, &mut reconcile).await?;
                continue;
            }
            if !self.fresh(sent) {
                // Taken, but answered so late (a stalled connection, a cluster retrying
                // through a slot migration) that the lease may be over: take it again with
                // the same owner id before anything runs under it. Still armed.
                let late = redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "lock granted, but the answer came after its lease could have ended",
                ));
                if let Some(pause) = reconcile.retry_after(&late) {
                    boxed_sleep(pause).await;
                    continue;
                }
                return Err(LockError::backend("acquire", late));
            }
            cleanup.job = None;
            tracing::debug!(token, "acquired");
            return Ok(Attempt::Taken {
                token: token as u64,
                sent,
            });
        }
    }

    /// The fencing token of a grant, or what else the reply decided: the lock is busy, or the
    /// acquire failed (foreign data at the key, more permits asked than the semaphore has).
    fn read_reply(&self, reply: Reply) -> Result<i64, Result<Attempt, LockError>> {
        match reply {
            // (An acquire never hands over; both carry the new token.)
            Reply::Done(token) | Reply::HandedOff(token) => Ok(token),
            Reply::NotDone(pttl) => Err(Ok(Attempt::Busy(Busy::from_pttl(pttl)))),
            Reply::Foreign(found) => Err(Err(LockError::ForeignData {
                key: self.names.key.clone(),
                found,
            })),
            Reply::Exceeds(capacity) => Err(Err(LockError::InvalidPermits {
                name: self.names.name.clone(),
                requested: match self.mode {
                    Mode::Permits(n) => n,
                    _ => 1,
                },
                capacity: u32::try_from(capacity).unwrap_or(u32::MAX),
            })),
        }
    }

    /// After a grant that replicas did not acknowledge, rolled back: backs off for another try
    /// while a failing-over deployment's replica may be catching up (every try blocks the
    /// shared connection for the `WAIT` timeout), or fails.
    async fn unacknowledged(
        &self,
        shortfall: Shortfall,
        reconcile: &mut AcquireRetry,
    ) -> Result<(), LockError> {
        let Shortfall {
            required,
            acknowledged,
            timeout,
        } = shortfall;
        if reconcile.within_grace() {
            tracing::debug!(acknowledged, "grant not acknowledged; retrying");
            boxed_sleep(reconcile.next_ack_backoff()).await;
            return Ok(());
        }
        Err(LockError::ReplicaAck {
            op: "acquire",
            name: self.names.name.clone(),
            required,
            acknowledged,
            timeout,
        })
    }

    /// Whether a grant whose request was sent at `sent` still has its lease, safety margin
    /// included. An answer that took longer than that is not trusted: the watchdog would
    /// declare the lock lost on arrival.
    pub(super) fn fresh(&self, sent: Instant) -> bool {
        Instant::now() + crate::options::loss_margin(self.lease) < sent + self.lease
    }

    /// Sends the acquire once (acknowledged by replicas when the client asks for it).
    async fn send_acquire(&self, approach: Approach) -> redis::RedisResult<Acked<Reply>> {
        let inner = &self.client.inner;
        // Rounded up: Redis never gets a shorter lease than the client believes it holds.
        let lease_ms = crate::options::ceil_millis(self.lease);
        let retention_ms = inner.config.fence_retention.as_millis() as u64;
        inner
            .backend
            .acquire(
                self.names,
                &self.owner,
                lease_ms,
                retention_ms,
                approach,
                self.fenced,
            )
            .await
    }

    /// Undoes a grant that replicas did not acknowledge; returns whether the lock is known not
    /// to be held by us any more.
    async fn roll_back(&self) -> bool {
        let names = self.names;
        let rolled_back = self
            .client
            .inner
            .backend
            .release(names, &self.owner, None)
            .await;
        tracing::warn!(lock = %names.name, ok = rolled_back.is_ok(), "grant not acknowledged by enough replicas; rolled back");
        matches!(
            rolled_back.map(|a| a.reply),
            Ok(Reply::Done(_) | Reply::NotDone(_) | Reply::HandedOff(_))
        )
    }
}

/// Sleeps for `d`, the timer boxed: an attempt pauses only after an error, and inline the
/// timer would make every attempt's future (alive while its request is in flight) larger.
async fn boxed_sleep(d: Duration) {
    Box::pin(tokio::time::sleep(d)).await;
}

/// Releases a hold that an interrupted acquire may have taken.
struct Cleanup<'a> {
    client: &'a LockClient,
    job: Option<ReleaseJob>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if let Some(job) = self.job.take() {
            tracing::debug!(
                "acquire interrupted with an unknown outcome; releasing in the background"
            );
            self.client.inner.releaser.submit(job);
        }
    }
}
