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

mod attempt;
mod place;

use place::{Place, WakeChain};

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::backend::Approach;
use crate::demux::{Subscription, WakeRule};
use crate::handoff::{Delivery, Grant, Streak};
use crate::hold::Held;
use crate::keys::{LockNames, Mode, PLACE_TTL, Waking};
use crate::metrics::{self, Group};
use crate::releaser::ReleaseJob;
use crate::signal::LossSignal;
use crate::stats::Counters;
use crate::watchdog::Entry;
use crate::{LockClient, LockError, LockGuard, LockOptions};

/// The longest sleep between attempts on a lock whose key has no TTL (foreign data), and the
/// longest a waiter queued behind local waiters waits for its turn before trying.
const NO_TTL_POLL: Duration = Duration::from_secs(1);

/// The longest sleep between attempts while the unlock channel is not confirmed.
const UNSUBSCRIBED_POLL: Duration = Duration::from_millis(100);

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
    /// From the PTTL the acquire script returns (-1: no TTL, -2: no key, or not known: a plain
    /// first attempt's).
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
    /// The grant issues a fencing token (else the mutex's token is issued on demand).
    fenced: bool,
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
            fenced: true,
        }
    }

    /// Whether the grant issues a fencing token (a mutex's; the other kinds always do).
    pub(crate) fn fenced(mut self, fenced: bool) -> Acquire<'a> {
        self.fenced = fenced;
        self
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
        let queue_first = self.opts.wait != Some(Duration::ZERO) && self.queues_first();
        let busy = if queue_first {
            None
        } else {
            // Uncontended: one round trip, no subscription. A busy attempt may have taken a
            // place in Redis (a fair lock's queue): removed if we stop here.
            let mut place = Place::without_ticket(self);
            // An acquire that waits needs only whether the lock is free; one that does not
            // wait reports the holder's remaining lease.
            let approach = if self.opts.wait == Some(Duration::ZERO) {
                Approach::First
            } else {
                Approach::Plain
            };
            let busy = match Box::pin(self.attempt(approach)).await? {
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
                // (The wait for the confirmation boxed: a waiter makes it about once, and
                // inline it would make every waiting task's future larger while it sleeps.)
                let subscribed = sub.is_ready()
                    || (was_subscribed && Box::pin(self.confirm(&sub, timer.as_mut())).await);
                was_subscribed = subscribed;
                // Queued behind local waiters: wait for our turn (bounded) before trying.
                let queued_wait = std::mem::take(&mut skip_attempt);
                if !queued_wait {
                    // Boxed: the round trip's future is large and only alive during the
                    // attempt; inline it would make every waiting task carry its size while it
                    // sleeps.
                    let attempt = Box::pin(self.attempt(Approach::Waiting)).await;
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
                            // Boxed, as the confirmation above: a waiter rarely takes more than one.
                            match Box::pin(self.take_grant(grant)).await? {
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
        if grant.inherited.is_some() {
            // Passed in memory: take over the hold Redis knows, if it is still live.
            return Ok(
                match Held::take_over(
                    self.client,
                    self.names,
                    self.lease,
                    self.opts.max_hold,
                    &self.group,
                    grant,
                ) {
                    Some(held) => Settled::Taken(LockGuard::new(held)),
                    None => Settled::Busy(Busy::Vanished),
                },
            );
        }
        if self.fresh(grant.sent) {
            metrics::handed_over(&self.group, grant.sent.elapsed());
            return Ok(Settled::Taken(self.hold(
                grant.token,
                grant.sent,
                grant.streak,
            )));
        }
        tracing::debug!("hand-off answered too late; taking the lock again");
        match Box::pin(self.attempt(Approach::Waiting)).await {
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

    /// Whether this waiter queues in the client's hand-off queue (`handoff.rs`): for a mutex,
    /// which a release may hand over, and for the kinds whose holds pass in memory (a
    /// semaphore's permits), which a release passes to the first waiter for as many.
    fn queues_locally(&self) -> bool {
        self.names.family().hands_off() || self.names.scheme.passes_in_memory()
    }

    /// Whether this acquisition queues behind the tasks of this client that already wait,
    /// without a first attempt: for a mutex, whenever one waits; for a semaphore, when the
    /// first of them wants as many permits (a request for fewer than a waiting one may still
    /// fit in what is free, and tries).
    fn queues_first(&self) -> bool {
        let inner = &self.client.inner;
        if self.names.family().hands_off() {
            inner.demux.has_waiters(&self.names.channel)
        } else {
            self.names.scheme.passes_in_memory()
                && inner.handoffs.first_wants(&self.names.key, self.mode)
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
            token: AtomicU64::new(token),
            lease: self.lease,
            streak,
            signal,
            group: self.group.clone(),
            granted: sent,
        })
    }
}
