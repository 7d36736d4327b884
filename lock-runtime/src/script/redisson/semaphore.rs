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
//! for several permits that cannot get in passes its wake-up on (`acquire/mod.rs`).

use std::sync::LazyLock;

use redis::Script;

use crate::backend::CapacityOp;
use crate::keys::LockNames;
use crate::script::call::Arg;
use crate::script::{Call, Publishing, with_prelude};

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

/// Whether `names` is an `RPermitExpirableSemaphore` (rather than a plain `RSemaphore`).
fn leases(names: &LockNames) -> bool {
    names.scheme.leases()
}

/// The script and keys of either kind: `[{N}:timeout, N, channel, fence]` (expirable) or
/// `[N, channel, fence]` (plain).
fn call<'a, A>(publishing: Publishing, names: &LockNames, args: A) -> Call
where
    A: IntoIterator<Item = Arg<'a>>,
    A::IntoIter: Clone,
{
    if leases(names) {
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

/// Takes the permits of `owner` (see `Call::acquire`), with `[lease_ms, retention_ms,
/// capacity]`.
pub(crate) fn acquire(
    publishing: Publishing,
    names: &LockNames,
    owner: &str,
    [lease_ms, retention_ms, capacity]: [u64; 3],
) -> Call {
    call(
        publishing,
        names,
        [
            Arg::Str("acquire"),
            Arg::Str(owner),
            Arg::Int(lease_ms),
            Arg::Int(retention_ms),
            Arg::Int(capacity),
        ],
    )
}

/// Releases the permits of `owner`.
pub(crate) fn release(publishing: Publishing, names: &LockNames, owner: &str) -> Call {
    call(publishing, names, [Arg::Str("release"), Arg::Str(owner)])
}

/// Takes back every leased permit (`force_release_all`); the plain kind refuses it before
/// anything is sent, and its script answers "nothing held".
pub(crate) fn force_unlock(publishing: Publishing, names: &LockNames) -> Call {
    call(publishing, names, [Arg::Str("force")])
}

/// The capacity calls (see the module docs for the mapping).
pub(crate) fn capacity(
    publishing: Publishing,
    names: &LockNames,
    default_capacity: u32,
    op: CapacityOp,
) -> Call {
    let (op, value) = match op {
        CapacityOp::Free => ("free", 0),
        CapacityOp::Capacity => ("capacity", 0),
        CapacityOp::Set(n) => ("set", n),
        // Redisson keeps no "stored" capacity apart from the count: the handle's applies again.
        CapacityOp::Clear => ("set", default_capacity),
    };
    call(
        publishing,
        names,
        [
            Arg::Str(op),
            Arg::Int(default_capacity.into()),
            Arg::Int(value.into()),
        ],
    )
}

/// The semaphore's state, in `inspect.lua`'s reply shape.
pub(crate) fn inspect(publishing: Publishing, names: &LockNames, max_holders: u32) -> Call {
    call(
        publishing,
        names,
        [Arg::Str("inspect"), Arg::Int(max_holders.into())],
    )
}
