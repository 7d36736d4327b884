//! `Lock`: one named lock, and the race-free acquire loop.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::ack;
use crate::error::{failover_symptom, outcome_unknown};
use crate::guard::{Held, LossSignal};
use crate::names::LockNames;
use crate::releaser::ReleaseJob;
use crate::script::{self, Reply};
use crate::stats::Counters;
use crate::watchdog::Entry;
use crate::{LockClient, LockError, LockGuard, LockOptions, scope};

/// How often an acquire whose outcome is unknown (timeout, dropped connection) is retried with
/// the same owner id before giving up.
const RECONCILE_TRIES: u32 = 3;
/// The longest sleep between attempts on a lock whose key has no TTL (foreign data).
const NO_TTL_POLL: Duration = Duration::from_secs(1);
/// The longest sleep between attempts while the unlock channel is not confirmed.
const UNSUBSCRIBED_POLL: Duration = Duration::from_millis(100);
/// The pause between acquire attempts while a failing-over deployment is unavailable.
const FAILOVER_RETRY: Duration = Duration::from_millis(100);

/// A named lock; made by [`LockClient::lock`]. Cheap to clone.
///
/// ```no_run
/// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
/// use std::time::Duration;
/// use lock_runtime::{LockError, LockOptions};
///
/// let lock = locks.lock("stock:42");
/// match lock.try_acquire(Duration::from_millis(200)).await {
///     Ok(guard) => { /* … */ guard.release().await?; }
///     Err(LockError::WaitTimeout { .. }) => { /* busy */ }
///     Err(e) => return Err(e),
/// }
/// let leased = lock
///     .acquire_with(LockOptions::new().wait(Duration::from_secs(5)).lease(Duration::from_secs(10)))
///     .await?;
/// # drop(leased); Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    client: LockClient,
    names: Result<Arc<LockNames>, (String, &'static str)>,
}

enum Attempt {
    /// Taken with this fencing token; the request was sent at `sent`.
    Taken { token: u64, sent: Instant },
    /// Held by another owner with this PTTL in ms (-1: no TTL, -2: vanished meanwhile).
    Busy(i64),
}

impl Lock {
    pub(crate) fn new(client: LockClient, name: &str) -> Lock {
        let names = LockNames::new(&client.inner.config.prefix, name)
            .map(Arc::new)
            .map_err(|e| match e {
                LockError::InvalidName { name, reason } => (name, reason),
                _ => (name.chars().take(64).collect(), "invalid lock name"),
            });
        Lock { client, names }
    }

    /// The order in which multi-lock acquisitions take locks, and what makes two members the
    /// same lock: the Redis key (prefix included), then the deployment's identity for the same
    /// key on two deployments. Both are the same in every process that uses the lock (unlike
    /// the random client id), so two processes never take shared locks in opposite orders.
    pub(crate) fn order_key(&self) -> (&str, &str) {
        let key = match &self.names {
            Ok(n) => n.key.as_str(),
            Err((name, _)) => name.as_str(),
        };
        (key, &self.client.inner.config.deployment_id)
    }

    /// The name's validation result.
    pub(crate) fn validated(&self) -> Result<(), LockError> {
        self.names().map(|_| ())
    }

    fn names(&self) -> Result<&Arc<LockNames>, LockError> {
        self.names
            .as_ref()
            .map_err(|(name, reason)| LockError::InvalidName {
                name: name.clone(),
                reason,
            })
    }

    /// The lock name (as given, without prefix).
    pub fn name(&self) -> &str {
        match &self.names {
            Ok(n) => &n.name,
            Err((name, _)) => name,
        }
    }

    /// Waits as long as it takes, then holds with the watchdog.
    pub async fn acquire(&self) -> Result<LockGuard, LockError> {
        self.acquire_with(LockOptions::new()).await
    }

    /// Waits at most `wait` ([`LockError::WaitTimeout`] after that); `Duration::ZERO` makes
    /// exactly one attempt.
    pub async fn try_acquire(&self, wait: Duration) -> Result<LockGuard, LockError> {
        self.acquire_with(LockOptions::new().wait(wait)).await
    }

