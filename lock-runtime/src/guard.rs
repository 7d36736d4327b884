//! `LockGuard`: proof of holding a lock, with its fencing token, loss notification and release.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Acked;
use crate::backend::Reply;
use crate::handoff;
use crate::hold::Held;
use crate::releaser::ReleaseJob;
use crate::retry::{ReleaseRetry, outcome_unknown};
use crate::{LockError, LossReason, scope};

/// Proof that this owner holds a lock.
///
/// - [`fencing_token`](LockGuard::fencing_token): strictly increasing per lock name across
///   holders; pass it to the storage you protect and reject writes with an older token
///   (issued on demand for a mutex, unless it was taken [`fenced`](crate::Lock::fenced)).
/// - [`lost`](LockGuard::lost): resolves if the lock is lost while held (renewal failed or found
///   it gone, lease ran out); race it against your work.
/// - [`scope`](LockGuard::scope) / [`run`](LockGuard::run): run code in which taking the same
///   lock again re-enters instead of deadlocking.
/// - [`release`](LockGuard::release) releases and reports errors. Dropping the guard releases in
///   the background within milliseconds and never blocks.
///
/// ```no_run
/// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
/// let guard = locks.lock("stock:42").acquire().await?;
/// let token = guard.fencing_token().await?;
/// let outcome = guard
///     .run(async {
///         // Re-enters: no round trip, no deadlock.
///         let inner = locks.lock("stock:42").acquire().await?;
///         assert!(inner.is_reentrant());
///         Ok::<_, lock_runtime::LockError>(token)
///     })
///     .await??;
/// guard.release().await?;
/// # let _ = outcome; Ok(()) }
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    pub(crate) held: Arc<Held>,
    reentrant: bool,
    released: bool,
}

impl LockGuard {
    pub(crate) fn new(held: Held) -> LockGuard {
        LockGuard {
            held: Arc::new(held),
            reentrant: false,
            released: false,
        }
    }

    pub(crate) fn reentrant(held: Arc<Held>) -> LockGuard {
        LockGuard {
            held,
            reentrant: true,
            released: false,
        }
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.held.names.name
    }

    /// The Redis key of the lock (prefix and hash tag included).
    pub fn key(&self) -> &str {
        &self.held.names.key
    }

    /// The owner id written to Redis: `<client id>:<acquisition id>`, followed by `#r` or `#w`
    /// for a side of a read/write lock and by `#<permits>` for a semaphore. With
    /// [`Layout::Redisson`](crate::Layout::Redisson) a reader is `<client id>:<acquisition id>`
    /// and a writer `<client id>:<acquisition id>:write`, as Redisson names its fields; a
    /// semaphore's holder is `permits:<id>[,<id>…]#<permits>` (its permit ids, as Java's
    /// `release(id)` takes them), or `plain:<client id>:<acquisition id>#<permits>` without
    /// leases (written nowhere).
    pub fn owner(&self) -> &str {
        &self.held.owner
    }

    /// The fencing token of this hold: strictly greater than every token issued before it for
    /// the lock name, and issued only to the holder while it holds (SAFETY.md, promise 2).
    /// Pass it to the storage you protect and reject writes with an older token.
    ///
    /// - Taken [`fenced`](crate::Lock::fenced) (and for every kind of lock but the mutex): the
    ///   token came with the grant; this returns it without a round trip.
    /// - Taken without one (a mutex's default: tokens on demand): the first call asks Redis
    ///   for one, one round trip, checked against the holder in the same step; it is then
    ///   cached on the guard (re-entrant guards share their outermost guard's).
    /// - [`LockError::Lost`] once the hold is lost, by the clock too
    ///   ([`is_lost`](LockGuard::is_lost)), or when Redis finds the lock no longer ours: a
    ///   holder that lost the lock never gets a token.
    ///
    /// Cancellation-safe: dropped before the reply, at worst a token was issued that nobody
    /// uses (tokens stay increasing).
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let guard = locks.lock("stock:42").acquire().await?;
    /// let token = guard.fencing_token().await?; // one round trip, then cached
    /// assert_eq!(guard.issued_token(), Some(token));
    /// # Ok(()) }
    /// ```
    pub async fn fencing_token(&self) -> Result<u64, LockError> {
        self.held.fencing_token().await
    }

