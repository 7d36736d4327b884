//! The race-free acquire loop: try once (one round trip when the lock is free); when it is
//! busy, subscribe to its unlock channel, try again, and sleep until an unlock message, the
//! holder's remaining lease or the deadline, whichever comes first; then retry.
//!
//! While it waits, the task is queued for a local hand-off (`handoff.rs`): a task of the same
//! client that releases the lock grants it to the first queued task in its own round trip.
//!
//! Every attempt is reconciled: an unknown outcome is retried with the same owner id (retaking
//! our own hold is idempotent), and if the acquire gives up or is cancelled while a request may
//! have taken the lock, the possible hold is released in the background.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

use crate::backend::Reply;
use crate::backend::{Acked, Shortfall};
use crate::demux::{Subscription, WakeRule};
use crate::error::{failover_symptom, outcome_unknown};
use crate::handoff::{Delivery, Grant, Streak, Ticket};
use crate::hold::{Held, LossSignal};
use crate::keys::{LockNames, Mode, PLACE_TTL, Waking};
use crate::metrics::{self, Group};
use crate::releaser::ReleaseJob;
use crate::stats::Counters;
use crate::watchdog::Entry;
use crate::{LockClient, LockError, LockGuard, LockOptions};

/// How often an acquire whose outcome is unknown (timeout, dropped connection) is retried with
/// the same owner id before giving up.
const RECONCILE_TRIES: u32 = 3;
/// The longest sleep between attempts on a lock whose key has no TTL (foreign data), and the
/// longest a waiter queued behind local waiters waits for its turn before trying.
const NO_TTL_POLL: Duration = Duration::from_secs(1);
/// The longest sleep between attempts while the unlock channel is not confirmed.
const UNSUBSCRIBED_POLL: Duration = Duration::from_millis(100);
/// The pause between acquire attempts while a failing-over deployment is unavailable.
const FAILOVER_RETRY: Duration = Duration::from_millis(100);
/// The longest pause between retries of a grant that replicas did not acknowledge.
const MAX_ACK_BACKOFF: Duration = Duration::from_secs(1);

/// The outcome of one reconciled attempt.
enum Attempt {
    /// Taken with this fencing token; the request was sent at `sent`.
    Taken { token: u64, sent: Instant },
    /// Held by another owner.
    Busy(Busy),
}

/// What an attempt that found the lock held learnt about the holder's lease.
#[derive(Clone, Copy, Debug)]
enum Busy {
    /// Held for this much longer.
    For(Duration),
    /// Held by a key without a TTL (foreign data): poll.
    NoTtl,
    /// Gone between the script's checks (expired just then): retry at once.
    Vanished,
}

impl Busy {
    /// From the PTTL the acquire script returns (-1: no TTL, -2: no key).
    fn from_pttl(pttl: i64) -> Busy {
        match pttl {
            p if p > 0 => Busy::For(Duration::from_millis(p as u64)),
            -1 => Busy::NoTtl,
            _ => Busy::Vanished,
        }
    }

    /// The holder's remaining lease, when known.
    fn remaining(self) -> Option<Duration> {
        match self {
            Busy::For(d) => Some(d),
            Busy::NoTtl | Busy::Vanished => None,
        }
    }

    /// How long to sleep (without an unlock message) before the next attempt.
    fn retry_in(self) -> Duration {
        match self {
            Busy::For(d) => d,
            Busy::NoTtl => NO_TTL_POLL,
            Busy::Vanished => Duration::ZERO,
        }
    }
}

/// A settled attempt while waiting.
enum Settled {
    Taken(LockGuard),
    Busy(Busy),
}

/// The wake-ups a waiter received: one it still owes the next waiter if it stops before its
/// attempt decided anything (the baton), the last message it passed on, and when the last one
/// arrived (a hand-over's start, for the metrics).
#[derive(Default)]
struct WakeChain<'s> {
    baton: Baton<'s>,
    /// The channel's message count when this waiter last passed a wake-up on.
    passed_on: Option<u64>,
    woken_at: Option<Instant>,
}

impl<'s> WakeChain<'s> {
    /// An unlock message woke this waiter.
    fn woken(&mut self, notify: &'s Notify) {
        self.baton.0 = Some(notify);
        self.woken_at = Some(Instant::now());
    }
}

