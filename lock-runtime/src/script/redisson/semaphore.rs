//! Semaphores in Redisson's layout: `RPermitExpirableSemaphore` (the default: permits with
//! leases) and `RSemaphore` (opted into with
//! [`Semaphore::without_leases`](crate::Semaphore::without_leases): anonymous permits).
//!
//! | | `RPermitExpirableSemaphore` | `RSemaphore` |
//! |---|---|---|
//! | `N` (the name) | available permits, a decimal string | the same |
//! | `{N}:timeout` | zset: 16-byte binary permit id → expiry, epoch ms | — |
//! | `redisson_sc:{N}` | channel: payload a count (below) | the same |
//! | `redisson_lock_token:{N}` | fencing counter (ours; no TTL, as `RFencedLock`'s) | the same |
//!
//! ## Owner ids
//!
//! Redis keeps no owner for Redisson's permits, only ids (expirable) or nothing (plain). The
//! hold's owner id carries what the scripts need, in a form no other owner id has (native
//! ones start with the client's hex id and contain `:` before any `#`):
//!
//! - expirable: `permits:<id>[,<id>…]#<n>`, one id per permit, each 32 lower-case hex chars
//!   (16 random bytes, a v4 UUID's), decoded to the 16 raw bytes Redisson stores (since
//!   3.17) by the scripts; the ids are exactly what a Java `release(id)` takes;
//! - plain: `plain:<client>:<n>#<n>`: Redisson keeps no trace of it; the hold's own marker
//!   `{N}:<owner>` (ours, with the hold's lease, renewed by the watchdog; Java never reads it)
//!   makes a retried acquire take nothing more and a repeated release give nothing back twice
//!   (see `plain_semaphore.lua`).
//!
//! Every id is made once per acquisition, so a retried acquire (unknown outcome) re-takes
//! its own permits idempotently: the expirable script finds its ids in the zset, the plain one
//! its marker.
//!
//! ## Capacity
//!
//! Redisson keeps only the *available* count in `N`; an expirable semaphore's total is that
//! plus the zset's size (Java's `getPermits`). A Rust handle's capacity initialises `N` when it
//! is absent, as Java's `trySetPermits` (publishing it), before every operation. Mapping of
//! [`Semaphore`](crate::Semaphore)'s capacity calls:
//!
//! | call | expirable | plain |
//! |---|---|---|
//! | `available()` | reclaim expired permits, then `N` (`availablePermits`) | `N` |
//! | `capacity()` | `N` + zset size (`getPermits`) | refused: Redis has no total |
//! | `set_capacity(c)` | `setPermits(c)`: `N` moves by `c − total`, publishes `c` | refused |
//! | `reset_capacity()` | `setPermits(handle's capacity)` | refused |
//! | `force_release_all()` | every leased permit back to `N`, publishes the new count | refused: holders are not recorded |
//!
//! ## Wake-ups
//!
//! Every payload is a count that is at least the number of permits that came free: the new
//! available count (plain release, expirable release of one id, reclaim, `force_release_all`),
//! the new total (`setPermits`, `trySetPermits`), the count released (expirable release of
//! many, as Redisson's release-many), or the delta (`addPermits`). The demultiplexer wakes up
//! to that many local waiters (`demux.rs`), so nobody who could get in sleeps, and a waiter
//! for several permits that cannot get in passes its wake-up on (`acquire.rs`).

use std::sync::LazyLock;

use redis::Script;

use super::super::{Arg, Call, CapacityOp, Publishing, with_prelude};
use crate::LockError;
use crate::family::{Family, Mode};
use crate::layout::{Layout, TOKEN, prefixed, suffixed};
use crate::names::LockNames;

/// `prelude.lua`, then `semaphore_common.lua`, then `script`.
fn semaphore_script(script: &str) -> String {
    with_prelude(&[include_str!("semaphore_common.lua"), script].concat())
}

/// `RPermitExpirableSemaphore`: every operation (see `permits.lua`).
pub(crate) static PERMITS: LazyLock<Script> =
    LazyLock::new(|| Script::new(&semaphore_script(include_str!("permits.lua"))));
/// `RSemaphore`: every operation (see `plain_semaphore.lua`).
pub(crate) static PLAIN: LazyLock<Script> =
    LazyLock::new(|| Script::new(&semaphore_script(include_str!("plain_semaphore.lua"))));
#[cfg(feature = "cluster")]
pub(crate) static PERMITS_SHARDED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&super::super::sharded(&semaphore_script(include_str!(
        "permits.lua"
    ))))
});
#[cfg(feature = "cluster")]
pub(crate) static PLAIN_SHARDED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&super::super::sharded(&semaphore_script(include_str!(
        "plain_semaphore.lua"
    ))))
});

/// Redisson's semaphore channel (`RedissonSemaphore`, `RedissonPermitExpirableSemaphore`).
const CHANNEL: &str = "redisson_sc";

/// The keys of semaphore `name` used as `family` (validated as every Redisson name is):
/// `key` is what the watchdog renews, the lease zset for an expirable semaphore, `N` for a
/// plain one.
pub(crate) fn names(name: &str, family: Family) -> Result<LockNames, LockError> {
    let leases = matches!(family, Family::Semaphore { leases: true, .. });
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
    Ok(LockNames {
        name: name.to_owned(),
        key: if leases {
            suffixed(name, "timeout")
        } else {
            name.to_owned()
        },
        channel: prefixed(CHANNEL, name),
        fence: prefixed(TOKEN, name),
        family,
        layout: Layout::Redisson,
    })
}

