//! Locks without Redis, for the tests of code that takes locks (feature `memory`).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

pub use crate::backend::memory::Fault;
use crate::backend::memory::{BUSY_OWNER, MemoryBackend};
use crate::{LockClient, LockClientBuilder};

/// Locks that live in this process instead of Redis, for tests (feature `memory`).
///
/// Every [`LockClient`] made from one `MemoryLocks` (and its clones) shares its locks, as
/// clients in several processes share one Redis server: [`client`](MemoryLocks::client) is
/// "another process". The clients are the real thing (the same acquire loop, reentrancy by
/// scope, unlock messages that wake one waiter, watchdog renewal, explicit leases and
/// [`lost`](crate::LockGuard::lost) before they end, background release of dropped guards,
/// fencing tokens, [`force_unlock`](crate::Lock::force_unlock), [`is_locked`](crate::Lock::is_locked),
/// [`info`](crate::Lock::info)); only the place where locks live differs. Leases run on tokio's
/// clock, so under paused time (`#[tokio::test(start_paused = true)]`) a test of a 30 s lease
/// takes no time at all. Paused time is tokio's `test-util` feature, which your crate must
/// enable itself (lock-runtime does not turn it on for you):
///
/// ```toml
/// [dev-dependencies]
/// lock-runtime = { version = "0.1", features = ["memory"] }
/// tokio = { version = "1", features = ["macros", "rt", "test-util"] }
/// ```
///
/// The whole family: mutexes ([`LockClient::lock`], [`MultiLock`](crate::MultiLock),
/// `#[distributed_lock]`), fair locks (first come, first served, a waiter's place lasting 5 s
/// unless refreshed), read/write locks (writers first) and semaphores (per-holder permit
/// leases, a capacity stored for every client), with the Lua scripts' rules; a name used as
/// two kinds is [`LockError::ForeignData`](crate::LockError::ForeignData), as on Redis.
/// Fencing tokens count from 1 per name and are kept as long as the `MemoryLocks` lives.
/// Nothing of a deployment is simulated: no failover, replica acknowledgement or
/// [`RedLock`](crate::RedLock) quorum (a `RedLock` over several `MemoryLocks`' clients works).
///
/// Hooks let a test drive the error paths of the code under test:
/// [`fail_next_acquire`](MemoryLocks::fail_next_acquire) makes an acquire find the lock busy
/// ([`Fault::Busy`]) or Redis unreachable ([`Fault::Unavailable`]);
/// [`lose`](MemoryLocks::lose) takes a held lock away, so its guard's `lost()` fires;
/// [`holder`](MemoryLocks::holder) tells who holds a lock and with which fencing token.
///
/// ```
/// use std::time::Duration;
/// use lock_runtime::{Fault, LockError, LossReason, MemoryLocks};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), LockError> {
/// let memory = MemoryLocks::new();
/// let (locks, other_process) = (memory.client(), memory.client());
///
/// let guard = locks.lock("stock:42").acquire().await?;
/// let token = guard.fencing_token().await?;
/// assert_eq!(memory.holder("stock:42").unwrap().fencing_token(), Some(token));
/// let busy = other_process.lock("stock:42").try_acquire(Duration::ZERO).await;
/// assert!(busy.unwrap_err().is_busy());
///
/// // The lock is taken away behind the holder's back: its guard is told at once.
/// memory.lose("stock:42");
/// match guard.lost().await {
///     LockError::Lost { reason, .. } => assert_eq!(reason, LossReason::Deleted),
///     other => panic!("{other:?}"),
/// }
///
/// // The next acquire of "stock:7" meets a Redis server that is down.
/// memory.fail_next_acquire("stock:7", Fault::Unavailable);
/// assert!(locks.lock("stock:7").acquire().await.unwrap_err().is_unavailable());
/// assert!(locks.lock("stock:7").acquire().await.is_ok());
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
pub struct MemoryLocks {
    backend: MemoryBackend,
    id: u64,
}

