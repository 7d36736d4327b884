//! `Lock`: one named lock; the acquire loop itself is in `acquire`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::acquire::Acquire;
use crate::backend::Reply;
use crate::hold::Held;
use crate::keys::LockNames;
use crate::keys::{Family, Mode};
use crate::stats::Counters;
use crate::{LockClient, LockError, LockGuard, LockOptions, scope};

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
///
/// The same type is the handle of a [fair lock](LockClient::fair_lock) and of either side of
/// a [read/write lock](crate::RwLock): only the way Redis decides who may hold it differs.
#[derive(Clone)]
pub struct Lock {
    client: LockClient,
    /// Shared with the other handles on the name (see `Inner::names`). An invalid name is
    /// boxed: it is rare, and every handle (and every future holding one) pays for this
    /// field's size.
    names: Result<Arc<LockNames>, Box<(String, &'static str)>>,
    mode: Mode,
    /// Set when, as this handle was made, the client already used the name as the other of
    /// a mutex and a fair lock: acquiring through it would skip (or be skipped by) the fair
    /// lock's queue, so it refuses to ([`LockError::Unsupported`]).
    skips_queue: bool,
    /// The `group` label of its metrics, when set with [`Lock::group`].
    group: Option<Arc<str>>,
    /// Acquisitions issue their fencing token in their own round trip ([`Lock::fenced`]).
    fenced: bool,
}

impl LockClient {
    /// A lock by name. Nothing is sent to Redis until you use it; an invalid name (empty,
    /// longer than [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes, or with control characters) is
    /// reported by the first operation as [`LockError::InvalidName`].
    pub fn lock(&self, name: impl AsRef<str>) -> Lock {
        Lock::new(self.clone(), name.as_ref())
    }

    /// A fair lock by name: granted in the order the waiters first asked for it, across every
    /// process (first come, first served), with everything [`lock`](LockClient::lock) has.
    ///
    /// Waiters queue in Redis. A release wakes only the waiter whose turn it is, wherever it
    /// waits. The queue heals itself: a waiter that gives up or is cancelled leaves it at once;
    /// one that died (killed, its process frozen) is dropped within five seconds, the time its
    /// place lasts unless the waiter refreshes it, which a live waiter does while it waits.
    ///
    /// The lock is the mutex's hash: a plain [`lock`](LockClient::lock) of the same name
    /// excludes it too, but does not queue (it may take the lock ahead of the queue). Use one
    /// kind per name:
    ///
    /// - *Within one client* it is enforced: while the client uses a name as a fair lock (a
    ///   handle, guard or waiting task of it lives), acquiring it through
    ///   [`lock`](LockClient::lock) (or a [`MultiLock`](crate::MultiLock) or
    ///   `#[distributed_lock]` on it) is refused with [`LockError::Unsupported`], and the other
    ///   way round; nothing is sent. Reading it ([`Lock::info`], [`Lock::is_locked`]) and
    ///   [`Lock::force_unlock`] work through either handle.
    /// - *Across processes* nothing can enforce it: Redis holds no record of how a name is
    ///   meant to be used, only whether it is held, so a plain `lock(name)` in another process
    ///   (or in this one once nothing of it uses the name as a fair lock) takes the lock
    ///   whenever it is free, ahead of the fair lock's waiters. It still excludes them: only
    ///   the order suffers. Keep every service's code on one kind per name (a naming
    ///   convention such as a `fair:` prefix helps).
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// // First come, first served when the drop opens.
    /// let guard = locks.fair_lock("drop:sneaker-42").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fair_lock(&self, name: impl AsRef<str>) -> Lock {
        Lock::of(self.clone(), name.as_ref(), Family::Fair, Mode::Exclusive)
    }
}

impl Lock {
    pub(crate) fn new(client: LockClient, name: &str) -> Lock {
        Lock::of(client, name, Family::Mutex, Mode::Exclusive)
    }

    /// A handle on `name` used as `family`, taken in `mode`.
    pub(crate) fn of(client: LockClient, name: &str, family: Family, mode: Mode) -> Lock {
        let (names, skips_queue) = match client.inner.names(name, family) {
            Ok((names, skips_queue)) => (Ok(names), skips_queue),
            Err(e) => (
                Err(Box::new(match e {
                    LockError::InvalidName { name, reason } => (name, reason),
                    _ => (name.chars().take(64).collect(), "invalid lock name"),
                })),
                false,
            ),
        };
        let fenced = client.inner.config.fenced;
        Lock {
            client,
            names,
            mode,
            skips_queue,
            group: None,
            fenced,
        }
    }

