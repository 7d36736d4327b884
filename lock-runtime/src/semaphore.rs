//! `Semaphore`: up to N permit holders per name, across processes, each with a lease.

use std::fmt;
use std::time::Duration;

use crate::backend::{Acked, CapacityOp, Reply};
use crate::error::Shortfall;
use crate::keys::{Family, Mode};
use crate::{Lock, LockClient, LockError, LockGuard, LockOptions};

/// Why a plain `RSemaphore` has no capacity calls.
const NO_TOTAL: &str = "a plain RSemaphore stores only its available permits, not a total capacity";
/// Why a plain `RSemaphore` cannot take permits back or tell whether any is held.
const NO_HOLDERS: &str = "a plain RSemaphore does not record who holds its permits";

/// A distributed counting semaphore: at most `capacity` permits held at once, by every
/// process together. Made by [`LockClient::semaphore`]; cheap to clone.
///
/// - **Permit leases**: every holder's permits carry their own lease inside the semaphore,
///   renewed by the watchdog (or an explicit [`lease`](LockOptions::lease)). A process that
///   dies holding permits gives them back when that lease ends (the watchdog timeout, 30 s by
///   default), so a crash never shrinks the capacity for good.
/// - **Wake-ups by pub/sub**: a release wakes as many waiters as permits came free, in every
///   process that waits: no polling, no thundering herd.
/// - **Passed in memory**: a permit released while another task of the same client waits for
///   as many passes to it without a round trip (the hold in Redis stays; the waiter takes it
///   over with its lease and its watchdog entry), as a mutex's hold does: at most
///   [`handoff_limit`](crate::LockClientBuilder::handoff_limit) times in a row and for 2 ms,
///   after which the permit falls free for every process that waits. Such a hold's fencing
///   token is issued on demand ([`LockGuard::fencing_token`], one round trip, only while the
///   permits are still held); a [`fenced`](Semaphore::fenced) handle (or a client [fenced by
///   default](crate::LockClientBuilder::fenced_by_default)) takes every permit with its token
///   from Redis instead. This crate's layout only (a Redisson semaphore's every release
///   publishes, for Java's waiters).
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
/// **With [`Layout::Redisson`](crate::Layout::Redisson)** it is the same semaphore as
/// Redisson's `RPermitExpirableSemaphore` of that name (`N`: the available count;
/// `{N}:timeout`: each permit's 16-byte id and lease end; channel `redisson_sc:{N}`), shared
/// with Java services: a Java holder's permits count against Rust's and the other way round,
/// each side's release wakes the other's waiters, and a crashed holder's permits come back
/// when their lease ends (reclaimed by whichever side looks next). What differs:
/// - Redisson stores no capacity apart from the available count: a handle's `capacity`
///   initialises it when absent (Java's `trySetPermits`); [`capacity`](Semaphore::capacity) is
///   Java's `getPermits()` (available plus leased), [`set_capacity`](Semaphore::set_capacity)
///   its `setPermits`, [`reset_capacity`](Semaphore::reset_capacity) `setPermits(handle's
///   capacity)`, and [`force_release_all`](Semaphore::force_release_all) returns every
///   leased permit (each holder's `lost()` fires at its next renewal);
/// - lease ends are epoch milliseconds: Rust uses the Redis server's clock, Java its own, so
///   Java clients' clocks must agree with Redis's (as they must among Java clients);
/// - [`LockGuard::owner`] is `permits:<id>[,<id>…]#<n>`, the permit ids Java's
///   `release(id)` takes (a Java release of one of them makes the guard's `lost()` fire);
/// - for Java's plain `RSemaphore`, see [`without_leases`](Semaphore::without_leases).
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
    /// `false` after [`without_leases`](Semaphore::without_leases).
    leases: bool,
}

impl LockClient {
    /// A counting semaphore by name with `capacity` permits (unless a capacity is stored in
    /// Redis); see [`Semaphore`].
    pub fn semaphore(&self, name: impl AsRef<str>, capacity: u32) -> Semaphore {
        Semaphore::new(self, name.as_ref(), capacity)
    }
}

impl Semaphore {
    pub(crate) fn new(client: &LockClient, name: &str, capacity: u32) -> Semaphore {
        let lock = Lock::of(
            client.clone(),
            name,
            Family::Semaphore {
                capacity,
                leases: true,
            },
            Mode::Permits(1),
        );
        Semaphore {
            lock,
            capacity,
            leases: true,
        }
    }