    /// The fencing token if one has been issued to this hold already (with a
    /// [`fenced`](crate::Lock::fenced) grant, or by an earlier
    /// [`fencing_token`](LockGuard::fencing_token)); `None` otherwise. No round trip.
    ///
    /// What was issued, for logs and metrics: it stays the same after the hold is lost. To
    /// write to a fenced store, use [`fencing_token`](LockGuard::fencing_token), which answers
    /// [`LockError::Lost`] once the hold is lost (by the clock too): a write should never be
    /// sent with the token of a hold known to be lost.
    pub fn issued_token(&self) -> Option<u64> {
        self.held.issued_token()
    }

    /// A handle to this hold's fencing token that can be cloned and kept apart from the guard,
    /// for code that must be able to ask for the token without owning the guard: a
    /// middleware's request extension, a task beside the critical section.
    ///
    /// The handle does not keep the lock: once the guard is released or dropped, its
    /// [`fencing_token`](TokenHandle::fencing_token) answers [`LockError::Lost`] with
    /// [`LossReason::Released`].
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let guard = locks.lock("stock:42").acquire().await?;
    /// let tokens = guard.token_handle();
    /// let token = tokens.fencing_token().await?; // one round trip, cached on the guard
    /// assert_eq!(guard.issued_token(), Some(token));
    /// guard.release().await?;
    /// assert!(tokens.fencing_token().await.unwrap_err().is_lost());
    /// # Ok(()) }
    /// ```
    pub fn token_handle(&self) -> TokenHandle {
        TokenHandle::of(&self.held)
    }

    /// The permits this guard holds: a semaphore's count, 1 for a lock or either side of a
    /// read/write lock.
    pub fn permits(&self) -> u32 {
        match crate::keys::Mode::of_owner(&self.held.owner) {
            crate::keys::Mode::Permits(n) => n,
            _ => 1,
        }
    }

    /// When the request that granted this hold was sent, on this process's monotonic clock:
    /// its lease, and the hold time the metrics record, count from there. For a hold taken over
    /// from another task of this client in memory, when it was passed. Re-entrant guards share
    /// their outermost guard's.
    ///
    /// Useful to order holds against each other (a grant's request is sent after the wait that
    /// preceded it), or to log how long the lock was held.
    pub fn granted_at(&self) -> Instant {
        self.held.granted
    }

    /// Whether this guard re-entered a lock held by an enclosing scope (it releases nothing).
    pub fn is_reentrant(&self) -> bool {
        self.reentrant
    }

    /// Until when the lock counts as held: the lease Redis last confirmed, measured from when
    /// that request was *sent* (so it never overestimates), minus the safety margin that
    /// [`is_lost`](LockGuard::is_lost) keeps (a tenth of an explicit lease, at least 5 ms; a
    /// tenth of the watchdog timeout): `is_lost` turns `true` at this instant, so the two
    /// agree. The watchdog moves it forward at every renewal. `None` once the lock is lost or
    /// released.
    ///
    /// Local clocks only: this is this process's monotonic clock, not Redis' wall clock.
    pub fn valid_until(&self) -> Option<Instant> {
        // `None` once lost (by a declaration or by the clock): `deadline` looks at both.
        self.held.signal.deadline()
    }

    /// The lease Redis last confirmed, measured from when that request was sent, without the
    /// safety margin (`None` once lost or released): what a [`RedLock`](crate::RedLock) counts
    /// its quorum's validity from, with its own drift instead of the margin.
    pub(crate) fn confirmed_until(&self) -> Option<Instant> {
        if self.held.signal.get().is_some() {
            return None;
        }
        self.held
            .client
            .inner
            .watchdog
            .confirmed_until(self.held.acquisition)
    }