    /// Acquires with explicit options.
    ///
    /// Inside the [`scope`](LockGuard::scope) of a guard of the same lock this re-enters at
    /// once (the options of the outermost acquisition apply). Otherwise it tries once (one round
    /// trip when the lock is free); if the lock is busy it subscribes to its unlock channel,
    /// tries again, and sleeps until an unlock message, the holder's remaining lease or the
    /// deadline, whichever comes first, then retries.
    ///
    /// Cancellation-safe: dropping the future at any point leaves no hold in Redis (a possibly
    /// taken hold is released in the background), no subscription and no watchdog entry.
    pub async fn acquire_with(&self, opts: LockOptions) -> Result<LockGuard, LockError> {
        opts.validate()?;
        let names = self.names()?;
        let inner = &self.client.inner;
        if let Some(held) = scope::find(&inner.id, &names.key) {
            if let Some(reason) = held.signal.get() {
                return Err(LockError::Lost {
                    name: names.name.clone(),
                    reason,
                });
            }
            tracing::trace!(lock = %names.name, "re-entered");
            Counters::add(&inner.counters.reentries, 1);
            return Ok(LockGuard::reentrant(held));
        }
        let span = tracing::debug_span!("lock.acquire", lock = %names.name, wait = ?opts.wait);
        tracing::Instrument::instrument(self.acquire_fresh(names, opts), span).await
    }

    async fn acquire_fresh(
        &self,
        names: &Arc<LockNames>,
        opts: LockOptions,
    ) -> Result<LockGuard, LockError> {
        let inner = &self.client.inner;
        let start = Instant::now();
        // A wait too long to represent (`Duration::MAX`) is a wait without a deadline.
        let deadline = opts.wait.and_then(|w| start.checked_add(w));
        let (acquisition, owner) = inner.next_owner();
        let owner: Arc<str> = owner.into();
        let lease = opts.lease.unwrap_or(inner.config.watchdog_timeout);
        let timeout = |pttl: i64| LockError::WaitTimeout {
            name: names.name.clone(),
            waited: start.elapsed(),
            remaining_ttl: (pttl > 0).then(|| Duration::from_millis(pttl as u64)),
        };
        let taken = |token, sent| self.hold(names, &owner, acquisition, token, sent, lease, &opts);

        // Fair inside a process: when other tasks of this client already wait for this lock,
        // queue behind them instead of racing them for it. (A task that releases and comes
        // straight back would otherwise win nearly every time: the waiter it woke needs a
        // pub/sub delivery before it can even try.)
        let queue_first =
            opts.wait != Some(Duration::ZERO) && inner.demux.has_waiters(&names.channel);
        let mut pttl = -1;
        if !queue_first {
            // Uncontended: one round trip, no subscription.
            pttl = match Box::pin(self.attempt(names, &owner, lease, deadline)).await? {
                Attempt::Taken { token, sent } => return Ok(taken(token, sent)),
                Attempt::Busy(pttl) => pttl,
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(timeout(pttl));
            }
        }

        let wait_span = tracing::debug_span!("lock.wait", queue_first);
        let wait = async {
            let sub = inner.demux.subscribe(&names.channel);
            let mut baton = Baton(None);
            let mut skip_attempt = queue_first;
            tracing::debug!(
                pttl,
                queue_first,
                "lock busy; waiting for an unlock message"
            );
            // Whether the last look found the channel confirmed: if not, the next one does not
            // wait for it again, so an unconfirmable channel costs one short wait, then polling
            // every UNSUBSCRIBED_POLL.
            let mut was_subscribed = true;
            loop {
                // Listen before looking at the channel's state: a lost connection marks it
                // unconfirmed and wakes the listeners registered at that moment, so a
                // listener registered after the look could miss that wake-up and sleep the
                // holder's whole lease with an unlock lost in the gap.
                let notified = sub.notify().notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                // Be subscribed before the attempt, so an unlock published after it cannot be
                // missed. A subscription that cannot be confirmed within one short poll
                // degrades to polling.
                let subscribed = sub.is_ready()
                    || (was_subscribed && {
                        let until = Instant::now() + UNSUBSCRIBED_POLL;
                        sub.ready(deadline.map_or(until, |d| d.min(until))).await
                    });
                was_subscribed = subscribed;
                let queued_wait = skip_attempt;
                if skip_attempt {
                    // Queued behind local waiters: wait for our turn (bounded) before trying.
                    skip_attempt = false;
                } else {
                    // Boxed: the round trip's future is large and only alive during the attempt;
                    // inline it would make every waiting task carry its size while it sleeps.
                    let attempt = Box::pin(self.attempt(names, &owner, lease, deadline)).await;
                    if attempt.is_ok() {
                        // Decided: either ours, or taken by someone whose release will publish
                        // again.
                        baton.0 = None;
                    }
                    pttl = match attempt? {
                        Attempt::Taken { token, sent } => return Ok(taken(token, sent)),
                        Attempt::Busy(pttl) => pttl,
                    };
                }
                let now = Instant::now();
                // Give up only after an attempt: a queued waiter whose deadline passed while it
                // waited for its turn still tries once.
                if !queued_wait && deadline.is_some_and(|d| now >= d) {
                    return Err(timeout(pttl));
                }
                let mut sleep = match pttl {
                    p if p > 0 => Duration::from_millis(p as u64),
                    -1 => NO_TTL_POLL,
                    _ => Duration::ZERO,
                };
                if !subscribed {
                    sleep = sleep.min(UNSUBSCRIBED_POLL);
                }
                // A foreign key's TTL can be beyond what an `Instant` can represent.
                let sleep = sleep.min(crate::options::MAX_LEASE);
                let wake = deadline.map_or(now + sleep, |d| d.min(now + sleep));
                tokio::select! {
                    _ = &mut notified => baton.0 = Some(sub.notify()),
                    _ = tokio::time::sleep_until(wake) => {}
                }
            }
        };
        // Boxed: only contended acquisitions pay for the waiting state.
        Box::pin(tracing::Instrument::instrument(wait, wait_span)).await
    }

