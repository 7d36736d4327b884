//! Redisson's layout ([`Layout::Redisson`](crate::Layout::Redisson)): every key, channel and
//! owner id that Rust and Java clients share, for every primitive. The scripts that run on them
//! are in `script/redisson/`; this file is the whole of their naming.
//!
//! `{N}` is `N` itself when `N` already contains a `{` (Redisson's `prefixName` and
//! `suffixName`).
//!
//! | primitive | lock `key` | `channel` | other keys |
//! |---|---|---|---|
//! | `RLock` / `RFencedLock` | `N` (hash) | `redisson_lock__channel:{N}` | — |
//! | `RFairLock` | `N` (hash) | `redisson_lock__channel:{N}`; each waiter's `…:{N}:<owner>` | `redisson_lock_queue:{N}`, `redisson_lock_timeout:{N}` |
//! | `RReadWriteLock` | `N` (hash with `mode`) | `redisson_rwlock:{N}` | a read hold's `{N}:<owner>:rwlock_timeout:1` |
//! | `RPermitExpirableSemaphore` | `{N}:timeout` (permit id → expiry) | `redisson_sc:{N}` | `N`: the available count |
//! | `RSemaphore` | `N` (the available count) | `redisson_sc:{N}` | a hold's marker `{N}:<owner>` (ours) |
//!
//! Every primitive's fencing counter is `redisson_lock_token:{N}` (`RFencedLock`'s).
//!
//! Owner ids: a mutex or fair lock holder is `<client uuid>:<n>` (Java's `<client uuid>:<thread
//! id>`); a read/write lock's reader the same, its writer `<…>:write`; an expirable semaphore's
//! hold `permits:<id>[,<id>…]#<n>` (the 16-byte permit ids Java's `release(id)` takes, in hex);
//! a plain semaphore's hold `plain:<client>:<n>#<n>`.

use super::{Family, LockNames, Scheme, hash_tag, validate_name};
use crate::LockError;

/// `RLock`'s unlock channel prefix.
const CHANNEL: &str = "redisson_lock__channel";
/// `RFencedLock`'s fencing counter prefix.
const TOKEN: &str = "redisson_lock_token";
/// `RReadWriteLock`'s channel (both sides publish on it: `0` a read unlock, `1` a write unlock).
const RWLOCK_CHANNEL: &str = "redisson_rwlock";
/// Redisson's semaphore channel (`RedissonSemaphore`, `RedissonPermitExpirableSemaphore`).
const SEMAPHORE_CHANNEL: &str = "redisson_sc";
/// `RFairLock`'s queue of waiters.
const QUEUE: &str = "redisson_lock_queue";
/// `RFairLock`'s waiters' deadlines.
const TIMEOUT: &str = "redisson_lock_timeout";
/// Redisson 4's unlock latch of a lock (`redisson_unlock_latch:{N}:<request id>`).
const UNLOCK_LATCH: &str = "redisson_unlock_latch";

/// The `wait` of every Rust waiter of a fair lock, in ms: Redisson's default
/// `fairLockWaitTimeout`.
pub(crate) const FAIR_WAIT_MS: u64 = 300_000;