    /// How much longer the lock counts as held ([`valid_until`](LockGuard::valid_until) minus
    /// now): zero exactly when [`is_lost`](LockGuard::is_lost) is `true`.
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// # use std::time::Duration;
    /// let lease = lock_runtime::LockOptions::new().lease(Duration::from_secs(10));
    /// let guard = locks.lock("report").acquire_with(lease).await?;
    /// if guard.remaining_validity() > Duration::from_secs(2) {
    ///     // Enough time left before `is_lost()` and `run` give up on the hold.
    /// }
    /// # Ok(()) }
    /// ```
    pub fn remaining_validity(&self) -> Duration {
        self.valid_until().map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(Instant::now())
        })
    }

    /// Whether the lock is known to be lost: declared lost, or past its local deadline (the
    /// lease confirmed so far, counted from when its request was sent, minus the safety margin)
    /// by this process's clock, even if the watchdog task has not run since (a process resumed
    /// after a pause: see SAFETY.md, "Paused processes"). Cheap: one atomic read and a clock
    /// read. [`lost`](LockGuard::lost), [`run`](LockGuard::run) and
    /// [`remaining_validity`](LockGuard::remaining_validity) agree with it.
    pub fn is_lost(&self) -> bool {
        self.held.signal.get().is_some()
    }

    /// Resolves with [`LockError::Lost`] once the lock is lost; pending while it is held.
    ///
    /// With the watchdog this fires before the lease could expire when renewal cannot be
    /// confirmed, and at the next renewal when the lock was deleted or taken over; with an
    /// explicit lease it fires a safety margin before the lease ends (a tenth of it, at least
    /// 5 ms), so the holder is told before Redis can let a rival take the lock. It wakes at the
    /// local deadline by its own timer and looks at the clock at every poll, so it does not
    /// depend on the watchdog task having run (see [`is_lost`](LockGuard::is_lost)).
    pub async fn lost(&self) -> LockError {
        let reason = self.held.signal.wait().await;
        self.lost_error(reason)
    }

    /// Runs `fut` inside this guard's reentrancy scope: taking the same lock (same client, same
    /// name) inside it re-enters without a round trip.
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        scope::enter(self.held.clone(), fut)
    }

    /// Runs the synchronous `f` inside this guard's reentrancy scope, like
    /// [`scope`](LockGuard::scope) does for a future.
    ///
    /// For poll-based code that drives futures or streams by hand (a response body, a `Stream`
    /// implementation): call the inner `poll_*` inside it on every poll, and whatever that
    /// future takes of the same lock re-enters.
    ///
    /// ```no_run
    /// # use std::{future::Future, pin::Pin, task::{Context, Poll}};
    /// # fn demo(guard: &lock_runtime::LockGuard, inner: Pin<&mut (dyn Future<Output = ()> + Send)>, cx: &mut Context<'_>) {
    /// let poll: Poll<()> = guard.sync_scope(|| inner.poll(cx));
    /// # let _ = poll; }
    /// ```
    pub fn sync_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        scope::enter_sync(self.held.clone(), f)
    }

    /// Like [`lost`](LockGuard::lost), but the future owns what it needs (`'static`), so it can
    /// be stored next to the guard, for example in a response body that must stop when the
    /// lock is lost.
    pub fn lost_owned(&self) -> impl Future<Output = LockError> + Send + 'static {
        let held = self.held.clone();
        async move {
            let reason = held.signal.wait().await;
            LockError::Lost {
                name: held.names.name.clone(),
                reason,
            }
        }
    }

    /// Like [`scope`](LockGuard::scope), but if the lock is lost while `fut` runs, `fut` is
    /// dropped and [`LockError::Lost`] returned.
    pub async fn run<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        if let Some(reason) = self.held.signal.get() {
            return Err(self.lost_error(reason));
        }
        unless_lost(self.scope(fut), self.lost()).await
    }

    /// Releases the lock and reports the outcome.
    ///
    /// Cancellation-safe: from its first poll the lock counts as released (code in the guard's
    /// scope no longer re-enters); if the future is dropped before the outcome is known, the
    /// release is handed to the background releaser, exactly as if the guard had been dropped.
    ///
    /// - `Ok(())`: it was ours and is now free (a waiter has been woken).
    /// - [`LockError::Lost`]: it had been lost before (your critical section may have overlapped
    ///   with another holder's); whatever was left of it is released.
    /// - [`LockError::NotOwner`]: it was no longer ours (expired or force-unlocked).
    /// - [`LockError::ReleaseUnconfirmed`]: a request failed after it may have run, and the
    ///   retry found the lock no longer ours: released by that request, or lost before it
    ///   (a restart without persistence): cannot tell. Nothing is left held.
    /// - Backend errors: the release is retried in the background until the lease ends. On a
    ///   cluster or Sentinel, a failover in progress is ridden out first, as acquisitions do:
    ///   the release is tried again with the same owner id until the deployment answers, for
    ///   at most the [failover grace](crate::LockClientBuilder::failover_grace) (and never
    ///   past the lease).
    /// - [`LockError::UnacknowledgedRelease`] (with
    ///   [`replica_ack`](crate::LockClientBuilder::replica_ack)): released on the master, but
    ///   not acknowledged by enough replicas in time; not a failure, safe to ignore
    ///   ([`LockError::is_released`]).
    ///
    /// A re-entrant guard releases nothing (its outermost guard does) and returns `Ok(())`
    /// unless the lock is lost.
    pub async fn release(mut self) -> Result<(), LockError> {
        if self.reentrant {
            return match self.held.signal.get() {
                Some(reason) => Err(self.lost_error(reason)),
                None => Ok(()),
            };
        }
        let held = self.held.clone();
        let inner = &held.client.inner;
        if held.pass_in_memory() {
            // Another task of this client holds it now; this hold is over (declared so).
            self.released = true;
            return Ok(());
        }
        inner.watchdog.deregister(held.acquisition);
        let lost_before = held.signal.get();
        // Before anything is sent: from here on, code in this guard's scope no longer re-enters
        // (Redis may let the lock go at any moment now).
        held.signal.declare(&held.names.name, LossReason::Released);
        // A Redis round trip: OpenTelemetry's client-span and database attributes.
        let span = tracing::debug_span!(
            "lock.release",
            lock = %held.names.name,
            otel.kind = "client",
            db.system.name = "redis",
            db.operation.name = inner.backend.script_command()
        );
        // `released` stays false until the outcome is known: if this future is dropped at the
        // await below, `Drop` hands the release to the background releaser, like dropping the
        // guard does.
        let result = tracing::Instrument::instrument(release_now(&held), span).await;
        self.released = true;
        if result.as_ref().is_err_and(LockError::is_unavailable) {
            inner.releaser.submit(self.release_job());
        }
        match (lost_before, result) {
            (Some(reason), _) => Err(self.lost_error(reason)),
            (None, Ok(true)) => Ok(()),
            (None, Ok(false)) => Err(LockError::NotOwner {
                name: held.names.name.clone(),
            }),
            (None, Err(e)) => Err(e),
        }
    }

    fn lost_error(&self, reason: LossReason) -> LockError {
        LockError::Lost {
            name: self.held.names.name.clone(),
            reason,
        }
    }

    fn release_job(&self) -> ReleaseJob {
        ReleaseJob::new(
            &self.held.names,
            &self.held.owner,
            Instant::now() + self.held.lease,
        )
        .handing_off(self.held.streak)
    }
}