/// One acquisition in progress: what every attempt of it sends.
///
/// Kept small and borrowed rather than copied: the future of every waiting task holds it.
pub(crate) struct Acquire<'a> {
    client: &'a LockClient,
    names: &'a Arc<LockNames>,
    opts: &'a LockOptions,
    mode: Mode,
    acquisition: u64,
    owner: Arc<str>,
    lease: Duration,
    start: Instant,
    /// `None`: no deadline (also for a wait too long to represent, such as `Duration::MAX`).
    deadline: Option<Instant>,
    /// The `group` label of its metrics.
    group: Group,
}

impl<'a> Acquire<'a> {
    pub(crate) fn new(
        client: &'a LockClient,
        names: &'a Arc<LockNames>,
        opts: &'a LockOptions,
        mode: Mode,
        group: Option<&Arc<str>>,
    ) -> Acquire<'a> {
        let inner = &client.inner;
        let start = Instant::now();
        let (acquisition, owner) = inner.next_owner();
        Acquire {
            client,
            names,
            mode,
            acquisition,
            owner: names.owner(mode, owner).into(),
            lease: opts.lease.unwrap_or(inner.config.watchdog_timeout),
            start,
            deadline: opts.wait.and_then(|w| start.checked_add(w)),
            opts,
            group: Group::resolve(group, &names.name),
        }
    }

    /// Takes the lock (see [`Acquire::take`]), traced and counted in the metrics.
    // Written out: an `async fn` keeps a second copy of its arguments (see below).
    #[allow(clippy::manual_async_fn)]
    pub(crate) fn run(self) -> impl Future<Output = Result<LockGuard, LockError>> + 'a {
        // An `async move` block rather than an `async fn`, which would keep a second copy of
        // `self` in the future that every waiting task stores.
        async move {
            let span = tracing::debug_span!(
                "lock.acquire",
                lock = %self.names.name,
                kind = self.names.family().describe(),
                mode = ?self.mode,
                wait = ?self.opts.wait
            );
            let result = tracing::Instrument::instrument(self.take(), span).await;
            metrics::acquisition(
                &self.group,
                metrics::Outcome::of(&result),
                self.start.elapsed(),
            );
            result
        }
    }

    /// Takes the lock: the fast path first, then (when busy) the wait for an unlock.
    ///
    /// Fair inside a process: when other tasks of this client already wait for this lock, it
    /// queues behind them instead of racing them for it. (A task that releases and comes
    /// straight back would otherwise win nearly every time: the waiter it woke needs a pub/sub
    /// delivery before it can even try.)
    async fn take(&self) -> Result<LockGuard, LockError> {
        // (A fair lock's queue is in Redis; its first attempt takes its place there.)
        let queue_first = self.opts.wait != Some(Duration::ZERO)
            && self.names.family().hands_off()
            && self.client.inner.demux.has_waiters(&self.names.channel);
        let busy = if queue_first {
            None
        } else {
            // Uncontended: one round trip, no subscription. A busy attempt may have taken a
            // place in Redis (a fair lock's queue): removed if we stop here.
            let mut place = Place::without_ticket(self);
            let busy = match Box::pin(self.attempt(false)).await? {
                Attempt::Taken { token, sent } => {
                    place.holds = true;
                    return Ok(self.hold(token, sent, Streak::default()));
                }
                Attempt::Busy(busy) => busy,
            };
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(self.timeout(busy));
            }
            // From here the waiting loop's own place keeps it (it is made before the loop's
            // first await, so no cancellation falls in between).
            place.in_redis = false;
            Some(busy)
        };
        let wait_span = tracing::debug_span!("lock.wait", queue_first);
        // Boxed: only contended acquisitions pay for the waiting state.
        Box::pin(tracing::Instrument::instrument(
            self.wait_turn(busy),
            wait_span,
        ))
        .await
    }

    /// Waits for the lock to be free and takes it. `busy` is what the first attempt found;
    /// `None` when this waiter queued behind local waiters without trying.
    ///
    /// Subscribe, take a place; then, until the lock is ours: be subscribed, try, and sleep
    /// until an unlock message, a local hand-off, the holder's lease end or the deadline.
    // Written out: an `async fn` keeps a second copy of its arguments (see below).
    #[allow(clippy::manual_async_fn)]
    fn wait_turn(
        &self,
        mut busy: Option<Busy>,
    ) -> impl Future<Output = Result<LockGuard, LockError>> + '_ {
        // An `async move` block rather than an `async fn`: that would keep a second copy of
        // its arguments in every waiting task's future.
        async move {
            let sub = self.subscribe();
            let mut place = Place::join(self);
            let _waiting = metrics::Waiting::start(&self.group);
            let mut chain = WakeChain::default();
            let mut skip_attempt = busy.is_none();
            tracing::debug!(?busy, "lock busy; waiting for an unlock message");
            // Whether the last look found the channel confirmed: if not, the next one does not
            // wait for it again, so an unconfirmable channel costs one short wait, then polling
            // every UNSUBSCRIBED_POLL.
            let mut was_subscribed = true;
            // One timer for the whole wait, set again before each use (for the subscription's
            // confirmation, then for the retry): every waiting task keeps it in its future.
            let timer = tokio::time::sleep_until(Instant::now());
            tokio::pin!(timer);
            loop {
                // Listen before looking at the channel's state: a lost connection marks it
                // unconfirmed and wakes the listeners registered at that moment, so a listener
                // registered after the look could miss that wake-up and sleep the holder's
                // whole lease with an unlock lost in the gap.
                let notified = sub.notify().notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                // Be subscribed before the attempt, so an unlock published after it cannot be
                // missed.
                let subscribed =
                    sub.is_ready() || (was_subscribed && self.confirm(&sub, timer.as_mut()).await);
                was_subscribed = subscribed;
                // Queued behind local waiters: wait for our turn (bounded) before trying.
                let queued_wait = std::mem::take(&mut skip_attempt);
                if !queued_wait {
                    // Boxed: the round trip's future is large and only alive during the
                    // attempt; inline it would make every waiting task carry its size while it
                    // sleeps.
                    let attempt = Box::pin(self.attempt(true)).await;
                    match self.settle(attempt, &sub, &mut chain, &mut place)? {
                        Settled::Taken(guard) => return Ok(guard),
                        Settled::Busy(now_busy) => busy = Some(now_busy),
                    }
                }
                let wake = self.next_wake(busy, queued_wait, subscribed, place.in_redis)?;
                timer.as_mut().reset(wake);
                tokio::select! {
                    _ = &mut notified => chain.woken(sub.notify()),
                    delivery = place.delivered() => match delivery {
                        Delivery::Granted(grant) => {
                            place.holds = true;
                            match self.take_grant(grant).await? {
                                Settled::Taken(guard) => return Ok(guard),
                                // Held by another owner: our grant has ended. Queue again.
                                Settled::Busy(now_busy) => {
                                    busy = Some(now_busy);
                                    place = Place::join(self);
                                }
                            }
                        }
                        // The release meant to hand it over did not: look for ourselves.
                        Delivery::Retry => {}
                    },
                    _ = timer.as_mut() => {}
                }
            }
        }
    }

    /// Subscribes to what wakes this waiter: the lock's unlock channel (as a fair lock's
    /// waiter, only to the messages that name it), or a channel of its own.
    fn subscribe(&self) -> Subscription {
        let demux = &self.client.inner.demux;
        match self.names.waking(&self.owner) {
            Waking::Own(channel) => demux.subscribe(&channel),
            Waking::Directed => demux.subscribe_directed(&self.names.channel, &self.owner),
            Waking::Shared {
                write_unlock_wakes_all,
            } => {
                let rule = if write_unlock_wakes_all {
                    WakeRule::WriteUnlockWakesAll
                } else {
                    WakeRule::Counted
                };
                demux.subscribe_with(&self.names.channel, rule)
            }
        }
    }

    /// Waits for the subscription's confirmation, one short poll at most (never past the
    /// deadline): a subscription that cannot be confirmed degrades to polling.
    async fn confirm(&self, sub: &Subscription, mut timer: Pin<&mut Sleep>) -> bool {
        let until = Instant::now() + UNSUBSCRIBED_POLL;
        timer
            .as_mut()
            .reset(self.deadline.map_or(until, |d| d.min(until)));
        sub.ready_by(timer).await
    }

    /// Settles an attempt made while waiting: the lock (a guard), or who holds it; and keeps
    /// the chain of wake-ups going (see [`WakeChain`]).
    fn settle<'s>(
        &self,
        attempt: Result<Attempt, LockError>,
        sub: &'s Subscription,
        chain: &mut WakeChain<'s>,
        place: &mut Place<'_>,
    ) -> Result<Settled, LockError> {
        let woken = chain.baton.0.is_some();
        if attempt.is_ok() {
            // Decided: either ours, or taken by someone whose release will publish again.
            chain.baton.0 = None;
        }
        match attempt? {
            Attempt::Taken { token, sent } => {
                place.holds = true;
                if woken && self.mode == Mode::Read && self.names.scheme.shares_read_wake_ups() {
                    // Redisson wakes one waiter per process when a read unlock frees the lock
                    // (`0`): every other waiting reader can come in too, so wake them now
                    // rather than at their retry timers (a waiting writer wakes, finds us in
                    // and sleeps again).
                    sub.notify().notify_waiters();
                }
                if let (true, Some(at)) = (woken, chain.woken_at) {
                    metrics::handed_over(&self.group, at.elapsed());
                }
                Ok(Settled::Taken(self.hold(token, sent, Streak::default())))
            }
            Attempt::Busy(busy) => {
                if woken && self.passes_wake_ups_on() && chain.passed_on != Some(sub.messages()) {
                    chain.passed_on = Some(sub.messages());
                    sub.notify().notify_one();
                }
                Ok(Settled::Busy(busy))
            }
        }
    }

    /// Whether a waiter that an unlock message woke but that found the lock still busy passes
    /// its wake-up on, once per message, so the chain ends with someone who can get in:
    ///
    /// - a release wakes as many waiters as permits came free, and one that wants more
    ///   permits than are free would swallow a wake-up meant for a smaller request;
    /// - a writer of Redisson's read/write lock that a read unlock woke, but that a reader of
    ///   another process beat to it: readers can still come in.
    fn passes_wake_ups_on(&self) -> bool {
        matches!(self.mode, Mode::Permits(n) if n > 1)
            || (self.mode == Mode::Write && self.names.scheme.shares_read_wake_ups())
    }

    /// When to try again without a message: the holder's lease end (or a poll), sooner while
    /// unsubscribed or while our place in Redis needs refreshing; never past the deadline. A
    /// waiter whose deadline passed gives up here, but only after an attempt: a queued waiter
    /// whose deadline passed while it waited for its turn still tries once.
    fn next_wake(
        &self,
        busy: Option<Busy>,
        queued_wait: bool,
        subscribed: bool,
        place_in_redis: bool,
    ) -> Result<Instant, LockError> {
        let now = Instant::now();
        if let Some(busy) = busy
            && !queued_wait
            && self.deadline.is_some_and(|d| now >= d)
        {
            return Err(self.timeout(busy));
        }
        let mut sleep = busy.map_or(NO_TTL_POLL, Busy::retry_in);
        if !subscribed {
            sleep = sleep.min(UNSUBSCRIBED_POLL);
        }
        if place_in_redis {
            // Refresh our place (a fair lock's queue entry, a writer's claim) in time.
            sleep = sleep.min(PLACE_TTL / 3);
        }
        // A foreign key's TTL can be beyond what an `Instant` can represent.
        let sleep = sleep.min(crate::options::MAX_LEASE);
        Ok(self.deadline.map_or(now + sleep, |d| d.min(now + sleep)))
    }

    /// Takes a local hand-off. One told too late to trust its lease is taken again with the
    /// same owner id (idempotent while it is still ours); if another owner holds the lock by
    /// then, the grant has ended and the waiter queues again ([`Settled::Busy`]).
    async fn take_grant(&self, grant: Grant) -> Result<Settled, LockError> {
        if self.fresh(grant.sent) {
            metrics::handed_over(&self.group, grant.sent.elapsed());
            return Ok(Settled::Taken(self.hold(
                grant.token,
                grant.sent,
                grant.streak,
            )));
        }
        tracing::debug!("hand-off answered too late; taking the lock again");
        match Box::pin(self.attempt(true)).await {
            Ok(Attempt::Taken { token, sent }) => {
                Ok(Settled::Taken(self.hold(token, sent, Streak::default())))
            }
            Ok(Attempt::Busy(busy)) => Ok(Settled::Busy(busy)),
            Err(e) => {
                // Giving up: whatever is left of the grant goes.
                self.client.inner.releaser.submit(ReleaseJob::new(
                    self.names,
                    &self.owner,
                    Instant::now() + self.lease,
                ));
                Err(e)
            }
        }
    }

    /// Whether this waiter keeps a place in Redis (a fair lock's queue entry, a native waiting
    /// writer's claim).
    fn holds_a_place(&self) -> bool {
        self.names.scheme.holds_place(self.mode)
    }

    fn timeout(&self, busy: Busy) -> LockError {
        LockError::WaitTimeout {
            name: self.names.name.clone(),
            waited: self.start.elapsed(),
            remaining_ttl: busy.remaining(),
        }
    }

    /// One acquire round trip, reconciled: an unknown outcome is retried with the same owner
    /// id (retaking our own hold is idempotent), and if we give up or are cancelled while a
    /// request may have taken the lock, the possible hold is released in the background.
    /// `waiting`: made while subscribed to the lock's unlock channel (see `Backend::acquire`).
    async fn attempt(&self, waiting: bool) -> Result<Attempt, LockError> {
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
        let mut reconcile = Reconcile::new(grace, self.deadline);
        loop {
            let job = ReleaseJob::new(self.names, &self.owner, Instant::now() + self.lease);
            cleanup.job = Some(job);
            let sent = Instant::now();
            let Acked { reply, shortfall } = match self.send_acquire(waiting).await {
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
        reconcile: &mut Reconcile,
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
    fn fresh(&self, sent: Instant) -> bool {
        Instant::now() + crate::options::loss_margin(self.lease) < sent + self.lease
    }

    /// Sends the acquire once (acknowledged by replicas when the client asks for it).
    async fn send_acquire(&self, waiting: bool) -> redis::RedisResult<Acked<Reply>> {
        let inner = &self.client.inner;
        // Rounded up: Redis never gets a shorter lease than the client believes it holds.
        let lease_ms = crate::options::ceil_millis(self.lease);
        let retention_ms = inner.config.fence_retention.as_millis() as u64;
        inner
            .backend
            .acquire(self.names, &self.owner, lease_ms, retention_ms, waiting)
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

    /// The guard of a taken lock, registered with the watchdog; `streak`: the turn of local
    /// hand-overs that led to it (the default, count 0, when taken by an attempt).
    fn hold(&self, token: u64, sent: Instant, streak: Streak) -> LockGuard {
        let inner = &self.client.inner;
        Counters::add(&inner.counters.acquisitions, 1);
        if streak.count > 0 {
            Counters::add(&inner.counters.handoffs, 1);
        }
        let signal = Arc::new(LossSignal::new(self.group.clone()));
        inner.watchdog.register(
            self.acquisition,
            Entry {
                names: self.names.clone(),
                owner: self.owner.clone(),
                renew: self.opts.lease.is_none(),
                confirmed_until: sent + self.lease,
                max_hold_until: self.opts.max_hold.map(|m| sent + m),
                lease: self.lease,
                signal: signal.clone(),
            },
        );
        metrics::hold_started(&self.group);
        LockGuard::new(Held {
            client: self.client.clone(),
            names: self.names.clone(),
            owner: self.owner.clone(),
            acquisition: self.acquisition,
            token,
            lease: self.lease,
            streak,
            signal,
            group: self.group.clone(),
            granted: sent,
        })
    }
}

/// A waiter's place: in the client's hand-off queue (a mutex), and in Redis for the families
/// whose waiters hold one there (a fair lock's queue, a waiting writer's claim).
///
/// Leaving without taking a hand-off that arrived (cancelled, timed out, failed) releases that
/// grant in the background, or passes it on to the next waiter. Leaving without the lock
/// removes the place in Redis in the background, at once, so a waiter that gives up never
/// holds up the others.
struct Place<'a> {
    acquire: &'a Acquire<'a>,
    ticket: Option<Arc<Ticket>>,
    /// The waiter's attempts keep a place in Redis.
    in_redis: bool,
    /// Set just before the waiter returns holding the lock.
    holds: bool,
}

impl<'a> Place<'a> {
    fn join(acquire: &'a Acquire<'a>) -> Place<'a> {
        let family = acquire.names.family();
        let ticket = family.hands_off().then(|| {
            acquire
                .client
                .inner
                .handoffs
                .join(&acquire.names.key, &acquire.owner, acquire.lease)
        });
        Place {
            acquire,
            ticket,
            in_redis: acquire.holds_a_place(),
            holds: false,
        }
    }

    /// The place of a first attempt, made before any hand-off queue is joined.
    fn without_ticket(acquire: &'a Acquire<'a>) -> Place<'a> {
        Place {
            acquire,
            ticket: None,
            in_redis: acquire.holds_a_place(),
            holds: false,
        }
    }

    /// A hand-off's outcome; pending for the families without local hand-off.
    async fn delivered(&self) -> Delivery {
        match &self.ticket {
            Some(ticket) => ticket.delivered().await,
            None => std::future::pending().await,
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let acquire = self.acquire;
        let inner = &acquire.client.inner;
        if let Some(ticket) = &self.ticket
            && let Some(grant) = inner.handoffs.leave(&acquire.names.key, ticket, self.holds)
        {
            tracing::debug!("left with a hand-off not taken; releasing it in the background");
            let job = ReleaseJob::new(acquire.names, &acquire.owner, grant.sent + acquire.lease);
            inner.releaser.submit(job.handing_off(grant.streak));
        }
        if self.in_redis && !self.holds {
            // Releasing an owner that holds nothing removes its place (and wakes whoever
            // it held up).
            tracing::debug!("stopped waiting; leaving the queue in the background");
            let job = ReleaseJob::new(
                acquire.names,
                &acquire.owner,
                Instant::now() + acquire.names.scheme.place_outlives(),
            );
            inner.releaser.submit(job);
        }
    }
}

/// Sleeps for `d`, the timer boxed: an attempt pauses only after an error, and inline the
/// timer would make every attempt's future (alive while its request is in flight) larger.
async fn boxed_sleep(d: Duration) {
    Box::pin(tokio::time::sleep(d)).await;
}

/// The retry state of one attempt: unknown outcomes, an unavailable (failing-over) deployment,
/// and grants the replicas did not acknowledge.
struct Reconcile {
    /// Retries after an unknown outcome so far.
    tries: u32,
    /// Some earlier request's outcome is still unknown (it may have taken the lock).
    unresolved: bool,
    /// When the deployment was first found unavailable (or a grant unacknowledged).
    unavailable_since: Option<Instant>,
    /// The next pause before retrying an unacknowledged grant.
    ack_backoff: Duration,
    /// How long a failing-over deployment may stay unavailable; `None` if it cannot fail over.
    grace: Option<Duration>,
    deadline: Option<Instant>,
}

impl Reconcile {
    fn new(grace: Option<Duration>, deadline: Option<Instant>) -> Reconcile {
        Reconcile {
            tries: 0,
            unresolved: false,
            unavailable_since: None,
            ack_backoff: FAILOVER_RETRY,
            grace,
            deadline,
        }
    }

    /// How long to pause before retrying after `e`; `None` to give up.
    fn retry_after(&mut self, e: &redis::RedisError) -> Option<Duration> {
        if outcome_unknown(e) && self.tries < RECONCILE_TRIES {
            self.unresolved = true;
            self.tries += 1;
            tracing::warn!(error = %e, tries = self.tries, "acquire outcome unknown; reconciling");
            return Some(Duration::from_millis(20 * u64::from(self.tries)));
        }
        if self.ride_out(e) {
            // A cluster or Sentinel failover in progress: keep trying with the same owner id
            // (idempotent) until the grace period or the wait runs out.
            self.unresolved |= outcome_unknown(e);
            tracing::debug!(error = %e, "redis unavailable; waiting for failover");
            return Some(FAILOVER_RETRY);
        }
        None
    }

    /// Whether giving up after `e` leaves nothing that may hold the lock.
    fn settled_by(&self, e: &redis::RedisError) -> bool {
        !outcome_unknown(e) && !self.unresolved
    }

    /// Whether to retry an acquire error because the deployment may be failing over.
    fn ride_out(&mut self, e: &redis::RedisError) -> bool {
        failover_symptom(e) && self.within_grace()
    }

    /// Whether a failing-over deployment's grace period (bounded by the wait) leaves time for
    /// another attempt.
    fn within_grace(&mut self) -> bool {
        let Some(grace) = self.grace else {
            return false;
        };
        let now = Instant::now();
        let first = *self.unavailable_since.get_or_insert(now);
        let until = first + grace;
        let until = self.deadline.map_or(until, |d| d.min(until));
        now + FAILOVER_RETRY < until
    }

    /// The pause before retrying an unacknowledged grant; doubles each time, up to a second.
    fn next_ack_backoff(&mut self) -> Duration {
        let pause = self.ack_backoff;
        self.ack_backoff = (pause * 2).min(MAX_ACK_BACKOFF);
        pause
    }
}

/// Passes a consumed unlock notification on to the next local waiter if this waiter is
/// cancelled or fails before its attempt decided anything, so a wake-up is never swallowed.
#[derive(Default)]
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
