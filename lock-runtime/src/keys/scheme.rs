//! A lock name's scheme: the primitive it is used as, in the layout its client uses, resolved
//! once when the name is laid out and carried in its [`LockNames`](super::LockNames).
//!
//! Everything that differs between the layouts is a `match` on it: which script serves each
//! call (`script/call.rs`), how a waiter is woken ([`Waking`]), what owner ids look like
//! ([`Scheme::owner`]) and how long a waiter's place can outlive it.
//!
//! | scheme | layout | primitive | on Redis |
//! |---|---|---|---|
//! | `Mutex` | native | [`Lock`](crate::Lock) | string: the holder's owner id (`!` once waited for) |
//! | `Fair` | native | fair lock | hash: owner → hold count, a queue, places |
//! | `ReadWrite` | native | [`RwLock`](crate::RwLock) | sorted set of holders, waiting writers |
//! | `Semaphore` | native | [`Semaphore`](crate::Semaphore) | sorted set of holders |
//! | `RedissonMutex` | Redisson | `RLock` / `RFencedLock` | hash: owner → hold count |
//! | `RedissonFair` | Redisson | `RFairLock` | the hash, `redisson_lock_queue`, `redisson_lock_timeout` |
//! | `RedissonReadWrite` | Redisson | `RReadWriteLock` | hash with `mode`, per-read-hold timeout keys |
//! | `RedissonPermits` | Redisson | `RPermitExpirableSemaphore` | available count, `{N}:timeout` permit ids |
//! | `RedissonPlain` | Redisson | `RSemaphore` | available count |

use std::time::Duration;

use super::{Family, Layout, Mode, PLACE_TTL};
use super::{owner, redisson};

/// See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// This crate's mutex.
    Mutex,
    /// This crate's fair lock.
    Fair,
    /// This crate's read/write lock (waiting writers go first).
    ReadWrite,
    /// This crate's semaphore; `capacity` applies while none is stored in Redis.
    Semaphore { capacity: u32 },
    /// Redisson's `RLock` / `RFencedLock`: this crate's mutex scripts on Redisson's keys.
    RedissonMutex,
    /// Redisson's `RFairLock`.
    RedissonFair,
    /// Redisson's `RReadWriteLock` (readers go first).
    RedissonReadWrite,
    /// Redisson's `RPermitExpirableSemaphore`.
    RedissonPermits { capacity: u32 },
    /// Redisson's plain `RSemaphore` (permits without owners).
    RedissonPlain { capacity: u32 },
}

/// How a waiting task learns that it may try again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Waking {
    /// The lock's unlock channel, shared by its waiters: each message wakes as many waiters as
    /// it says came free, or, with `write_unlock_wakes_all`, every waiter on a write unlock
    /// (Redisson's read/write lock publishes `1`).
    Shared { write_unlock_wakes_all: bool },
    /// The lock's unlock channel, but woken only by the messages that name this waiter.
    Directed,
    /// A channel of the waiter's own.
    Own(String),
}

impl Scheme {
    /// The scheme of a name used as `family` in `layout`.
    pub(crate) fn of(layout: Layout, family: Family) -> Scheme {
        match layout {
            Layout::Native => Scheme::native(family),
            Layout::Redisson => match family {
                Family::Mutex => Scheme::RedissonMutex,
                Family::Fair => Scheme::RedissonFair,
                Family::ReadWrite => Scheme::RedissonReadWrite,
                Family::Semaphore {
                    capacity,
                    leases: true,
                } => Scheme::RedissonPermits { capacity },
                Family::Semaphore {
                    capacity,
                    leases: false,
                } => Scheme::RedissonPlain { capacity },
            },
        }
    }

    /// The scheme of a name used as `family` in this crate's layout.
    pub(crate) fn native(family: Family) -> Scheme {
        match family {
            Family::Mutex => Scheme::Mutex,
            Family::Fair => Scheme::Fair,
            Family::ReadWrite => Scheme::ReadWrite,
            Family::Semaphore { capacity, .. } => Scheme::Semaphore { capacity },
        }
    }

    /// The primitive.
    pub(crate) fn family(self) -> Family {
        match self {
            Scheme::Mutex | Scheme::RedissonMutex => Family::Mutex,
            Scheme::Fair | Scheme::RedissonFair => Family::Fair,
            Scheme::ReadWrite | Scheme::RedissonReadWrite => Family::ReadWrite,
            Scheme::Semaphore { capacity } | Scheme::RedissonPermits { capacity } => {
                Family::Semaphore {
                    capacity,
                    leases: true,
                }
            }
            Scheme::RedissonPlain { capacity } => Family::Semaphore {
                capacity,
                leases: false,
            },
        }
    }

