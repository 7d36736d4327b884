//! The lock family: which primitive a name is used as, and how each acquisition takes it.
//!
//! Every primitive is held the same way: an owner id with a lease, renewed by the watchdog (or
//! an explicit lease), released by the guard or the background releaser, with a fencing token,
//! `lost()` and a reentrancy scope. They differ only in their scripts (see `script/`) and in
//! what the owner id says about the hold:
//!
//! | [`Family`] | on Redis | owner id |
//! |---|---|---|
//! | `Mutex` | hash: owner → hold count, key TTL | `<client>:<n>` |
//! | `Fair` | the mutex's hash, plus a queue of waiters and their places' ends | `<client>:<n>` |
//! | `ReadWrite` | sorted set: owner → lease end, plus the waiting writers | `<client>:<n>#r` or `#w` |
//! | `Semaphore` | sorted set: owner → lease end | `<client>:<n>#<permits>` |
//!
//! (That is this crate's own layout. In Redisson's, a read/write lock is Redisson's hash with a
//! `mode` field, reader fields `<client>:<n>`, writer fields `<client>:<n>:write`, and one
//! timeout key per read hold: see `script/redisson/rwlock.rs`.)
//!
//! Keeping each holder's lease end *inside* the sorted set (instead of one TTL per key) is what
//! lets a dead reader or permit holder drop out on its own: every script first removes the
//! entries whose lease ended, so a crashed process never blocks writers or shrinks a
//! semaphore for longer than its lease.

use std::time::Duration;

use crate::layout::is_redisson_rwlock;
use crate::names::LockNames;

/// The suffix of a writer's field in Redisson's `RReadWriteLock` (`<owner>:write`).
pub(crate) const REDISSON_WRITER: &str = ":write";

/// How long a waiter's place (a fair lock's queue entry, a waiting writer's claim) lasts
/// without being refreshed. A waiter refreshes it at every attempt and sleeps at most a third
/// of it between attempts, so a live waiter never loses its place; a waiter that died (killed,
/// its process frozen) stops blocking the others within this long.
pub(crate) const PLACE_TTL: Duration = Duration::from_secs(5);

/// Which primitive a lock name is used as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// [`Lock`](crate::Lock): one holder, reentrant by scope.
    Mutex,
    /// [`LockClient::fair_lock`](crate::LockClient::fair_lock): one holder, granted in the
    /// order the waiters first asked, across processes.
    Fair,
    /// [`RwLock`](crate::RwLock): many readers or one writer; waiting writers go first.
    ReadWrite,
    /// [`Semaphore`](crate::Semaphore): up to `capacity` permits (unless a capacity is
    /// stored in Redis, which wins).
    Semaphore {
        /// The capacity used while none is stored in Redis.
        capacity: u32,
        /// Whether each holder's permits carry a lease (always, in the native layout). In
        /// Redisson's layout: `true` is an `RPermitExpirableSemaphore`, `false` a plain
        /// `RSemaphore` ([`Semaphore::without_leases`](crate::Semaphore::without_leases)).
        leases: bool,
    },
}

impl Family {
    /// What errors and logs call it.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Family::Mutex => "lock",
            Family::Fair => "fair lock",
            Family::ReadWrite => "read/write lock",
            Family::Semaphore { .. } => "semaphore",
        }
    }

    /// Whether two handles use a name as the same primitive (a semaphore's capacity aside).
    pub(crate) fn same_kind(self, other: Family) -> bool {
        std::mem::discriminant(&self) == std::mem::discriminant(&other)
    }

    /// Whether a release may grant the lock to a waiting task of the same client in its own
    /// round trip (`handoff.rs`). Only the mutex: a fair lock's next holder is decided by its
    /// queue in Redis, and readers and permits are shared.
    pub(crate) fn hands_off(self) -> bool {
        self == Family::Mutex
    }

    /// Whether a waiter holds a place in Redis (a queue entry, a writer's claim) that must be
    /// refreshed while it waits and removed when it stops waiting.
    pub(crate) fn waiters_hold_places(self, mode: Mode) -> bool {
        match self {
            Family::Fair => true,
            Family::ReadWrite => mode == Mode::Write,
            Family::Mutex | Family::Semaphore { .. } => false,
        }
    }
}

/// What one acquisition asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The whole lock (a mutex or a fair lock).
    Exclusive,
    /// The read side of a read/write lock.
    Read,
    /// The write side of a read/write lock.
    Write,
    /// This many permits of a semaphore (at least one).
    Permits(u32),
}