/// Tells the `MemoryLocks` of one process apart in their deployment ids.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl MemoryLocks {
    /// No locks yet, no clients.
    pub fn new() -> MemoryLocks {
        MemoryLocks {
            backend: MemoryBackend::new(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// A new client on these locks with default settings: a process of its own, with its own
    /// client id, watchdog and unlock-message subscription.
    ///
    /// Call it inside a Tokio runtime: the client's background tasks are spawned on it.
    pub fn client(&self) -> LockClient {
        match self.builder().build_memory(self.backend.clone()) {
            Ok(client) => client,
            // The builder's defaults are valid settings.
            Err(e) => unreachable!("default settings refused: {e}"),
        }
    }

    /// A builder for a client on these locks, for settings other than the defaults (watchdog
    /// timeout, prefix, hand-off limit, …); [`build`](LockClientBuilder::build) does not
    /// connect anywhere. Its [deployment id](LockClient::deployment_id) is
    /// `memory:<n>`, the same for every client of this `MemoryLocks`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    ///
    /// let memory = lock_runtime::MemoryLocks::new();
    /// let locks = memory.builder().watchdog_timeout(Duration::from_secs(3)).build().await?;
    /// assert_eq!(locks.watchdog_timeout(), Duration::from_secs(3));
    /// # Ok(()) }
    /// ```
    pub fn builder(&self) -> LockClientBuilder {
        LockClient::builder("memory://")
            .deployment_id(format!("memory:{}", self.id))
            .in_memory(self.backend.clone())
    }

    /// Queues `fault` for the next acquire attempt of the lock named `name` (under any
    /// prefix): the attempt finds the lock busy or Redis down instead (see [`Fault`]). Queue a
    /// fault several times to meet it several times; faults of one name are used in order,
    /// before those queued for any name.
    ///
    /// An attempt that re-takes a hold it already has (a retry of the same acquisition) does
    /// not use a fault; a busy fault waits for an attempt that finds the lock free.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use lock_runtime::{Fault, MemoryLocks};
    ///
    /// let memory = MemoryLocks::new();
    /// let locks = memory.client();
    /// memory.fail_next_acquire("report", Fault::Busy(Duration::from_secs(10)));
    /// let err = locks.lock("report").try_acquire(Duration::from_secs(1)).await.unwrap_err();
    /// assert!(err.is_busy());
    /// assert_eq!(err.retry_after(), Some(Duration::from_secs(9)));
    /// # }
    /// ```
    pub fn fail_next_acquire(&self, name: &str, fault: Fault) {
        self.backend.fail_next_acquire(Some(name), fault);
    }

    /// Queues `fault` for the next acquire attempt of any lock (after the faults queued for
    /// that lock's name).
    pub fn fail_next_acquire_of_any(&self, fault: Fault) {
        self.backend.fail_next_acquire(None, fault);
    }

    /// Drops every queued fault that was not used yet.
    pub fn clear_faults(&self) {
        self.backend.clear_faults();
    }

    /// Takes the lock named `name` (under any prefix) away from its holder, as an operator's
    /// `DEL` or [`force_unlock`](crate::Lock::force_unlock) would on Redis: the lock is free
    /// at once, its waiters are woken, and the holder's guard reports
    /// [`LossReason::Deleted`](crate::LossReason::Deleted) through
    /// [`lost`](crate::LockGuard::lost) right away (the clients' watchdogs are asked to renew
    /// now, which finds the lock gone; on Redis this happens at the next renewal, within a
    /// third of the watchdog timeout). A guard with an explicit lease is not renewed, so, as on
    /// Redis, it learns nothing until its lease ends; its release then fails with
    /// [`LockError::NotOwner`](crate::LockError::NotOwner). Returns whether the lock was held.
    pub fn lose(&self, name: &str) -> bool {
        self.backend.lose(name)
    }

    /// Who holds the lock named `name` (under any prefix) right now, if anyone: for a read/write
    /// lock or a semaphore, the holder whose lease ends first (see
    /// [`holders`](MemoryLocks::holders)).
    pub fn holder(&self, name: &str) -> Option<MemoryHolder> {
        self.holders(name).into_iter().next()
    }

    /// Every holder of the lock named `name` (under any prefix) right now: one for a mutex or
    /// fair lock; each reader, the writer, or each permit holder of a read/write lock or
    /// semaphore. The first lease to end comes first.
    pub fn holders(&self, name: &str) -> Vec<MemoryHolder> {
        self.backend
            .holders(name)
            .into_iter()
            .map(|(owner, token, until)| MemoryHolder {
                owner,
                fencing_token: token as u64,
                until,
            })
            .collect()
    }

    /// The fencing token last issued for the lock named `name`, held or not; `None` if it was
    /// never taken.
    pub fn last_fencing_token(&self, name: &str) -> Option<u64> {
        self.backend.last_token(name).map(|t| t as u64)
    }

    /// The names of the locks held right now (by any client, under any prefix), sorted.
    pub fn held(&self) -> Vec<String> {
        self.backend.held_names()
    }
}

impl Default for MemoryLocks {
    fn default() -> Self {
        MemoryLocks::new()
    }
}

impl fmt::Debug for MemoryLocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLocks")
            .field("id", &self.id)
            .field("held", &self.held())
            .finish()
    }
}