/// The owner id of an acquisition of `mode` (see the module docs).
pub(crate) fn owner(leases: bool, mode: Mode, base: String) -> String {
    let Mode::Permits(n) = mode else {
        return mode.owner(base);
    };
    if !leases {
        return format!("plain:{base}#{n}");
    }
    let ids: Vec<String> = (0..n)
        .map(|_| uuid::Uuid::new_v4().simple().to_string())
        .collect();
    format!("permits:{}#{n}", ids.join(","))
}

/// Whether `names` is a semaphore in Redisson's layout, and which kind.
fn kind(names: &LockNames) -> Option<(bool, u32)> {
    match (names.layout, names.family) {
        (Layout::Redisson, Family::Semaphore { leases, capacity }) => Some((leases, capacity)),
        _ => None,
    }
}

/// The script and keys of either kind: `[{N}:timeout, N, channel, fence]` (expirable) or
/// `[N, channel, fence]` (plain).
fn call<'a>(
    publishing: Publishing,
    names: &LockNames,
    leases: bool,
    args: impl IntoIterator<Item = Arg<'a>>,
) -> Call {
    if leases {
        Call::new(
            publishing.redisson_permits,
            &[&names.key, &names.name, &names.channel, &names.fence],
            args,
        )
    } else {
        Call::new(
            publishing.redisson_semaphore,
            &[&names.name, &names.channel, &names.fence],
            args,
        )
    }
}

/// Takes the permits of `owner` (see `Call::acquire`).
pub(crate) fn acquire(
    publishing: Publishing,
    names: &LockNames,
    owner: &str,
    lease_ms: u64,
    retention_ms: u64,
) -> Option<Call> {
    let (leases, capacity) = kind(names)?;
    Some(call(
        publishing,
        names,
        leases,
        [
            Arg::Str("acquire"),
            Arg::Str(owner),
            Arg::Int(lease_ms),
            Arg::Int(retention_ms),
            Arg::Int(capacity.into()),
        ],
    ))
}

/// Releases the permits of `owner`.
pub(crate) fn release(publishing: Publishing, names: &LockNames, owner: &str) -> Option<Call> {
    let (leases, _) = kind(names)?;
    Some(call(
        publishing,
        names,
        leases,
        [Arg::Str("release"), Arg::Str(owner)],
    ))
}

/// Takes back every leased permit (`force_release_all`); the plain kind refuses it before
/// anything is sent, and its script answers "nothing held".
pub(crate) fn force_unlock(publishing: Publishing, names: &LockNames) -> Option<Call> {
    let (leases, _) = kind(names)?;
    Some(call(publishing, names, leases, [Arg::Str("force")]))
}

/// The capacity calls (see the module docs for the mapping).
pub(crate) fn capacity(
    publishing: Publishing,
    names: &LockNames,
    default_capacity: u32,
    op: CapacityOp,
) -> Option<Call> {
    let (leases, _) = kind(names)?;
    let (op, value) = match op {
        CapacityOp::Free => ("free", 0),
        CapacityOp::Capacity => ("capacity", 0),
        CapacityOp::Set(n) => ("set", n),
        // Redisson keeps no "stored" capacity apart from the count: the handle's applies again.
        CapacityOp::Clear => ("set", default_capacity),
    };
    Some(call(
        publishing,
        names,
        leases,
        [
            Arg::Str(op),
            Arg::Int(default_capacity.into()),
            Arg::Int(value.into()),
        ],
    ))
}

/// The semaphore's state, in `inspect.lua`'s reply shape.
pub(crate) fn inspect(publishing: Publishing, names: &LockNames, max_holders: u32) -> Option<Call> {
    let (leases, _) = kind(names)?;
    Some(call(
        publishing,
        names,
        leases,
        [Arg::Str("inspect"), Arg::Int(max_holders.into())],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The permit ids (32 hex chars each) of an expirable semaphore's owner id.
    fn permit_ids(owner: &str) -> Vec<&str> {
        owner
            .strip_prefix("permits:")
            .and_then(|rest| rest.rsplit_once('#'))
            .map(|(ids, _)| ids.split(',').collect())
            .unwrap_or_default()
    }

    fn names(name: &str, leases: bool) -> Result<LockNames, LockError> {
        super::names(
            name,
            Family::Semaphore {
                capacity: 3,
                leases,
            },
        )
    }

    #[test]
    fn redissons_keys() {
        let n = names("jobs", true).unwrap();
        assert_eq!(
            (n.key.as_str(), n.channel.as_str(), n.fence.as_str()),
            (
                "{jobs}:timeout",
                "redisson_sc:{jobs}",
                "redisson_lock_token:{jobs}"
            )
        );
        let n = names("a:{t}", false).unwrap();
        assert_eq!(
            (n.key.as_str(), n.channel.as_str()),
            ("a:{t}", "redisson_sc:a:{t}")
        );
        assert!(names("x:{t}:timeout", true).is_err());
        assert!(names("{x}:timeout", false).is_err());
        assert!(names("x:timeout", true).is_ok());
    }

    #[test]
    fn owner_ids_carry_one_permit_id_each() {
        let owner = owner(true, Mode::Permits(3), "c:1".into());
        let ids = permit_ids(&owner);
        assert_eq!(ids.len(), 3);
        assert!(ids.iter().all(|id| {
            id.len() == 32
                && id
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        }));
        assert_eq!(Mode::of_owner(&owner), Mode::Permits(3));
        let plain = super::owner(false, Mode::Permits(2), "c:1".into());
        assert_eq!(plain, "plain:c:1#2");
        assert_eq!(Mode::of_owner(&plain), Mode::Permits(2));
    }
}