    /// One acquire round trip, reconciled: an unknown outcome is retried with the same owner
    /// id (retaking our own hold is idempotent), and if we give up or are cancelled while a
    /// request may have taken the lock, the possible hold is released in the background.
    async fn attempt(
        &self,
        names: &Arc<LockNames>,
        owner: &Arc<str>,
        lease: Duration,
        deadline: Option<Instant>,
    ) -> Result<Attempt, LockError> {
        let inner = &self.client.inner;
        // Rounded up: Redis never gets a shorter lease than the client believes it holds.
        let lease_ms = crate::options::ceil_millis(lease);
        // Armed whenever a request that may have taken the lock is in flight or ended with an
        // unknown outcome; dropping it (cancellation, or giving up) releases in the background.
        let mut cleanup = Cleanup {
            client: &self.client,
            job: None,
        };
        // Some earlier request's outcome is still unknown (it may have taken the lock).
        let mut unresolved = false;
        let mut conn = inner.conn.clone();
        let mut tries = 0;
        let mut unavailable_since: Option<Instant> = None;
        let mut ack_backoff = FAILOVER_RETRY;
        loop {
            cleanup.job = Some(ReleaseJob::new(names, owner, Instant::now() + lease));
            let sent = Instant::now();
            let reply = match inner.config.replica_ack {
                None => script::ACQUIRE
                    .key(&names.key)
                    .key(&names.fence)
                    .arg(&**owner)
                    .arg(lease_ms)
                    .arg(inner.config.fence_retention.as_millis() as u64)
                    .invoke_async::<Reply>(&mut conn)
                    .await
                    .map(|r| (r, None)),
                Some(ack) => {
                    let mut cmd = redis::cmd("EVALSHA");
                    cmd.arg(script::ACQUIRE.get_hash())
                        .arg(2)
                        .arg(&names.key)
                        .arg(&names.fence)
                        .arg(&**owner)
                        .arg(lease_ms)
                        .arg(inner.config.fence_retention.as_millis() as u64);
                    ack::eval_acked::<Reply>(&mut conn, &script::ACQUIRE, cmd, ack)
                        .await
                        .map(|(r, n)| (r, Some((ack, n))))
                }
            };
            return match reply {
                Ok((reply, acked)) => match reply {
                    Reply::Done(token) => {
                        if let Some((ack, acked)) = acked
                            && acked < ack.replicas
                        {
                            // Still armed: cancelled during the roll-back, it is finished in
                            // the background.
                            let rolled_back = self.roll_back(names, owner).await;
                            unresolved = !rolled_back;
                            if !unresolved {
                                cleanup.job = None;
                            }
                            if self.within_grace(&mut unavailable_since, deadline) {
                                // A replica may be catching up after a failover; back off, since
                                // every try blocks the shared connection for the WAIT timeout.
                                tracing::debug!(acked, "grant not acknowledged; retrying");
                                tokio::time::sleep(ack_backoff).await;
                                ack_backoff = (ack_backoff * 2).min(Duration::from_secs(1));
                                continue;
                            }
                            return Err(LockError::ReplicaAck {
                                op: "acquire",
                                name: names.name.clone(),
                                required: ack.replicas,
                                acknowledged: acked,
                                timeout: ack.timeout,
                            });
                        }
                        cleanup.job = None;
                        tracing::debug!(token, "acquired");
                        Ok(Attempt::Taken {
                            token: token as u64,
                            sent,
                        })
                    }
                    // Definite answers also settle earlier unknown outcomes: had one of them
                    // taken the lock, this retry (same owner) would have re-taken it.
                    Reply::NotDone(pttl) => {
                        cleanup.job = None;
                        Ok(Attempt::Busy(pttl))
                    }
                    Reply::Foreign(found) => {
                        cleanup.job = None;
                        Err(LockError::ForeignData {
                            key: names.key.clone(),
                            found,
                        })
                    }
                },
                Err(e) if outcome_unknown(&e) && tries < RECONCILE_TRIES => {
                    unresolved = true;
                    tries += 1;
                    tracing::warn!(error = %e, tries, "acquire outcome unknown; reconciling");
                    tokio::time::sleep(Duration::from_millis(20 * u64::from(tries))).await;
                    continue;
                }
                Err(e) if self.ride_out(&e, &mut unavailable_since, deadline) => {
                    // A cluster or Sentinel failover in progress: keep trying with the same
                    // owner id (idempotent) until the grace period or the wait runs out.
                    unresolved |= outcome_unknown(&e);
                    tracing::debug!(error = %e, "redis unavailable; waiting for failover");
                    tokio::time::sleep(FAILOVER_RETRY).await;
                    continue;
                }
                Err(e) => {
                    if !outcome_unknown(&e) && !unresolved {
                        cleanup.job = None;
                    }
                    Err(LockError::backend("acquire", e))
                }
            };
        }
    }