/// Releases the hold, handing the lock to a task of this client that waits for it when there
/// is one (`handoff.rs`); `Ok(false)` when the lock was not ours.
async fn release_now(held: &Held) -> Result<bool, LockError> {
    let inner = &held.client.inner;
    let backend = &inner.backend;
    // Whether an earlier attempt may have gone through (its outcome is unknown).
    let mut maybe_done = false;
    let mut retry = ReleaseRetry::new(inner.backend.fails_over().then(|| {
        // Past the lease the lock is gone by itself: riding out longer gains nothing.
        inner.config.failover_grace.min(held.lease)
    }));
    let mut next = if held.names.family().hands_off() {
        inner.handoffs.choose(&held.names.key, held.streak)
    } else {
        None
    };
    let retention_ms = inner.config.fence_retention.as_millis() as u64;
    loop {
        let reply = match next.take() {
            Some(next) => {
                let (reply, orphan) = handoff::release_to(
                    &**backend,
                    &inner.handoffs,
                    &held.names,
                    &held.owner,
                    next,
                    retention_ms,
                )
                .await;
                if let Some(orphan) = orphan {
                    inner
                        .releaser
                        .submit(ReleaseJob::orphan(&held.names, orphan));
                }
                reply
            }
            None => {
                handoff::release_plainly(
                    &**backend,
                    &inner.handoffs,
                    &held.names,
                    &held.owner,
                    held.streak,
                    retention_ms,
                )
                .await
            }
        };
        return match reply.map(|Acked { reply, shortfall }| (reply, shortfall)) {
            Ok((Reply::Done(_) | Reply::HandedOff(_), Some(shortfall))) => Err(
                LockError::unacknowledged_release(&held.names.name, shortfall),
            ),
            Ok((Reply::Done(_) | Reply::HandedOff(_), None)) => Ok(true),
            Ok((Reply::NotDone(_) | Reply::Exceeds(_), _)) if maybe_done => {
                // "Not ours" after an unknown outcome: an earlier attempt went through, or the
                // lock had been lost before the release (a restart without persistence, a
                // force-unlock) and the watchdog had not seen it yet. The two cannot be told
                // apart, and the second must never read as "it was ours".
                Err(LockError::ReleaseUnconfirmed {
                    name: held.names.name.clone(),
                })
            }
            Ok((Reply::NotDone(_) | Reply::Exceeds(_), _)) => Ok(false),
            Ok((Reply::Foreign(found), _)) => Err(LockError::ForeignData {
                key: held.names.key.clone(),
                found,
            }),
            Err(e) => {
                maybe_done |= outcome_unknown(&e) && !e.is_connection_refusal();
                match retry.after(&e) {
                    Some(pause) => {
                        tracing::debug!(error = %e, "release failed; retrying with the same owner id");
                        if !pause.is_zero() {
                            tokio::time::sleep(pause).await;
                        }
                        continue;
                    }
                    None => Err(LockError::backend("release", e)),
                }
            }
        };
    }
}

