//! Where a client's locks live on Redis: this crate's own key layout, or Redisson's, so that
//! Rust and Java services lock the same names; and what the layout decides for a whole client.
//! The keys themselves are named in `native.rs` and `redisson.rs`.

use std::time::Duration;

use super::{Family, LockNames, redisson};
use crate::LockError;

/// The keys, channels and fencing counter a client uses for a lock name; chosen per client with
/// [`LockClientBuilder::layout`](crate::LockClientBuilder::layout).
///
/// Every client that shares a lock must use the same layout: two layouts never see each other's
/// holders.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layout {
    /// This crate's layout: every key under the client's
    /// [prefix](crate::LockClientBuilder::prefix), each name's keys in one cluster slot
    /// whatever the name (see the crate docs, "How it works"). The default.
    #[default]
    Native,
    /// Redisson's layout, to share locks with Java services that use Redisson (3.22 or newer,
    /// or 4.x): the mutex is Redisson's `RLock` or `RFencedLock`, and the rest of the family is
    /// laid out as Redisson's `RFairLock`, `RReadWriteLock`, `RPermitExpirableSemaphore` and
    /// `RSemaphore` (below). The mutex:
    ///
    /// | | Redis name | notes |
    /// |---|---|---|
    /// | lock | `N` (the name itself, no prefix) | a hash: owner field `<client uuid>:<n>` |
    /// | unlock channel | `redisson_lock__channel:{N}` | payload `0`; `SPUBLISH` on a cluster, as Redisson on Redis 7 |
    /// | fencing counter | `redisson_lock_token:{N}` | `RFencedLock`'s token: no TTL, shared with Java's `INCR` |
    ///
    /// (`{N}` is `N` itself when `N` already contains a `{`.) A Java holder excludes a Rust
    /// acquirer and the other way round; each side's release wakes the other side's waiters;
    /// a Java `forceUnlock()` makes a Rust guard's [`lost`](crate::LockGuard::lost) fire.
    /// Fencing tokens keep increasing across both sides, provided the Java side takes the lock
    /// as an `RFencedLock` (a plain `RLock` excludes just the same but does not advance the
    /// token).
    /// - **Tokens are `long`s.** A Rust grant takes the larger of the counter plus one and the
    ///   Redis server's clock in microseconds, so after the first Rust grant the counter is
    ///   about 1.8·10¹⁵ and Java's `getToken()` returns values that far: Java code that keeps
    ///   a token in an `int` (or a 32-bit database column) breaks; keep it in a `long`
    ///   (`BIGINT`).
    /// - **Fencing needs the counter to survive.** If `redisson_lock_token:{N}` is lost (a
    ///   restart without persistence, a failover to a replica that had not got it, a `FLUSHALL`),
    ///   Java's next `RFencedLock` grant `INCR`s it from nothing and gets token 1, below every
    ///   token a Rust holder already has: a fence then refuses the legitimate Java holder and
    ///   still admits a stale Rust one with its old, larger token, until a Rust grant brings the
    ///   counter back up to the clock. (A Rust grant starts from the clock, so it goes back only
    ///   with the server's clock: a replica promoted with its clock behind the old master's
    ///   issues tokens below the last ones until its clock passes them. In this layout tokens
    ///   are never ordered by the failover epoch, as the native layout's are behind Sentinel
    ///   and on Redis Cluster: Java's script cannot carry one.) This is Java's `INCR`, not
    ///   something this crate can change: with Java grants in the fleet, keep the counter
    ///   persistent (AOF with `appendfsync always`, replicas acknowledged with `WAIT`), or
    ///   fence on the tokens of Rust holders only.
    /// - **A hot mutex favours whoever just released it.** Redisson's `RLock` is not fair: the
    ///   unlock message wakes waiters that then race for the lock, and a client that releases
    ///   and acquires again at once usually wins that race against a waiter still waking up.
    ///   Measured on a lock contended in a loop by both languages, the Java side got 11–29 %
    ///   of the holds. Where a mixed fleet needs each
    ///   side served in turn, use the [fair lock](crate::LockClient::fair_lock) on both sides
    ///   (Java's `getFairLock(N)`).
    ///
    /// What differs from [`Native`](Layout::Native):
    /// - the [prefix](crate::LockClientBuilder::prefix) is not used, and
    ///   [`LockClient::scan`](crate::LockClient::scan) has nothing to scan under;
    /// - names must keep the lock and its channel in one cluster slot, as Redisson needs:
    ///   a name with a `{` or `}` must contain a well-formed, non-empty hash tag (`a{b`, `a}b`
    ///   and `{}x` are refused with [`LockError::InvalidName`]), and names that are a key or
    ///   channel of another Redisson object (a channel, a fencing counter, a fair lock's queue
    ///   or deadlines, a semaphore's lease set or hold, a read hold's timeout key, an unlock
    ///   latch) are refused too, whatever the primitive;
    /// - local hand-off is off (each release publishes, so Java waiters get their turn):
    ///   [`handoff_limit`](crate::LockClientBuilder::handoff_limit) is ignored;
    /// - each primitive follows Redisson's rules where they differ from the native layout's
    ///   (below).
    ///
    /// A [fair lock](crate::LockClient::fair_lock) is Redisson's `RFairLock`
    /// (`getFairLock(N)`): one FIFO queue across both languages, in `redisson_lock_queue:{N}`,
    /// with each waiter's deadline (epoch ms) in `redisson_lock_timeout:{N}`, and each waiter
    /// woken on its own channel `redisson_lock__channel:{N}:<owner>`.
    /// - Deadlines are wall-clock times: Java clients write their own clock's, Rust clients the
    ///   Redis server's (`TIME`), so those clocks must agree (NTP), as Java clients' must.
    /// - A Rust waiter queues as a Java `lock()` does (Redisson's default
    ///   `fairLockWaitTimeout`, 300 s, in the deadline arithmetic) and keeps its own deadline
    ///   ahead of the clock while it waits, so it keeps its place however long the lock is held,
    ///   and when a Java waiter ahead is granted with a wait of up to 300 s. A Java `tryLock`
    ///   with a longer wait (or a larger `fairLockWaitTimeout`) ahead of it may cost it its place.
    ///   While it keeps its own deadline ahead, it moves every deadline behind it by as much,
    ///   so a Java waiter behind it keeps its place too, when the Rust waiter is granted or
    ///   gives up and takes its 300 s off the deadlines behind, as Redisson's waiters do.
    /// - A Rust waiter that times out or is cancelled leaves the queue at once (Redisson's
    ///   give-up), and wakes the next waiter if the lock is free. One killed while queued holds
    ///   up the waiters behind it as a killed Java `lock()` waiter does: until its deadline,
    ///   at most about 305 s (plus what was left of the holder's lease when the queue formed)
    ///   after the lock falls free with it first, wherever it was in the queue.
    /// - Fencing tokens come from `redisson_lock_token:{N}` and rise with Rust grants only
    ///   (Java's `RFairLock` has no token).
    ///
    /// A [read/write lock](crate::RwLock) is Redisson's `RReadWriteLock` (Redisson 3.22 or
    /// newer, or 4.x), shared with Java's `getReadWriteLock(N)`:
    ///
    /// | | Redis name | notes |
    /// |---|---|---|
    /// | lock | `N` | a hash: `mode` = `read` or `write`; a reader's field `<client uuid>:<n>`, the writer's `<client uuid>:<n>:write` (each → hold count) |
    /// | per read hold | `{N}:<reader field>:rwlock_timeout:1` | string `1` with the reader's lease as TTL (renewed by the watchdog) |
    /// | channel | `redisson_rwlock:{N}` | a read unlock that frees the lock publishes `0`, a write unlock and a force unlock `1` |
    /// | fencing counter | `redisson_lock_token:{N}` | as for the mutex (Java's `RReadWriteLock` has no token) |
    ///
    /// It behaves as Redisson's does, which differs from the native layout's: **readers go
    /// first** (a reader gets in whenever the lock is in read mode, even while writers wait, so
    /// a steady stream of readers can starve a writer), and a reader that crashed holds
    /// writers back until its own lease ends (each hold has its timeout key; the hash lives as
    /// long as the longest of them). The scope rules are the same in both layouts: a read
    /// inside a writer's scope re-enters, a write inside a reader's scope is
    /// [`LockError::WouldDeadlock`].
    ///
    /// **Java readers' renewals.** Java's read-lock renewal sets the hash's TTL to *its*
    /// watchdog timeout, which may shorten it (Redisson 3.x also re-arms every reader's timeout
    /// key, ours included, to it); if that Java reader then dies (or, on 3.x, unlocks), the
    /// hash runs out that long after the Java renewal. So Rust read holds are renewed every
    /// third of the shorter of the Rust watchdog timeout and
    /// [`redisson_watchdog_timeout`](crate::LockClientBuilder::redisson_watchdog_timeout) (the
    /// shortest `lockWatchdogTimeout` of the Java fleet, 10 s by default), and a renewal is
    /// taken to confirm the hold only that long. With that setting no lower than any Java
    /// service's `lockWatchdogTimeout`, a writer on either side never gets in under a Rust
    /// reader that has not been told it lost the lock; a Rust reader whose field or timeout
    /// key is gone is told at its next renewal, a third of that timeout later at most. A Rust
    /// read hold with an explicit lease is not renewed: keep such leases at most that long.
    ///
    /// A [semaphore](crate::Semaphore) is Redisson's `RPermitExpirableSemaphore`
    /// (`getPermitExpirableSemaphore(N)`): `N` holds the available count, `{N}:timeout` each
    /// permit's 16-byte id and lease end, and the channel is `redisson_sc:{N}`. Permits are
    /// shared across the languages, each side's release wakes the other side's waiters, a
    /// crashed holder's permits come back when their lease ends, and the watchdog renews Rust
    /// permits as Java's `updateLeaseTime` does.
    /// - Redisson stores only the available count: a handle's capacity sets it when it is
    ///   absent (Java's `trySetPermits`); [`capacity`](crate::Semaphore::capacity) is
    ///   `getPermits()`, [`set_capacity`](crate::Semaphore::set_capacity) is `setPermits`,
    ///   [`reset_capacity`](crate::Semaphore::reset_capacity) sets the handle's own capacity
    ///   again, and [`force_release_all`](crate::Semaphore::force_release_all) takes every
    ///   leased permit back (each holder's `lost()` fires).
    /// - A request is refused ([`LockError::InvalidPermits`]) only above both the capacity in
    ///   force and the handle's own: after Java's `drainPermits()` or `addPermits(-k)` a Rust
    ///   [`acquire`](crate::Semaphore::acquire) waits for permits to come back, as Java's
    ///   does. A hold is at most 1024 permits (its owner id carries one id per permit).
    /// - A guard's [`owner`](crate::LockGuard::owner) lists its permit ids
    ///   (`permits:<id>,…#n`); a Java `release(id)` of one of them fires the guard's `lost()`.
    /// - Lease ends are epoch milliseconds: Rust uses the Redis server's clock, Java its own,
    ///   so the Java hosts' clocks must agree with Redis's (as they must among Java clients).
    /// - For Java's plain `RSemaphore` (`getSemaphore(N)`), use
    ///   [`without_leases`](crate::Semaphore::without_leases). Its permits have no owner: a
    ///   holder that dies keeps them for ever (Java's and ours alike; for a Rust hold also
    ///   one frozen longer than its lease, and a cancelled acquire whose request took the
    ///   permits while Redis stayed unreachable longer than the lease, since its clean-up is
    ///   retried only until then), and `capacity()` and
    ///   `force_release_all()` are [`LockError::Unsupported`]. Both sides must use the same
    ///   kind for a name.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{Layout, LockClient};
    ///
    /// let locks = LockClient::builder("redis://127.0.0.1:6379")
    ///     .layout(Layout::Redisson)
    ///     .build()
    ///     .await?;
    /// // The same lock as `redisson.getFencedLock("stock:42")` in a Java service.
    /// let guard = locks.lock("stock:42").acquire().await?;
    /// # drop(guard); Ok(()) }
    /// ```
    Redisson,
}

