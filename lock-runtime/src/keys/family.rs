//! The lock family: which primitive a name is used as, and how each acquisition takes it.
//!
//! Every primitive is held the same way: an owner id with a lease, renewed by the watchdog (or
//! an explicit lease), released by the guard or the background releaser, with a fencing token,
//! `lost()` and a reentrancy scope. They differ only in their scripts (see `script/`) and in
//! what the owner id says about the hold:
//!
//! | [`Family`] | on Redis | owner id |
//! |---|---|---|
//! | `Mutex` | string: the holder's owner id (then `!` once a client waits), key TTL | `<client>:<n>` |
//! | `Fair` | hash: owner → hold count, key TTL, plus a queue of waiters and their places' ends | `<client>:<n>` |
//! | `ReadWrite` | sorted set: owner → lease end, plus the waiting writers | `<client>:<n>#r` or `#w` |
//! | `Semaphore` | sorted set: owner → lease end | `<client>:<n>#<permits>` |
//!
//! (That is this crate's own layout. Redisson's is in `redisson.rs`; `scheme.rs` pairs each
//! primitive with its layout.)
//!
//! Keeping each holder's lease end *inside* the sorted set (instead of one TTL per key) is what
//! lets a dead reader or permit holder drop out on its own: every script first removes the
//! entries whose lease ended, so a crashed process never blocks writers or shrinks a
//! semaphore for longer than its lease.

use std::time::Duration;

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
    fn a_reader_cannot_upgrade_in_its_scope() {
        assert!(Mode::Write.covers(Mode::Read));
        assert!(Mode::Write.covers(Mode::Write));
        assert!(Mode::Read.covers(Mode::Read));
        assert!(!Mode::Read.covers(Mode::Write));
    }
}