/// The holder of an in-memory lock: see [`MemoryLocks::holder`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
pub struct MemoryHolder {
    owner: String,
    fencing_token: u64,
    until: Instant,
}

impl MemoryHolder {
    /// The owner id: `<client id>:<acquisition>`, as on Redis.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The id of the client that holds it (see [`LockClient::id`]); `None` for the stand-in
    /// owner of a [`Fault::Busy`].
    pub fn client_id(&self) -> Option<&str> {
        if self.owner.starts_with(BUSY_OWNER) {
            return None;
        }
        self.owner.rsplit_once(':').map(|(client, _)| client)
    }

    /// The fencing token of this hold; `None` while none has been issued to it (a mutex taken
    /// without one, before its guard's [`fencing_token`](crate::LockGuard::fencing_token)), as
    /// [`LockGuard::issued_token`](crate::LockGuard::issued_token) and
    /// [`LockInfo::fencing_token`](crate::LockInfo) say it.
    pub fn fencing_token(&self) -> Option<u64> {
        (self.fencing_token > 0).then_some(self.fencing_token)
    }

    /// What is left of its lease.
    pub fn remaining(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Layout, LockError};

    /// Side finding of the structure review: the memory backend recognised a writer by the
    /// native `#w` suffix only, so a client in Redisson's layout (writers `<id>:write`) could
    /// hold the write side twice. Each Redisson scheme it cannot mirror is refused instead; the
    /// mutex, whose hash is the native one, works.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn the_redisson_layout_is_served_or_refused_per_scheme() {
        let memory = MemoryLocks::new();
        let redisson = |memory: &MemoryLocks| memory.builder().layout(Layout::Redisson).build();
        let (a, b) = (
            redisson(&memory).await.unwrap(),
            redisson(&memory).await.unwrap(),
        );
        let now = Duration::ZERO;

        let writer = a.rw_lock("stock").write().try_acquire(now).await;
        let second = b.rw_lock("stock").write().try_acquire(now).await;
        assert!(
            !(writer.is_ok() && second.is_ok()),
            "two writers held a Redisson read/write lock at once"
        );
        for refused in [
            writer.map(drop),
            a.rw_lock("stock").read().try_acquire(now).await.map(drop),
            a.fair_lock("queue").try_acquire(now).await.map(drop),
            a.semaphore("jobs", 2).acquire().await.map(drop),
            a.semaphore("plain", 2)
                .without_leases()
                .acquire()
                .await
                .map(drop),
        ] {
            assert!(
                matches!(refused, Err(LockError::Unsupported { .. })),
                "{refused:?}"
            );
        }

        // The mutex is served: Redisson's `RLock` hash is this crate's mutex hash.
        let held = a.lock("stock:1").try_acquire(now).await.unwrap();
        let busy = b.lock("stock:1").try_acquire(now).await.unwrap_err();
        assert!(matches!(busy, LockError::WaitTimeout { .. }), "{busy:?}");
        held.release().await.unwrap();
        assert!(b.lock("stock:1").try_acquire(now).await.is_ok());
    }
}