    /// The layout.
    pub(crate) fn layout(self) -> Layout {
        match self {
            Scheme::Mutex | Scheme::Fair | Scheme::ReadWrite | Scheme::Semaphore { .. } => {
                Layout::Native
            }
            Scheme::RedissonMutex
            | Scheme::RedissonFair
            | Scheme::RedissonReadWrite
            | Scheme::RedissonPermits { .. }
            | Scheme::RedissonPlain { .. } => Layout::Redisson,
        }
    }

    /// Whether its tokens are ordered by the failover epoch of the master that granted them
    /// (see "Fencing epochs" in `prelude.lua`): this crate's layout. Redisson's is left as it
    /// was (Java's `RFencedLock` increments the same counter).
    pub(crate) fn orders_tokens_by_epoch(self) -> bool {
        self.layout() == Layout::Native
    }

    /// Whether a waiter in `mode` holds a place in Redis (a fair lock's queue entry, a native
    /// waiting writer's claim) that must be refreshed while it waits and removed when it stops
    /// waiting. Redisson's read/write lock keeps none: its writers do not go first.
    pub(crate) fn holds_place(self, mode: Mode) -> bool {
        match self {
            Scheme::Fair | Scheme::RedissonFair => true,
            Scheme::ReadWrite => mode == Mode::Write,
            _ => false,
        }
    }

    /// Whether waiters hand on the one wake-up that a read unlock gives each process:
    /// Redisson's read/write lock publishes `0` when a read unlock frees it, which Java reads
    /// as "wake one waiter", so every other waiting reader of this process must be woken by
    /// the one that got in (`acquire/mod.rs`).
    pub(crate) fn shares_read_wake_ups(self) -> bool {
        self == Scheme::RedissonReadWrite
    }

    /// Whether a state read as this scheme (`kind`: the type at the lock's key) is in fact
    /// Redisson's read/write lock read through another handle of the name (`lock(name)`, as
    /// `lockctl --redisson` reads every lock): a hash with a `mode` field (`has_mode`).
    pub(crate) fn reads_foreign_rw_hash(self, kind: &str, has_mode: impl FnOnce() -> bool) -> bool {
        self.layout() == Layout::Redisson
            && self != Scheme::RedissonReadWrite
            && kind == "hash"
            && has_mode()
    }

    /// How long a waiter's place in Redis can outlive the waiter: so long its leaving is
    /// worth retrying in the background. A native place ends [`PLACE_TTL`] after its last
    /// refresh; a place in Redisson's fair queue carries Redisson's deadline arithmetic (up to
    /// a `fairLockWaitTimeout` beyond the place ahead), so a waiter that gives up while Redis
    /// is unreachable for a while still leaves it instead of stalling the queue.
    pub(crate) fn place_outlives(self) -> Duration {
        match self {
            Scheme::RedissonFair => PLACE_TTL + Duration::from_millis(redisson::FAIR_WAIT_MS),
            _ => PLACE_TTL,
        }
    }

    /// The owner id of an acquisition in `mode`, from `base` (`<client>:<n>`).
    ///
    /// This crate's scripts read the mode from a `#` suffix ([`Mode::owner`]); where Java reads
    /// the ids, they are Redisson's (see [`redisson`]).
    pub(crate) fn owner(self, mode: Mode, base: String) -> String {
        match (self, mode) {
            (Scheme::RedissonReadWrite, _) => owner::rw_owner(mode, base),
            (Scheme::RedissonPermits { .. }, Mode::Permits(n)) => owner::permits_owner(n),
            (Scheme::RedissonPlain { .. }, Mode::Permits(n)) => owner::plain_owner(base, n),
            _ => mode.owner(base),
        }
    }

    /// Whether a force-unlock can be made conditional on the holders it finds (this crate's
    /// `force_unlock.lua`; Redisson's scripts free whoever holds).
    pub(crate) fn force_unlock_compares_holders(self) -> bool {
        self.layout() == Layout::Native
    }

    /// The most permits one hold may take, where the owner id carries one permit id per
    /// permit (Redisson's `RPermitExpirableSemaphore`): a request is then capped before its id
    /// is built. `None`: no cap but the capacity.
    pub(crate) fn max_permits_per_hold(self) -> Option<u32> {
        matches!(self, Scheme::RedissonPermits { .. }).then_some(owner::MAX_PERMITS_PER_HOLD)
    }