impl Layout {
    /// The keys of lock `name` used as `family`.
    pub(crate) fn names(
        self,
        prefix: &str,
        name: &str,
        family: Family,
    ) -> Result<LockNames, LockError> {
        match self {
            Layout::Native => Ok(LockNames::new(prefix, name)?.with_family(family)),
            Layout::Redisson => redisson::names(name, family),
        }
    }

    /// How long a fencing counter is kept after its last use, given the client's setting:
    /// Redisson's counter is `RFencedLock`'s, which Java `INCR`s and never expires.
    pub(crate) fn fence_retention(self, configured: Duration) -> Duration {
        match self {
            Layout::Native => configured,
            Layout::Redisson => Duration::ZERO,
        }
    }

    /// Whether every grant issues its fencing token, whatever the client asked. In Redisson's
    /// layout, yes: a grant there writes Redisson's token key as it always did (the layout on
    /// Redis stays exactly what Java services and earlier releases see); tokens on demand are
    /// this crate's layout's.
    pub(crate) fn fences_every_grant(self) -> bool {
        self == Layout::Redisson
    }

    /// Whether a release may hand the lock to a waiting task of the same client. Not in
    /// Redisson's layout: every release publishes, so that Java waiters get their turn (and
    /// the hand-off limit's yield mark, kept on the fencing counter, would break Java's `INCR`
    /// of it).
    pub(crate) fn hands_off_locally(self) -> bool {
        self == Layout::Native
    }

