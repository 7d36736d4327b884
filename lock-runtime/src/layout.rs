//! Where a client's locks live on Redis: this crate's own key layout, or Redisson's, so that
//! Rust and Java services lock the same names.

use crate::LockError;
use crate::demux::WakeRule;
use crate::family::{Family, Mode, PLACE_TTL};
use crate::names::{LockNames, hash_tag, validate_name};

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
    ///
    /// What differs from [`Native`](Layout::Native):
    /// - the [prefix](crate::LockClientBuilder::prefix) is not used, and
    ///   [`LockClient::scan`](crate::LockClient::scan) has nothing to scan under;
    /// - names must keep the lock and its channel in one cluster slot, as Redisson needs:
    ///   a name with a `{` or `}` must contain a well-formed, non-empty hash tag (`a{b`, `a}b`
    ///   and `{}x` are refused with [`LockError::InvalidName`]), and names that are a Redisson
    ///   channel or token key are refused too;
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
    /// - A Rust waiter that times out or is cancelled leaves the queue at once (Redisson's
    ///   give-up), and wakes the next waiter if the lock is free. One killed while queued holds
    ///   up the waiters behind it as a killed Java `lock()` waiter does: until its deadline,
    ///   at most about 305 s (plus what was left of the holder's lease when the queue formed)
    ///   after the lock falls free with it first.
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
    /// - A guard's [`owner`](crate::LockGuard::owner) lists its permit ids
    ///   (`permits:<id>,…#n`); a Java `release(id)` of one of them fires the guard's `lost()`.
    /// - Lease ends are epoch milliseconds: Rust uses the Redis server's clock, Java its own,
    ///   so the Java hosts' clocks must agree with Redis's (as they must among Java clients).
    /// - For Java's plain `RSemaphore` (`getSemaphore(N)`), use
    ///   [`without_leases`](crate::Semaphore::without_leases). Its permits have no owner: a
    ///   holder that dies keeps them for ever (Java's and ours alike), and `capacity()` and
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
            Layout::Redisson => redisson(name, family),
        }
    }
}

impl LockNames {
    /// How long a waiter's place in Redis can outlive the waiter: so long its leaving is
    /// worth retrying in the background. A native place ends [`PLACE_TTL`] after its last
    /// refresh; a place in Redisson's fair queue carries Redisson's deadline arithmetic (up to
    /// a `fairLockWaitTimeout` beyond the place ahead), so a waiter that gives up while Redis
    /// is unreachable for a while still leaves it instead of stalling the queue.
    pub(crate) fn place_outlives(&self) -> std::time::Duration {
        match (self.layout, self.family) {
            (Layout::Redisson, Family::Fair) => {
                PLACE_TTL + std::time::Duration::from_millis(crate::script::redisson::fair::WAIT)
            }
            _ => PLACE_TTL,
        }
    }

    /// The owner id of an acquisition in `mode`, from `base` (`<client>:<n>`): what the
    /// scripts of this name's layout and family need to know about the hold.
    pub(crate) fn owner(&self, mode: Mode, base: String) -> String {
        match (self.layout, self.family) {
            (Layout::Redisson, Family::Semaphore { leases, .. }) => {
                crate::script::redisson::semaphore::owner(leases, mode, base)
            }
            _ => mode.owner_in(self, base),
        }
    }
}

/// How the messages on the channel of the lock `names` are read (see `demux.rs`): Redisson's
/// read/write lock wakes every waiter on a write unlock.
pub(crate) fn wake_rule(names: &LockNames) -> WakeRule {
    if is_redisson_rwlock(names) {
        WakeRule::WriteUnlockWakesAll
    } else {
        WakeRule::Counted
    }
}

/// Redisson's `prefixName`: `p:N` when `N` has a `{` (its own tag), else `p:{N}`.
pub(crate) fn prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// Redisson's `suffixName`: `N:s` when `N` has a `{` (its own tag), else `{N}:s`.
pub(crate) fn suffixed(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

const CHANNEL: &str = "redisson_lock__channel";
pub(crate) const TOKEN: &str = "redisson_lock_token";
/// `RReadWriteLock`'s channel (both sides publish on it: `0` a read unlock, `1` a write unlock).
const RWLOCK_CHANNEL: &str = "redisson_rwlock";

/// Whether `names` are Redisson's `RReadWriteLock` (`script/redisson/rwlock.rs`): a hash with a
/// `mode` field, reader and `:write` writer fields, and per-hold timeout keys.
pub(crate) fn is_redisson_rwlock(names: &LockNames) -> bool {
    names.layout == Layout::Redisson && names.family == Family::ReadWrite
}

fn redisson(name: &str, family: Family) -> Result<LockNames, LockError> {
    validate_name(name)?;
    if name.contains(['{', '}']) && hash_tag(name).is_none() {
        return Err(LockError::invalid_name(
            name,
            "with the Redisson layout a name with `{` or `}` needs a well-formed, non-empty hash tag, or its lock and channel land in different cluster slots",
        ));
    }
    if [CHANNEL, TOKEN, RWLOCK_CHANNEL].iter().any(|role| {
        name.strip_prefix(role)
            .is_some_and(|rest| rest.starts_with(':'))
    }) {
        return Err(LockError::invalid_name(
            name,
            "with the Redisson layout this name is another lock's channel or fencing counter",
        ));
    }
    // Each primitive's keys, as Redisson lays them out (see `script/redisson/`).
    let channel = match family {
        Family::Mutex => prefixed(CHANNEL, name),
        // RFairLock: the mutex's hash and channel prefix, plus a queue and deadlines whose
        // keys are derived in `script/redisson/fair.rs`; each waiter's own channel is
        // `<channel>:<owner>`.
        Family::Fair => {
            crate::script::redisson::fair::check_name(name)?;
            prefixed(CHANNEL, name)
        }
        Family::Semaphore { .. } => {
            return crate::script::redisson::semaphore::names(name, family);
        }
        // `RReadWriteLock`: the same hash `N` (with a `mode` field) and token key; its own
        // channel. Its per-hold timeout keys are derived from `N` and the owner by its scripts.
        Family::ReadWrite => prefixed(RWLOCK_CHANNEL, name),
    };
    Ok(LockNames {
        name: name.to_owned(),
        key: name.to_owned(),
        channel,
        fence: prefixed(TOKEN, name),
        family,
        layout: Layout::Redisson,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert!(is_redisson_rwlock(&n));
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
}