    /// Whether to retry an acquire error because the deployment may be failing over.
    fn ride_out(
        &self,
        e: &redis::RedisError,
        since: &mut Option<Instant>,
        deadline: Option<Instant>,
    ) -> bool {
        failover_symptom(e) && self.within_grace(since, deadline)
    }

    /// Whether a failing-over deployment's grace period (bounded by the wait) leaves time for
    /// another attempt.
    fn within_grace(&self, since: &mut Option<Instant>, deadline: Option<Instant>) -> bool {
        let config = &self.client.inner.config;
        if !config.topology.fails_over() {
            return false;
        }
        let now = Instant::now();
        let first = *since.get_or_insert(now);
        let until = first + config.failover_grace;
        let until = deadline.map_or(until, |d| d.min(until));
        now + FAILOVER_RETRY < until
    }

    /// Undoes a grant that replicas did not acknowledge; returns whether the lock is known not
    /// to be held by us any more.
    async fn roll_back(&self, names: &Arc<LockNames>, owner: &Arc<str>) -> bool {
        let inner = &self.client.inner;
        let rolled_back = inner
            .config
            .publishing()
            .release
            .key(&names.key)
            .key(&names.channel)
            .arg(&**owner)
            .invoke_async::<Reply>(&mut inner.conn.clone())
            .await;
        tracing::warn!(lock = %names.name, ok = rolled_back.is_ok(), "grant not acknowledged by enough replicas; rolled back");
        matches!(rolled_back, Ok(Reply::Done(_) | Reply::NotDone(_)))
    }