    /// The same semaphore as a plain Redisson `RSemaphore`: permits without leases, for Java
    /// services that use `redisson.getSemaphore(name)` rather than
    /// `getPermitExpirableSemaphore(name)` (the two lay out the same name differently, so both
    /// sides must use the same kind). [`Layout::Redisson`](crate::Layout::Redisson) only.
    ///
    /// Redis records how many permits are available, never who holds them, so a plain
    /// `RSemaphore` cannot give what the lease-carrying kind gives:
    ///
    /// - **a holder that dies keeps its permits for ever** (as in Java): nothing expires, and
    ///   nothing can take them back;
    /// - [`lost`](LockGuard::lost) never fires (there is no hold to find gone), except when a
    ///   [`max_hold`](LockOptions::max_hold) passes; an explicit
    ///   [`lease`](LockOptions::lease) is refused;
    /// - [`capacity`](Semaphore::capacity), [`set_capacity`](Semaphore::set_capacity),
    ///   [`reset_capacity`](Semaphore::reset_capacity),
    ///   [`force_release_all`](Semaphore::force_release_all) and
    ///   [`is_held`](Semaphore::is_held) are refused (Redis has no total and no holders);
    ///   [`available`](Semaphore::available) is Java's `availablePermits()`;
    /// - a Rust hold keeps a marker of its own next to `N` (`{N}:<owner>`, with the watchdog's
    ///   lease; Java never reads it), so the Rust side's retries stay exact: an acquire retried
    ///   after a lost reply takes nothing more, and a release gives the permits back once,
    ///   however often it is sent; a holder whose renewal lapses (its process frozen longer
    ///   than the watchdog timeout) keeps its permits taken, as one that died does;
    ///
    /// It still gives exclusion and capacity shared with Java, wake-ups both ways (a release
    /// publishes the new count, which a blocked Java `acquire()` waits for), fencing tokens
    /// (`redisson_lock_token:{N}`), cancellation safety and [`permits`](LockGuard::permits).
    /// Every call on it in the native layout fails with [`LockError::Unsupported`].
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// // The same semaphore as `redisson.getSemaphore("exports")` in a Java service.
    /// let exports = locks.semaphore("exports", 4).without_leases();
    /// let permit = exports.acquire().await?;
    /// # drop(permit); Ok(()) }
    /// ```
    #[must_use]
    pub fn without_leases(self) -> Semaphore {
        let group = self.lock.metrics_group().map(std::sync::Arc::<str>::from);
        let mut lock = Lock::of(
            self.lock.client().clone(),
            self.name(),
            Family::Semaphore {
                capacity: self.capacity,
                leases: false,
            },
            Mode::Permits(1),
        );
        if let Some(group) = group {
            lock = lock.group(group);
        }
        if self.lock.is_fenced() {
            lock = lock.fenced();
        }
        Semaphore {
            lock,
            capacity: self.capacity,
            leases: false,
        }
    }

    /// The same semaphore, every permit taken with its fencing token in the grant's own round
    /// trip ([`LockGuard::issued_token`] is then always `Some`), as
    /// [`Lock::fenced`](crate::Lock::fenced) does for a mutex.
    ///
    /// By default a permit is granted with its token by Redis, except one passed in memory by
    /// another task of the same client (see [`Semaphore`]), whose token is issued on demand
    /// ([`LockGuard::fencing_token`], one round trip, only while the permit is held). A
    /// fenced acquisition is never passed a permit in memory: it takes its permits in Redis.
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let exports = locks.semaphore("exports", 4).fenced();
    /// let permit = exports.acquire().await?;
    /// let token = permit.issued_token().expect("a fenced permit carries its token");
    /// # drop((permit, token)); Ok(()) }
    /// ```
    #[must_use]
    pub fn fenced(mut self) -> Semaphore {
        self.lock = self.lock.fenced();
        self
    }

    /// Whether this handle has leases on its permits (the default); `false` after
    /// [`without_leases`](Semaphore::without_leases).
    pub fn has_leases(&self) -> bool {
        self.leases
    }