    /// Whether a permit-holding semaphore's holds have leases (Redisson's
    /// `RPermitExpirableSemaphore`, rather than a plain `RSemaphore`).
    pub(crate) fn leases(self) -> bool {
        matches!(self, Scheme::RedissonPermits { .. })
    }

    /// Whether a hold may pass in memory to another task of its client (`Held::pass_in_memory`):
    /// this crate's mutex, whose hold in Redis is its owner id alone, and its semaphore, whose
    /// hold is its owner id's member in the holders' set (passed to a waiter for as many
    /// permits). Not in Redisson's layout, whose every release publishes for Java's waiters.
    pub(crate) fn passes_in_memory(self) -> bool {
        matches!(self, Scheme::Mutex | Scheme::Semaphore { .. })
    }

    /// Whether the lock is stored as a string holding its owner id (this crate's mutex); every
    /// other scheme keeps a hash, a sorted set or a count. (Asked by the in-memory backend.)
    #[cfg(any(test, feature = "memory"))]
    pub(crate) fn stores_a_string(self) -> bool {
        self == Scheme::Mutex
    }

    /// Whether a hold in `mode` shares its key's TTL with Java's renewals: a read hold of
    /// Redisson's read/write lock, whose hash's TTL Java readers' watchdogs also set.
    pub(crate) fn shares_java_renewals(self, mode: Mode) -> bool {
        self == Scheme::RedissonReadWrite && mode == Mode::Read
    }

    /// Whether data of type `kind` found at the key is a Redisson read/write lock's hash read
    /// through its own handle.
    pub(crate) fn holds_rw_hash(self, kind: &str) -> bool {
        self == Scheme::RedissonReadWrite && kind == "hash"
    }

    /// The mode an owner id of a lock of this scheme was written with (Java's ids included).
    pub(crate) fn mode_of(self, owner: &str) -> Mode {
        match self {
            Scheme::RedissonReadWrite => owner::rw_mode_of(owner),
            _ => Mode::of_owner(owner),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAMILIES: [Family; 5] = [
        Family::Mutex,
        Family::Fair,
        Family::ReadWrite,
        Family::Semaphore {
            capacity: 3,
            leases: true,
        },
        Family::Semaphore {
            capacity: 3,
            leases: false,
        },
    ];

    #[test]
    fn a_scheme_keeps_its_layout_and_family() {
        for layout in [Layout::Native, Layout::Redisson] {
            for family in FAMILIES {
                let scheme = Scheme::of(layout, family);
                assert_eq!(scheme.layout(), layout, "{scheme:?}");
                let leases_kept = layout == Layout::Redisson
                    || !matches!(family, Family::Semaphore { leases: false, .. });
                if leases_kept {
                    assert_eq!(scheme.family(), family, "{scheme:?}");
                } else {
                    // The native layout has leased permits only.
                    assert!(scheme.family().same_kind(family));
                }
            }
        }
    }

    #[test]
    fn owner_ids_round_trip_their_mode_in_every_scheme() {
        for layout in [Layout::Native, Layout::Redisson] {
            for family in FAMILIES {
                let scheme = Scheme::of(layout, family);
                let modes: &[Mode] = match family {
                    Family::Mutex | Family::Fair => &[Mode::Exclusive],
                    Family::ReadWrite => &[Mode::Read, Mode::Write],
                    Family::Semaphore { .. } => &[Mode::Permits(1), Mode::Permits(4)],
                };
                for &mode in modes {
                    let owner = scheme.owner(mode, "0a3e7a38-7f55-4e6c:7".into());
                    assert_eq!(scheme.mode_of(&owner), mode, "{scheme:?}: {owner}");
                }
            }
        }
    }

    #[test]
    fn only_fair_queues_and_native_writers_hold_places() {
        assert!(Scheme::Fair.holds_place(Mode::Exclusive));
        assert!(Scheme::RedissonFair.holds_place(Mode::Exclusive));
        assert!(Scheme::ReadWrite.holds_place(Mode::Write));
        assert!(!Scheme::ReadWrite.holds_place(Mode::Read));
        assert!(!Scheme::RedissonReadWrite.holds_place(Mode::Write));
        assert!(!Scheme::Mutex.holds_place(Mode::Exclusive));
        assert!(Scheme::RedissonFair.place_outlives() > Scheme::Fair.place_outlives());
    }
}
