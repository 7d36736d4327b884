//! `Semaphore`: up to N permit holders per name, across processes, each with a lease.

use std::fmt;
use std::time::Duration;

use crate::backend::{Acked, CapacityOp, Reply, Shortfall};
use crate::family::{Family, Mode};
use crate::{Lock, LockClient, LockError, LockGuard, LockOptions};

/// A distributed counting semaphore: at most `capacity` permits held at once, by every
/// process together. Made by [`LockClient::semaphore`]; cheap to clone.
///
/// - **Permit leases**: every holder's permits carry their own lease inside the semaphore,
///   renewed by the watchdog (or an explicit [`lease`](LockOptions::lease)). A process that
///   dies holding permits gives them back when that lease ends (the watchdog timeout, 30 s by
///   default), so a crash never shrinks the capacity for good.
/// - **Wake-ups by pub/sub**: a release wakes as many waiters as permits came free, in every
///   process that waits: no polling, no thundering herd.
/// - **Capacity at run time**: the capacity given here applies while none is stored in Redis;
///   [`set_capacity`](Semaphore::set_capacity) stores one that every client then uses (and
///   wakes the waiters, since more permits may be free); [`reset_capacity`](Semaphore::reset_capacity)
///   removes it. Holders above a lowered capacity keep their permits; new ones wait until the
///   count is below it.
///
/// A permit is held through a [`LockGuard`] with everything a lock has: `lost()`, a fencing
/// token, release by drop or [`release`](LockGuard::release), cancellation safety, and
/// reentrancy by scope (inside a permit's [`scope`](LockGuard::scope), the same semaphore
/// re-enters without taking another permit).
///
/// ```no_run
/// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
/// use std::time::Duration;
///
/// // At most 10 calls to this supplier's API at a time, across every instance.
/// let supplier = locks.semaphore("supplier:acme", 10);
/// let permit = supplier.try_acquire(Duration::from_secs(2)).await?;
/// // … call the supplier …
/// permit.release().await?;
///
/// // A bulk job takes 4 permits at once, all or nothing.
/// let bulk = supplier.acquire_many(4, Default::default()).await?;
/// assert_eq!(bulk.permits(), 4);
/// println!("{} permits left", supplier.available().await?);
/// # drop(bulk); Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    lock: Lock,
    capacity: u32,
}

impl Semaphore {
    pub(crate) fn new(client: &LockClient, name: &str, capacity: u32) -> Semaphore {
        let lock = Lock::of(
            client.clone(),
            name,
            Family::Semaphore { capacity },
            Mode::Permits(1),
        );
        Semaphore { lock, capacity }
    }

    /// The same semaphore, recorded under `group` in its [metrics](crate::metrics); see
    /// [`Lock::group`].
    #[must_use]
    pub fn group(mut self, group: impl Into<std::sync::Arc<str>>) -> Semaphore {
        self.lock = self.lock.group(group);
        self
    }

    /// The semaphore name (as given, without prefix).
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// Takes one permit, waiting as long as it takes; the watchdog renews it.
    pub async fn acquire(&self) -> Result<LockGuard, LockError> {
        self.acquire_many(1, LockOptions::new()).await
    }

    /// Takes one permit, waiting at most `wait` ([`LockError::WaitTimeout`] after that);
    /// `Duration::ZERO` makes exactly one attempt.
    pub async fn try_acquire(&self, wait: Duration) -> Result<LockGuard, LockError> {
        self.acquire_many(1, LockOptions::new().wait(wait)).await
    }

    /// Takes one permit with explicit options.
    pub async fn acquire_with(&self, opts: LockOptions) -> Result<LockGuard, LockError> {
        self.acquire_many(1, opts).await
    }

    /// Takes `permits` permits at once (all or none) with explicit options.
    ///
    /// [`LockError::InvalidPermits`] when `permits` is 0 or above the capacity in force
    /// (nothing is taken, nothing waits). Waiting for several permits wakes on every release
    /// and takes them once enough are free together.
    pub async fn acquire_many(
        &self,
        permits: u32,
        opts: LockOptions,
    ) -> Result<LockGuard, LockError> {
        if permits == 0 {
            return Err(LockError::InvalidPermits {
                name: self.name().to_owned(),
                requested: 0,
                capacity: self.capacity,
            });
        }
        self.lock
            .with_mode(Mode::Permits(permits))
            .acquire_with(opts)
            .await
    }

    /// How many permits are free right now (a snapshot: others may take them at once).
    pub async fn available(&self) -> Result<u32, LockError> {
        self.capacity_call(CapacityOp::Free).await
    }

    /// The capacity in force: the one stored in Redis, or else the one this handle was made
    /// with.
    pub async fn capacity(&self) -> Result<u32, LockError> {
        self.capacity_call(CapacityOp::Capacity).await
    }

    /// Stores `capacity` in Redis for every client of this semaphore (it outlives the
    /// holders, until [`reset_capacity`](Semaphore::reset_capacity)), and wakes the waiters.
    pub async fn set_capacity(&self, capacity: u32) -> Result<(), LockError> {
        self.capacity_call(CapacityOp::Set(capacity))
            .await
            .map(drop)
    }

    /// Removes the stored capacity: each handle's own applies again. Wakes the waiters.
    pub async fn reset_capacity(&self) -> Result<(), LockError> {
        self.capacity_call(CapacityOp::Clear).await.map(drop)
    }

    /// Whether any permit is held.
    pub async fn is_held(&self) -> Result<bool, LockError> {
        self.lock.is_locked().await
    }

    /// Takes every permit back, whoever holds them, and wakes the waiters. Each holder's guard
    /// reports the loss at its next renewal. Returns whether any permit was held.
    pub async fn force_release_all(&self) -> Result<bool, LockError> {
        self.lock.force_unlock().await
    }

    async fn capacity_call(&self, op: CapacityOp) -> Result<u32, LockError> {
        let names = self.lock.names()?;
        let Acked { reply, shortfall } = self
            .lock
            .client()
            .inner
            .backend
            .semaphore_capacity(names, self.capacity, op)
            .await
            .map_err(|e| LockError::backend("semaphore capacity", e))?;
        if let Some(Shortfall {
            required,
            acknowledged,
            timeout,
        }) = shortfall
        {
            return Err(LockError::ReplicaAck {
                op: "set capacity",
                name: names.name.clone(),
                required,
                acknowledged,
                timeout,
            });
        }
        match reply {
            Reply::Done(n) => Ok(u32::try_from(n).unwrap_or(u32::MAX)),
            Reply::Foreign(found) => Err(LockError::ForeignData {
                key: names.key.clone(),
                found,
            }),
            other => Err(LockError::backend(
                "semaphore capacity",
                redis::RedisError::from((
                    redis::ErrorKind::Parse,
                    "unexpected reply",
                    format!("{other:?}"),
                )),
            )),
        }
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name())
            .field("capacity", &self.capacity)
            .finish()
    }
}