/// Redisson's `prefixName`: `p:N` when `N` has a `{` (its own tag), else `p:{N}`.
fn prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// Redisson's `suffixName`: `N:s` when `N` has a `{` (its own tag), else `{N}:s`.
fn suffixed(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The keys of lock `name` used as `family` in Redisson's layout.
pub(crate) fn names(name: &str, family: Family) -> Result<LockNames, LockError> {
    validate_name(name)?;
    if name.contains(['{', '}']) && hash_tag(name).is_none() {
        return Err(LockError::invalid_name(
            name,
            "with the Redisson layout a name with `{` or `}` needs a well-formed, non-empty hash tag, or its lock and channel land in different cluster slots",
        ));
    }
    check_not_a_role(name)?;
    let scheme = Scheme::of(crate::Layout::Redisson, family);
    let (key, channel) = match scheme {
        Scheme::RedissonFair => (name.to_owned(), prefixed(CHANNEL, name)),
        Scheme::RedissonReadWrite => (name.to_owned(), prefixed(RWLOCK_CHANNEL, name)),
        Scheme::RedissonPermits { .. } | Scheme::RedissonPlain { .. } => {
            // `key` is what the watchdog renews: the lease set of an expirable semaphore, the
            // count of a plain one (its holds' markers are renewed with it, see
            // `plain_semaphore.lua`).
            let key = match scheme {
                Scheme::RedissonPermits { .. } => suffixed(name, "timeout"),
                _ => name.to_owned(),
            };
            (key, prefixed(SEMAPHORE_CHANNEL, name))
        }
        _ => (name.to_owned(), prefixed(CHANNEL, name)),
    };
    Ok(LockNames {
        name: name.to_owned(),
        key,
        channel,
        fence: prefixed(TOKEN, name),
        scheme,
    })
}

/// Whether `name` is `<role>:…` for one of `roles`: a key of another name.
fn is_role(name: &str, roles: &[&str]) -> bool {
    roles.iter().any(|role| {
        name.strip_prefix(role)
            .is_some_and(|rest| rest.starts_with(':'))
    })
}

/// Refuses the names that are a key or channel of another Redisson object, whatever the
/// primitive asking: a lock of one kind taking another object's key would make that object
/// fail with foreign data (or write into it).
fn check_not_a_role(name: &str) -> Result<(), LockError> {
    if is_role(
        name,
        &[
            CHANNEL,
            TOKEN,
            RWLOCK_CHANNEL,
            SEMAPHORE_CHANNEL,
            QUEUE,
            TIMEOUT,
            UNLOCK_LATCH,
        ],
    ) {
        return Err(LockError::invalid_name(
            name,
            "with the Redisson layout this name is another lock's channel, fencing counter, fair queue, deadlines or unlock latch",
        ));
    }
    if name.contains('{') && name.ends_with(":timeout") {
        // `suffixName(x, "timeout")` of another name `x`: its lease zset.
        return Err(LockError::invalid_name(
            name,
            "with the Redisson layout this name is another semaphore's lease set (`…:timeout`)",
        ));
    }
    if name.contains('{') && name.contains(":plain:") {
        // `{x}:plain:…` or `x:plain:…` (x with its own tag): a hold's marker of another plain
        // semaphore `x`.
        return Err(LockError::invalid_name(
            name,
            "with the Redisson layout this name is a hold of another semaphore (`…{…}…:plain:…`)",
        ));
    }
    if name.contains('{') && name.contains(":rwlock_timeout:") {
        // `{x}:<reader>:rwlock_timeout:<n>`: a read hold's timeout key of read/write lock `x`.
        return Err(LockError::invalid_name(
            name,
            "with the Redisson layout this name is a read hold of another read/write lock (`…{…}…:rwlock_timeout:…`)",
        ));
    }
    Ok(())
}

/// `RFairLock`'s queue: `redisson_lock_queue:{N}`.
pub(crate) fn fair_queue(names: &LockNames) -> String {
    prefixed(QUEUE, &names.name)
}

/// `RFairLock`'s deadlines: `redisson_lock_timeout:{N}`.
pub(crate) fn fair_timeout(names: &LockNames) -> String {
    prefixed(TIMEOUT, &names.name)
}

/// The channel on which a fair lock's waiter `owner` is told its turn came:
/// `redisson_lock__channel:{N}:<owner>`.
pub(crate) fn fair_waiter_channel(names: &LockNames, owner: &str) -> String {
    format!("{}:{owner}", names.channel)
}

/// The base of a reader's timeout keys, `{N}:<owner>:rwlock_timeout` (Redisson's
/// `suffixName(N, owner)` and `:rwlock_timeout`); hold `k` is `<base>:<k>`.
pub(crate) fn rw_timeouts(names: &LockNames, owner: &str) -> String {
    suffixed(&names.name, owner) + ":rwlock_timeout"
}

/// The prefix of every reader's timeout keys: `{N}`, or `N` when it has its own `{` (Redisson's
/// `getKeyPrefix`). `renew.lua` derives the same from `N`.
pub(crate) fn rw_timeout_prefix(names: &LockNames) -> String {
    if names.name.contains('{') {
        names.name.clone()
    } else {
        format!("{{{}}}", names.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::Layout;

    fn keys(name: &str) -> (String, String, String) {
        let n = Layout::Redisson
            .names("ignored", name, Family::Mutex)
            .unwrap();
        (n.key, n.channel, n.fence)
    }

    fn slot_tag(key: &str) -> &str {
        hash_tag(key).unwrap_or(key)
    }

    #[test]
    fn redisson_keys_are_redissons() {
        assert_eq!(
            keys("stock:42"),
            (
                "stock:42".into(),
                "redisson_lock__channel:{stock:42}".into(),
                "redisson_lock_token:{stock:42}".into()
            )
        );
        assert_eq!(
            keys("order:{user:7}"),
            (
                "order:{user:7}".into(),
                "redisson_lock__channel:order:{user:7}".into(),
                "redisson_lock_token:order:{user:7}".into()
            )
        );
    }

    #[test]
    fn a_read_write_lock_has_redissons_rwlock_channel() {
        for (name, channel) in [
            ("stock:42", "redisson_rwlock:{stock:42}"),
            ("order:{user:7}", "redisson_rwlock:order:{user:7}"),
        ] {
            let n = Layout::Redisson
                .names("ignored", name, Family::ReadWrite)
                .unwrap();
            assert_eq!((n.key.as_str(), n.channel.as_str()), (name, channel));
            assert_eq!(n.fence, prefixed(TOKEN, name));
            assert_eq!(slot_tag(&n.key), slot_tag(&n.channel), "{name}");
            assert_eq!(n.scheme, Scheme::RedissonReadWrite);
        }
        assert!(
            Layout::Redisson
                .names("lock", "redisson_rwlock:{x}", Family::ReadWrite)
                .is_err()
        );
    }

    #[test]
    fn every_accepted_name_keeps_its_keys_in_one_slot() {
        for name in ["a", "stock:42", "x{tag}y", "{t}", "{a}}b", "ü{ß}"] {
            let (key, channel, fence) = keys(name);
            assert_eq!(slot_tag(&key), slot_tag(&channel), "{name}");
            assert_eq!(slot_tag(&key), slot_tag(&fence), "{name}");
        }
    }

    #[test]
    fn names_redisson_cannot_use_on_a_cluster_are_refused() {
        for name in [
            "a{b",
            "a}b",
            "{}x",
            "}{",
            "redisson_lock__channel:{x}",
            "redisson_lock_token:x",
            "",
        ] {
            let e = Layout::Redisson
                .names("lock", name, Family::Mutex)
                .unwrap_err();
            assert!(matches!(e, LockError::InvalidName { .. }), "{name}: {e:?}");
        }
        assert!(
            Layout::Redisson
                .names("lock", "redisson_lock_tokens", Family::Mutex)
                .is_ok()
        );
    }

    /// Every key another Redisson object keeps (a fair lock's queue and deadlines, a
    /// semaphore's lease set and hold markers, a read hold's timeout key, an unlock latch, a
    /// channel, a fencing counter) is refused as a name, whichever primitive asks: taking a
    /// mutex named `redisson_lock_queue:{x}` would make fair lock `x` fail with foreign data.
    #[test]
    fn every_role_is_refused_for_every_family() {
        let families = [
            Family::Mutex,
            Family::Fair,
            Family::ReadWrite,
            Family::Semaphore {
                capacity: 2,
                leases: true,
            },
            Family::Semaphore {
                capacity: 2,
                leases: false,
            },
        ];
        let roles = [
            "redisson_lock__channel:{x}",
            "redisson_lock_token:{x}",
            "redisson_rwlock:{x}",
            "redisson_sc:{x}",
            "redisson_lock_queue:{x}",
            "redisson_lock_timeout:x",
            "redisson_unlock_latch:{x}:0b1c2d3e",
            "{x}:timeout",
            "a:{x}:timeout",
            "{x}:plain:c:1",
            "{x}:0b1c2d3e-0000-4000-8000-000000000001:1:rwlock_timeout:1",
        ];
        for family in families {
            for name in roles {
                let e = Layout::Redisson.names("lock", name, family).unwrap_err();
                assert!(
                    matches!(e, LockError::InvalidName { .. }),
                    "{family:?} {name}: {e:?}"
                );
            }
            for name in ["x", "stock:{x}", "redisson_lock_queues", "{x}:timeouts"] {
                assert!(
                    Layout::Redisson.names("lock", name, family).is_ok(),
                    "{family:?} {name}"
                );
            }
        }
    }

    #[test]
    fn every_primitive_has_a_redisson_layout() {
        for (family, channel) in [
            (Family::Mutex, "redisson_lock__channel:{x}"),
            (Family::Fair, "redisson_lock__channel:{x}"),
            (Family::ReadWrite, "redisson_rwlock:{x}"),
        ] {
            let names = Layout::Redisson.names("lock", "x", family).unwrap();
            assert_eq!((names.key.as_str(), names.channel.as_str()), ("x", channel));
            assert!(Layout::Native.names("lock", "x", family).is_ok());
        }
    }
    #[test]
    fn fair_keys_are_redissons() {
        let names = Layout::Redisson
            .names("ignored", "drop:42", Family::Fair)
            .unwrap();
        assert_eq!(names.key, "drop:42");
        assert_eq!(fair_queue(&names), "redisson_lock_queue:{drop:42}");
        assert_eq!(fair_timeout(&names), "redisson_lock_timeout:{drop:42}");
        assert_eq!(
            fair_waiter_channel(&names, "u:7"),
            "redisson_lock__channel:{drop:42}:u:7"
        );
        let tagged = Layout::Redisson
            .names("ignored", "o:{u}", Family::Fair)
            .unwrap();
        assert_eq!(fair_queue(&tagged), "redisson_lock_queue:o:{u}");
        for bad in ["redisson_lock_queue:{x}", "redisson_lock_timeout:x"] {
            assert!(Layout::Redisson.names("p", bad, Family::Fair).is_err());
        }
    }

    #[test]
    fn read_holds_time_out_under_redissons_keys() {
        let base = "0a3e7a38-7f55-4e6c-9d8a-6b1f0e2d4c11:7".to_owned();
        let names = Layout::Redisson
            .names("p", "stock:42", Family::ReadWrite)
            .unwrap();
        assert_eq!(
            rw_timeouts(&names, &base),
            "{stock:42}:0a3e7a38-7f55-4e6c-9d8a-6b1f0e2d4c11:7:rwlock_timeout"
        );
        assert_eq!(rw_timeout_prefix(&names), "{stock:42}");
    }

    fn semaphore(name: &str, leases: bool) -> Result<LockNames, LockError> {
        names(
            name,
            Family::Semaphore {
                capacity: 3,
                leases,
            },
        )
    }

    #[test]
    fn semaphore_keys_are_redissons() {
        let n = semaphore("jobs", true).unwrap();
        assert_eq!(
            (n.key.as_str(), n.channel.as_str(), n.fence.as_str()),
            (
                "{jobs}:timeout",
                "redisson_sc:{jobs}",
                "redisson_lock_token:{jobs}"
            )
        );
        let n = semaphore("a:{t}", false).unwrap();
        assert_eq!(
            (n.key.as_str(), n.channel.as_str()),
            ("a:{t}", "redisson_sc:a:{t}")
        );
        assert!(semaphore("x:{t}:timeout", true).is_err());
        assert!(semaphore("{x}:timeout", false).is_err());
        assert!(semaphore("x:timeout", true).is_ok());
    }
}