    /// The same lock, taken in `mode` (a semaphore's permit count).
    pub(crate) fn with_mode(&self, mode: Mode) -> Lock {
        Lock {
            mode,
            ..self.clone()
        }
    }

    pub(crate) fn client(&self) -> &LockClient {
        &self.client
    }

    /// The order in which multi-lock acquisitions take locks, and what makes two members the
    /// same lock: the Redis key (prefix included), then the deployment's identity for the same
    /// key on two deployments. Both are the same in every process that uses the lock (unlike
    /// the random client id), so two processes never take shared locks in opposite orders.
    pub(crate) fn order_key(&self) -> (&str, &str) {
        let key = match &self.names {
            Ok(n) => n.key.as_str(),
            Err(invalid) => invalid.0.as_str(),
        };
        (key, &self.client.inner.config.deployment_id)
    }

    /// The name's validation result, and whether this handle may acquire.
    pub(crate) fn validated(&self) -> Result<(), LockError> {
        self.acquirable().map(|_| ())
    }

    /// The lock's keys, for an acquisition: [`names`](Lock::names), refused when this client
    /// uses the name both as a mutex and as a fair lock.
    fn acquirable(&self) -> Result<&Arc<LockNames>, LockError> {
        let names = self.names()?;
        if self.skips_queue {
            return Err(LockError::Unsupported {
                name: names.name.clone(),
                reason: match names.family() {
                    Family::Fair => {
                        "this client uses the name as a plain lock (`lock`) too, whose acquisitions skip the fair lock's queue: use one kind per name"
                    }
                    _ => {
                        "this client uses the name as a fair lock (`fair_lock`): a plain lock would take it ahead of the queue; use `fair_lock` for every acquisition of the name"
                    }
                },
            });
        }
        Ok(names)
    }

    /// The lock's keys: the name's error if it is invalid, or
    /// [`LockError::Unsupported`] if the client's backend does not serve its scheme.
    pub(crate) fn names(&self) -> Result<&Arc<LockNames>, LockError> {
        let names = self
            .names
            .as_ref()
            .map_err(|invalid| LockError::InvalidName {
                name: invalid.0.clone(),
                reason: invalid.1,
            })?;
        match self.client.inner.backend.refuses(names.scheme) {
            None => Ok(names),
            Some(reason) => Err(LockError::Unsupported {
                name: names.name.clone(),
                reason,
            }),
        }
    }

    /// The same lock, recorded under `group` in its [metrics](crate::metrics) (the `group`
    /// label) instead of the default group (the name's text before its first `:`).
    ///
    /// A group is a label value: keep the number of distinct groups small (a key template such
    /// as `stock:<id>`, never the full lock name). Without the feature `metrics` it has no
    /// effect.
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let guard = locks.lock("stock:42").group("stock:<id>").acquire().await?;
    /// # drop(guard); Ok(()) }
    /// ```
    #[must_use]
    pub fn group(mut self, group: impl Into<Arc<str>>) -> Lock {
        self.group = Some(group.into());
        self
    }