    #[allow(clippy::too_many_arguments)]
    fn hold(
        &self,
        names: &Arc<LockNames>,
        owner: &Arc<str>,
        acquisition: u64,
        token: u64,
        sent: Instant,
        lease: Duration,
        opts: &LockOptions,
    ) -> LockGuard {
        let inner = &self.client.inner;
        Counters::add(&inner.counters.acquisitions, 1);
        let signal = Arc::new(LossSignal::new());
        inner.watchdog.register(
            acquisition,
            Entry {
                names: names.clone(),
                owner: owner.clone(),
                renew: opts.lease.is_none(),
                confirmed_until: sent + lease,
                max_hold_until: opts.max_hold.map(|m| sent + m),
                lease,
                signal: signal.clone(),
            },
        );
        LockGuard::new(Held {
            client: self.client.clone(),
            names: names.clone(),
            owner: owner.clone(),
            acquisition,
            token,
            lease,
            signal,
        })
    }

    /// Whether anyone holds the lock.
    pub async fn is_locked(&self) -> Result<bool, LockError> {
        Ok(matches!(self.inspect().await?, Reply::Done(_)))
    }

    /// The holder's remaining lease; `None` when the lock is free (or a foreign hash at its key
    /// has no TTL).
    pub async fn remaining_ttl(&self) -> Result<Option<Duration>, LockError> {
        Ok(match self.inspect().await? {
            Reply::Done(pttl) if pttl > 0 => Some(Duration::from_millis(pttl as u64)),
            _ => None,
        })
    }

    /// Deletes the lock whoever holds it and wakes a waiter. The holder's guard reports the loss
    /// at its next renewal. Returns whether a lock was deleted.
    pub async fn force_unlock(&self) -> Result<bool, LockError> {
        let names = self.names()?;
        let reply = self
            .client
            .inner
            .config
            .publishing()
            .force_unlock
            .key(&names.key)
            .key(&names.channel)
            .invoke_async::<Reply>(&mut self.client.inner.conn.clone())
            .await
            .map_err(|e| LockError::backend("force_unlock", e))?;
        tracing::info!(lock = %names.name, deleted = matches!(reply, Reply::Done(_)), "force unlock");
        self.checked(reply).map(|r| matches!(r, Reply::Done(_)))
    }

    async fn inspect(&self) -> Result<Reply, LockError> {
        let names = self.names()?;
        let reply = script::INSPECT
            .key(&names.key)
            .invoke_async::<Reply>(&mut self.client.inner.conn.clone())
            .await
            .map_err(|e| LockError::backend("inspect", e))?;
        self.checked(reply)
    }

    fn checked(&self, reply: Reply) -> Result<Reply, LockError> {
        match reply {
            Reply::Foreign(found) => Err(LockError::ForeignData {
                key: self.names()?.key.clone(),
                found,
            }),
            other => Ok(other),
        }
    }
}

/// Passes a consumed unlock notification on to the next local waiter if this waiter is
/// cancelled or fails before its attempt decided anything, so a wake-up is never swallowed.
struct Baton<'a>(Option<&'a Notify>);

impl Drop for Baton<'_> {
    fn drop(&mut self) {
        if let Some(notify) = self.0 {
            notify.notify_one();
        }
    }
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

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock").field("name", &self.name()).finish()
    }
}

#[cfg(test)]
mod tests;