impl Mode {
    /// The owner id of an acquisition: `base` (`<client>:<n>`) with what the scripts need to
    /// know about the hold.
    pub(crate) fn owner(self, base: String) -> String {
        match self {
            Mode::Exclusive => base,
            Mode::Read => base + "#r",
            Mode::Write => base + "#w",
            Mode::Permits(n) => format!("{base}#{n}"),
        }
    }

    /// The mode an owner id was written with.
    pub(crate) fn of_owner(owner: &str) -> Mode {
        match owner.rsplit_once('#') {
            Some((_, "r")) => Mode::Read,
            Some((_, "w")) => Mode::Write,
            Some((_, n)) => n.parse().map_or(Mode::Exclusive, Mode::Permits),
            None => Mode::Exclusive,
        }
    }

    /// The owner id of an acquisition of the lock `names`: [`Mode::owner`], except in the
    /// lock's Redisson layout, where Java reads the ids. For Redisson's `RReadWriteLock` a
    /// reader is `base` itself (`<client uuid>:<n>`, as a Java reader's `<client uuid>:<thread
    /// id>`; a `#r` would do no harm to Java, but tooling and Java logs show ids of this form) and
    /// the writer `base` with Redisson's `:write`. A mutex is `base` in both layouts.
    pub(crate) fn owner_in(self, names: &LockNames, base: String) -> String {
        if !is_redisson_rwlock(names) {
            return self.owner(base);
        }
        match self {
            Mode::Write => base + REDISSON_WRITER,
            _ => base,
        }
    }

    /// The mode an owner id of the lock `names` was written with: [`Mode::of_owner`], or, for
    /// Redisson's `RReadWriteLock`, the writer's `:write` suffix or else a reader (Java's
    /// fields included).
    pub(crate) fn of_hold(names: &LockNames, owner: &str) -> Mode {
        if !is_redisson_rwlock(names) {
            return Mode::of_owner(owner);
        }
        if owner.ends_with(REDISSON_WRITER) {
            Mode::Write
        } else {
            Mode::Read
        }
    }

    /// Whether a hold of mode `self` covers a nested acquisition of mode `nested` in its
    /// scope: a writer may read, anything may take what it already holds; a reader may not
    /// write (the upgrade would wait for itself).
    pub(crate) fn covers(self, nested: Mode) -> bool {
        !(self == Mode::Read && nested == Mode::Write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_ids_round_trip_their_mode() {
        for mode in [
            Mode::Exclusive,
            Mode::Read,
            Mode::Write,
            Mode::Permits(1),
            Mode::Permits(40),
        ] {
            assert_eq!(Mode::of_owner(&mode.owner("abc:7".into())), mode);
        }
        assert_eq!(Mode::Permits(3).owner("c:1".into()), "c:1#3");
    }

    #[test]
    fn redisson_read_write_owners_read_like_redissons() {
        use crate::layout::Layout;
        let rw = Layout::Redisson
            .names("p", "stock", Family::ReadWrite)
            .unwrap();
        let base = "0a3e7a38-7f55-4e6c-9d8a-6b1f0e2d4c11:7".to_owned();
        assert_eq!(Mode::Read.owner_in(&rw, base.clone()), base);
        let writer = Mode::Write.owner_in(&rw, base.clone());
        assert_eq!(writer, format!("{base}:write"));
        assert_eq!(Mode::of_hold(&rw, &writer), Mode::Write);
        assert_eq!(Mode::of_hold(&rw, &base), Mode::Read);
        // The native layout keeps its own ids.
        let native = Layout::Native
            .names("p", "stock", Family::ReadWrite)
            .unwrap();
        assert_eq!(Mode::Read.owner_in(&native, "c:1".into()), "c:1#r");
        assert_eq!(Mode::of_hold(&native, "c:1#w"), Mode::Write);
        let mutex = Layout::Redisson.names("p", "stock", Family::Mutex).unwrap();
        assert_eq!(Mode::of_hold(&mutex, &base), Mode::Exclusive);
    }

    #[test]
    fn a_reader_cannot_upgrade_in_its_scope() {
        assert!(Mode::Write.covers(Mode::Read));
        assert!(Mode::Write.covers(Mode::Write));
        assert!(Mode::Read.covers(Mode::Read));
        assert!(!Mode::Read.covers(Mode::Write));
    }
}