    /// Refuses what a plain `RSemaphore` cannot do (`what`), and a plain semaphore in the
    /// native layout altogether.
    fn supported(&self, plain_refusal: Option<&'static str>) -> Result<(), LockError> {
        if self.has_leases() {
            return Ok(());
        }
        let reason = if !self
            .lock
            .client()
            .inner
            .config
            .layout
            .has_plain_semaphores()
        {
            Some(
                "a semaphore without leases exists only in the Redisson layout (Java's RSemaphore)",
            )
        } else {
            plain_refusal
        };
        match reason {
            Some(reason) => Err(LockError::Unsupported {
                name: self.name().to_owned(),
                reason,
            }),
            None => Ok(()),
        }
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
    /// (nothing is taken, nothing waits). With [`Layout::Redisson`](crate::Layout::Redisson)
    /// (an `RPermitExpirableSemaphore`, whose hold carries one permit id per permit) a hold
    /// is at most 1024 permits (above that, `InvalidPermits` gives 1024 as the capacity), and
    /// a request above the handle's capacity asks Redis for the capacity in force first, so
    /// no oversized request is ever sent. Waiting for several permits wakes on every release
    /// and takes them once enough are free together.
    pub async fn acquire_many(
        &self,
        permits: u32,
        opts: LockOptions,
    ) -> Result<LockGuard, LockError> {
        self.supported(opts.lease.map(
            |_| "a plain RSemaphore's permits have no lease: use the watchdog (or max_hold)",
        ))?;
        if permits == 0 {
            return Err(LockError::InvalidPermits {
                name: self.name().to_owned(),
                requested: 0,
                capacity: self.capacity,
            });
        }
        if let Some(max) = self.lock.names()?.scheme.max_permits_per_hold() {
            // The owner id carries one 16-byte permit id per permit: refuse before building
            // and sending one above the cap per hold, or for more than the capacity in force.
            let capacity = if permits > max {
                max
            } else if permits > self.capacity {
                self.capacity_call(CapacityOp::Capacity).await?
            } else {
                permits
            };
            if permits > capacity {
                return Err(LockError::InvalidPermits {
                    name: self.name().to_owned(),
                    requested: permits,
                    capacity,
                });
            }
        }
        self.lock
            .with_mode(Mode::Permits(permits))
            .acquire_with(opts)
            .await
    }

    /// How many permits are free right now (a snapshot: others may take them at once).
    pub async fn available(&self) -> Result<u32, LockError> {
        self.supported(None)?;
        self.capacity_call(CapacityOp::Free).await
    }

    /// The capacity in force: the one stored in Redis, or else the one this handle was made
    /// with.
    pub async fn capacity(&self) -> Result<u32, LockError> {
        self.supported(Some(NO_TOTAL))?;
        self.capacity_call(CapacityOp::Capacity).await
    }

    /// Stores `capacity` in Redis for every client of this semaphore (it outlives the
    /// holders, until [`reset_capacity`](Semaphore::reset_capacity)), and wakes the waiters.
    pub async fn set_capacity(&self, capacity: u32) -> Result<(), LockError> {
        self.supported(Some(NO_TOTAL))?;
        self.capacity_call(CapacityOp::Set(capacity))
            .await
            .map(drop)
    }

    /// Removes the stored capacity: each handle's own applies again. Wakes the waiters.
    pub async fn reset_capacity(&self) -> Result<(), LockError> {
        self.supported(Some(NO_TOTAL))?;
        self.capacity_call(CapacityOp::Clear).await.map(drop)
    }

    /// Who holds permits right now: each holder's owner id (with its permits), the lease it has
    /// left and its fencing token, and how many wait; `None` when no permit is held. As
    /// [`Lock::info`].
    ///
    /// [`LockError::Unsupported`] for a semaphore [without leases](Semaphore::without_leases):
    /// its permits have no holders to list.
    pub async fn info(&self) -> Result<Option<crate::LockInfo>, LockError> {
        self.supported(Some("a semaphore without leases has no holders to list"))?;
        self.lock.info().await
    }

    /// Whether any permit is held.
    pub async fn is_held(&self) -> Result<bool, LockError> {
        self.supported(Some(NO_HOLDERS))?;
        self.lock.is_locked().await
    }

    /// Takes every permit back, whoever holds them, and wakes the waiters. Each holder's guard
    /// reports the loss at its next renewal. Returns whether any permit was held.
    pub async fn force_release_all(&self) -> Result<bool, LockError> {
        self.supported(Some(NO_HOLDERS))?;
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
