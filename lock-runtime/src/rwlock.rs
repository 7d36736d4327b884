//! `RwLock`: many readers or one writer, across processes.

use std::fmt;

use crate::keys::{Family, Mode};
use crate::{Lock, LockClient};

/// A distributed read/write lock: any number of readers, or one writer. Made by
/// [`LockClient::rw_lock`]; cheap to clone.
///
/// Each side is a [`Lock`] with everything a mutex has: waiting by pub/sub, the watchdog or an
/// explicit lease, [`LockGuard::lost`](crate::LockGuard::lost), a fencing token (the counter
/// is shared by both sides, so a writer's token is above every earlier reader's and writer's),
/// cancellation safety, and reentrancy by scope:
///
/// - inside a writer's [`scope`](crate::LockGuard::scope), taking either side re-enters;
/// - inside a reader's scope, the read side re-enters, and the write side is refused with
///   [`LockError::WouldDeadlock`](crate::LockError::WouldDeadlock) (an upgrade would wait for
///   itself).
///
/// **Writers go first.** While a writer waits, new readers wait too, so a stream of readers
/// cannot starve it; readers already in finish, then the writer goes. (So readers can wait
/// behind a stream of writers: the lock suits read-mostly data, not write-mostly.) A waiting
/// writer's claim lasts five seconds unless it refreshes it, which it does while it waits: a
/// writer that dies while waiting holds readers back for at most that long; one that gives up
/// or is cancelled lets them go at once.
///
/// **Crashed holders.** Every reader and the writer has its own lease inside the lock: a
/// reader that dies blocks a writer until its own lease ends (the watchdog timeout, 30 s by
/// default), never longer.
///
/// **With [`Layout::Redisson`](crate::Layout::Redisson)** it is Redisson's `RReadWriteLock`,
/// shared with Java services (`redisson.getReadWriteLock(name)`): Java and Rust readers read
/// together, and a writer of either excludes everyone. It then behaves as Redisson's does:
///
/// - **readers go first**: a reader gets in whenever the lock is held for reading, even while
///   writers wait, so a steady stream of readers (of either language) can starve a writer;
/// - a write unlock wakes every waiter of every process, a read unlock that frees the lock one
///   waiter per process (a Rust reader it lets in wakes this process's other waiting readers);
///   a Java writer that keeps read holds of its own (its downgrade) lets readers in without
///   waking them: they come in when they next retry, as Java's own readers do;
/// - a reader that crashed holds writers back until its own lease ends (each read hold has
///   its own timeout key in Redis); so does a Java reader with an explicit lease;
/// - a Java reader's renewal can shorten the hash all readers share to the Java watchdog
///   timeout, so Rust read holds are renewed every third of the
///   [`redisson_watchdog_timeout`](crate::LockClientBuilder::redisson_watchdog_timeout) (10 s
///   by default; set it to the Java fleet's `lockWatchdogTimeout` when that is lower) and
///   are reported lost before the hash could run out if a renewal is not confirmed: a writer
///   on either side never gets in under a Rust reader that has not been told;
/// - [`force_unlock`](crate::Lock::force_unlock) (on either side) deletes the lock whatever its
///   mode; Java's `readLock().forceUnlock()` and `writeLock().forceUnlock()` each delete it in
///   their own mode only; either way the guards of the Rust holders report the loss.
///
/// Fencing tokens come from the mutex's token key (`redisson_lock_token:{name}`): Rust holders'
/// tokens keep increasing; Java's read/write lock has none.
///
/// ```no_run
/// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
/// let stock = locks.rw_lock("stock:42");
///
/// // Many readers at once, in every process.
/// let reading = stock.read().acquire().await?;
/// // … read the stock level …
/// reading.release().await?;
///
/// // A restock holds it alone; readers wait meanwhile.
/// let writing = stock.write().acquire().await?;
/// let token = writing.fencing_token().await?; // issued with the grant: no round trip
/// # let _ = token;
/// writing.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    read: Lock,
    write: Lock,
}

impl LockClient {
    /// A read/write lock by name: many readers or one writer; see [`RwLock`].
    pub fn rw_lock(&self, name: impl AsRef<str>) -> RwLock {
        RwLock::new(self, name.as_ref())
    }
}

impl RwLock {
    pub(crate) fn new(client: &LockClient, name: &str) -> RwLock {
        let read = Lock::of(client.clone(), name, Family::ReadWrite, Mode::Read);
        let write = read.with_mode(Mode::Write);
        RwLock { read, write }
    }

    /// The lock name (as given, without prefix).
    pub fn name(&self) -> &str {
        self.read.name()
    }

    /// The read side: shared with other readers, excluded by a writer.
    pub fn read(&self) -> &Lock {
        &self.read
    }

    /// The write side: excludes readers and other writers.
    pub fn write(&self) -> &Lock {
        &self.write
    }
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.name())
            .finish()
    }
}