/// Runs `body` to its end unless `lost` resolves first ([`LockGuard::run`],
/// [`MultiLockGuard::run`](crate::MultiLockGuard::run); the caller has just looked at the
/// loss). The body takes its first step before the loss is watched: a body that completes at
/// once (a short handler on a hot lock) costs no watch, whose waiter and timer registrations
/// are most of what a short run costs; from its first wait on, the loss is watched first at
/// every poll.
pub(crate) async fn unless_lost<T>(
    body: impl Future<Output = T>,
    lost: impl Future<Output = LockError>,
) -> Result<T, LockError> {
    let mut body = std::pin::pin!(body);
    if let Poll::Ready(out) = std::future::poll_fn(|cx| Poll::Ready(body.as_mut().poll(cx))).await {
        return Ok(out);
    }
    tokio::select! {
        biased;
        lost = lost => Err(lost),
        out = body => Ok(out),
    }
}

/// Resolves with the first of `losses` (never, when there are none): what a
/// [`MultiLockGuard`](crate::MultiLockGuard) or a [`RedLockGuard`](crate::RedLockGuard) waits on.
pub(crate) fn first_loss<'a>(
    losses: impl IntoIterator<Item = LossFuture<'a>>,
) -> impl Future<Output = LockError> + Send + 'a {
    let mut losses: Vec<LossFuture<'a>> = losses.into_iter().collect();
    std::future::poll_fn(move |cx| {
        for loss in &mut losses {
            if let std::task::Poll::Ready(e) = loss.as_mut().poll(cx) {
                return std::task::Poll::Ready(e);
            }
        }
        std::task::Poll::Pending
    })
}

/// One guard's loss signal, boxed so that several can be raced by [`first_loss`].
pub(crate) type LossFuture<'a> = std::pin::Pin<Box<dyn Future<Output = LockError> + Send + 'a>>;

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.reentrant || self.released {
            return;
        }
        // Also reached when a `release()` future is dropped before its outcome was known (the
        // lock was not passed in memory then: that decision is made before any await).
        let inner = &self.held.client.inner;
        if self.held.pass_in_memory() {
            return;
        }
        inner.watchdog.deregister(self.held.acquisition);
        self.held
            .signal
            .declare(&self.held.names.name, LossReason::Released);
        inner.releaser.submit(self.release_job());
        tracing::debug!(lock = %self.held.names.name, "guard dropped; release handed to the background releaser");
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.held.names.name)
            .field("owner", &self.held.owner)
            .field("fencing_token", &self.held.issued_token())
            .field("reentrant", &self.reentrant)
            .field("lost", &self.held.signal.get())
            .finish()
    }
}