    /// The same lock, taken with its fencing token in the acquisition's own round trip.
    ///
    /// By default a mutex is taken without one (tokens on demand): the grant is as cheap for
    /// Redis as a plain `SET NX`, and [`LockGuard::fencing_token`] asks for the token the first
    /// time it is wanted, in one more round trip. A caller that fences every write it makes
    /// under the lock (a [`lock-fence`](https://docs.rs/lock-fence) store, a version column)
    /// takes it `fenced` and pays nothing extra: the token is there when the guard is.
    /// [`LockClientBuilder::fenced_by_default`](crate::LockClientBuilder::fenced_by_default)
    /// does this for every lock of a client. The other kinds of lock always issue their token
    /// with the grant, but for a semaphore's permits passed in memory between the tasks of a
    /// client ([`Semaphore::fenced`](crate::Semaphore::fenced)).
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let guard = locks.lock("stock:42").fenced().acquire().await?;
    /// // Issued with the grant: no round trip.
    /// let token = guard.issued_token().expect("a fenced acquisition carries its token");
    /// assert_eq!(guard.fencing_token().await?, token);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn fenced(mut self) -> Lock {
        self.fenced = true;
        self
    }

    /// Whether acquisitions through this handle issue their fencing token with the grant
    /// ([`Lock::fenced`]).
    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    /// The group set with [`Lock::group`], if any.
    pub fn metrics_group(&self) -> Option<&str> {
        self.group.as_deref()
    }

    /// The lock name (as given, without prefix).
    pub fn name(&self) -> &str {
        match &self.names {
            Ok(n) => &n.name,
            Err(invalid) => &invalid.0,
        }
    }

    /// Waits as long as it takes, then holds with the watchdog.
    pub fn acquire(&self) -> impl Future<Output = Result<LockGuard, LockError>> {
        // Not an `async fn` around `acquire_with`: that would wrap its future in one more.
        self.acquire_with(LockOptions::new())
    }

    /// Waits at most `wait` ([`LockError::WaitTimeout`] after that); `Duration::ZERO` makes
    /// exactly one attempt.
    pub fn try_acquire(
        &self,
        wait: Duration,
    ) -> impl Future<Output = Result<LockGuard, LockError>> {
        self.acquire_with(LockOptions::new().wait(wait))
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
    // Written out: an `async fn` keeps a second copy of its arguments (see below).
    #[allow(clippy::manual_async_fn)]
    pub fn acquire_with(
        &self,
        opts: LockOptions,
    ) -> impl Future<Output = Result<LockGuard, LockError>> {
        // Every waiting task stores this future, so it keeps nothing but the acquisition
        // across the await. (An `async fn` would also keep a second copy of `opts`.)
        async move {
            opts.validate()?;
            let names = self.acquirable()?;
            if let Some(held) = scope::find(&self.client.inner.id, &names.key) {
                return self.reenter(names, held);
            }
            Acquire::new(&self.client, names, &opts, self.mode, self.group.as_ref())
                .fenced(self.fenced)
                .run()
                .await
        }
    }

    /// Re-enters `held`, the hold of an enclosing scope on the same key.
    fn reenter(&self, names: &LockNames, held: Arc<Held>) -> Result<LockGuard, LockError> {
        if !held.names.family().same_kind(names.family()) {
            return Err(LockError::WouldDeadlock {
                name: names.name.clone(),
                reason: "this scope holds the name as another kind of lock",
            });
        }
        if !held.names.mode_of(&held.owner).covers(self.mode) {
            return Err(LockError::WouldDeadlock {
                name: names.name.clone(),
                reason: "the write side cannot be taken inside the scope of a read guard of the same lock (it would wait for itself); release the read side first",
            });
        }
        if let Some(reason) = held.signal.get() {
            return Err(LockError::Lost {
                name: names.name.clone(),
                reason,
            });
        }
        tracing::trace!(lock = %names.name, "re-entered");
        Counters::add(&self.client.inner.counters.reentries, 1);
        Ok(LockGuard::reentrant(held))
    }

    /// Whether anyone holds the lock (for a read/write lock or a semaphore: any reader, writer
    /// or permit holder).
    pub async fn is_locked(&self) -> Result<bool, LockError> {
        Ok(self.state(1).await?.held())
    }

    /// The holder's remaining lease; `None` when the lock is free (or a foreign hash at its key
    /// has no TTL).
    pub async fn remaining_ttl(&self) -> Result<Option<Duration>, LockError> {
        let state = self.state(1).await?;
        Ok((state.held() && state.pttl > 0).then(|| Duration::from_millis(state.pttl as u64)))
    }

    /// Deletes the lock whoever holds it and wakes its waiters. The holder's guard reports the
    /// loss at its next renewal (for a read/write lock or a semaphore, every holder's). Returns
    /// whether a lock was deleted.
    pub async fn force_unlock(&self) -> Result<bool, LockError> {
        let names = self.names()?;
        let reply = self
            .client
            .inner
            .backend
            .force_unlock(names, None)
            .await
            .map_err(|e| LockError::backend("force_unlock", e))?;
        tracing::info!(lock = %names.name, deleted = matches!(reply, Reply::Done(_)), "force unlock");
        self.checked(reply).map(|r| matches!(r, Reply::Done(_)))
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

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Lock");
        d.field("name", &self.name());
        if let Ok(names) = &self.names
            && names.family() != Family::Mutex
        {
            d.field("kind", &names.family().describe())
                .field("mode", &self.mode);
        }
        d.finish()
    }
}

#[cfg(test)]
mod tests;