    /// A new client id: a UUID, hyphenated as Redisson's are in its layout, so owner fields
    /// read alike in tooling.
    pub(crate) fn new_client_id(self) -> String {
        let id = uuid::Uuid::new_v4();
        match self {
            Layout::Native => id.simple().to_string(),
            Layout::Redisson => id.hyphenated().to_string(),
        }
    }

    /// Whether a semaphore may be used without leases (Java's plain `RSemaphore`).
    pub(crate) fn has_plain_semaphores(self) -> bool {
        self == Layout::Redisson
    }

    /// Whether a mutex, a fair lock and a read/write lock of one name all live in one hash at
    /// the name (Redisson's), so that freeing a name by force must first tell them apart (each
    /// wakes its waiters its own way); in this crate's layout every kind frees the same way.
    pub(crate) fn shares_one_hash_across_the_family(self) -> bool {
        self == Layout::Redisson
    }

    /// Whether a semaphore keeps its available count as a string at the name itself
    /// (Redisson's, both kinds), so that a string there is a semaphore rather than foreign data.
    pub(crate) fn counts_permits_at_the_name(self) -> bool {
        self == Layout::Redisson
    }

    /// Whether the client's locks live under its key prefix, where a scan can list them.
    pub(crate) fn has_prefix(self) -> bool {
        self == Layout::Native
    }
}