/// A handle to a held lock's fencing token, made by [`LockGuard::token_handle`]: cheap to
/// clone, `'static`, and it does not keep the lock.
///
/// While the guard holds, it answers exactly as the guard would
/// ([`LockGuard::fencing_token`], [`LockGuard::issued_token`]), sharing the guard's cached
/// token. Once the guard is released or dropped, the hold is over:
/// [`fencing_token`](TokenHandle::fencing_token) answers [`LockError::Lost`] with
/// [`LossReason::Released`] and [`issued_token`](TokenHandle::issued_token) `None`: no token
/// is handed out for a hold that has ended.
#[derive(Clone)]
pub struct TokenHandle {
    held: Weak<Held>,
    name: Arc<str>,
}

impl TokenHandle {
    /// The hold the running code is inside: the innermost lock of the task's reentrancy scope
    /// (a guard's [`scope`](LockGuard::scope) or [`run`](LockGuard::run), a
    /// `#[distributed_lock]` body, a handler under a `LockLayer`), or `None` outside any.
    ///
    /// How a `#[distributed_lock]` body reaches its token without naming the lock again (a
    /// name typed twice can drift, and a typo takes another lock and waits for it):
    ///
    /// ```no_run
    /// # async fn write(_sku: &str, _token: u64) {}
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let guard = locks.lock("stock:42").acquire().await?;
    /// guard
    ///     .run(async {
    ///         // In a `#[distributed_lock("stock:<sku>")]` body, the same.
    ///         let hold = lock_runtime::TokenHandle::current().expect("inside the lock");
    ///         write("42", hold.fencing_token().await?).await;
    ///         Ok::<_, lock_runtime::LockError>(())
    ///     })
    ///     .await??;
    /// # Ok(()) }
    /// ```
    pub fn current() -> Option<TokenHandle> {
        crate::scope::holds().first().map(TokenHandle::of)
    }

    /// Every hold the running code is inside, innermost first: for a body under several locks
    /// (a `#[distributed_lock]` over a collection, a `MultiLockGuard`'s scope, nested scopes).
    /// Empty outside any.
    pub fn scoped() -> Vec<TokenHandle> {
        crate::scope::holds().iter().map(TokenHandle::of).collect()
    }

    fn of(held: &Arc<Held>) -> TokenHandle {
        TokenHandle {
            held: Arc::downgrade(held),
            name: held.names.name.as_str().into(),
        }
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The hold's fencing token: the one issued with the grant or asked for before, else one
    /// issued now (one round trip, only while this owner holds the lock), then cached on the
    /// guard. See [`LockGuard::fencing_token`].
    ///
    /// # Errors
    /// [`LockError::Lost`] once the hold is lost or over (its guard released or dropped: reason
    /// [`LossReason::Released`]); a backend error if Redis could not be asked.
    pub async fn fencing_token(&self) -> Result<u64, LockError> {
        match self.held.upgrade() {
            Some(held) => held.fencing_token().await,
            None => Err(LockError::Lost {
                name: self.name.to_string(),
                reason: LossReason::Released,
            }),
        }
    }

    /// The fencing token if one has been issued to this hold already (as
    /// [`LockGuard::issued_token`]); `None` otherwise, and once the guard is released or
    /// dropped. No round trip.
    pub fn issued_token(&self) -> Option<u64> {
        let held = self.held.upgrade()?;
        match held.signal.get() {
            Some(LossReason::Released) => None,
            _ => held.issued_token(),
        }
    }
}

impl fmt::Debug for TokenHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenHandle")
            .field("name", &self.name)
            .field("issued_token", &self.issued_token())
            .finish()
    }
}
