//! Redisson's `RFairLock` ([`LockClient::fair_lock`](crate::LockClient::fair_lock) with
//! [`Layout::Redisson`](crate::Layout::Redisson)), from redisson-wire.md §3.
//!
//! | what | Redis name | |
//! |---|---|---|
//! | lock | `N` | the mutex's hash: owner → hold count, lease as its TTL (renewed by `renew.lua`) |
//! | queue | `redisson_lock_queue:{N}` | list of waiting owners, first come first |
//! | deadlines | `redisson_lock_timeout:{N}` | sorted set: waiting owner → deadline, epoch ms |
//! | a waiter's channel | `redisson_lock__channel:{N}:<owner>` | payload `0`: your turn |
//! | fencing counter | `redisson_lock_token:{N}` | no TTL (Rust grants only; Java's `RFairLock` has none) |
//!
//! **Clocks.** Redisson computes deadlines with each Java client's wall clock; our scripts use
//! the Redis server's (`TIME`), one clock for every Rust client. The server's clock and the Java
//! clients' clocks must therefore agree (NTP), as the Java clients' clocks must among themselves:
//! a skew of `s` ms moves every deadline written by one side by `s` for the other.
//!
//! **The `wait` of a Rust waiter.** Each waiter adds its `wait` to the deadline of the waiter
//! ahead of it, and takes it off every deadline behind it when it is granted or leaves; a Java
//! waiter uses its `tryLock` wait time, or `fairLockWaitTimeout` (300 000 ms by default) for
//! `lock()`. A Rust waiter always uses [`WAIT`] (300 000 ms, Redisson's default), whatever its
//! own deadline, because:
//!
//! - a Rust waiter leaves the queue by itself when it stops waiting (timeout, cancellation: the
//!   background release runs Redisson's give-up), so `wait` never has to bound its own wait;
//! - when a Java waiter ahead of it is granted, every deadline behind drops by *that* waiter's
//!   wait (300 000 ms for `lock()`): a Rust deadline built from a shorter wait would then lie in
//!   the past, and the next purge (any client's script) would drop a live waiter from the queue.
//!
//! A live Rust waiter also raises (never lowers) its own deadline at each attempt (every
//! `PLACE_TTL / 3` at most) to at least `now + wait + PLACE_TTL`, and every deadline behind it
//! in the queue by as much. So it keeps its place however long the holder keeps the lock, and
//! survives the lowering by a Java waiter's grant ahead of it (whose wait is at most
//! 300 000 ms: Java `tryLock` waits above that, or a larger `fairLockWaitTimeout`, ahead of a
//! Rust waiter can still make it lose its place). Moving the deadlines behind by as much keeps
//! the chain Redisson relies on (each waiter `wait` after the one ahead): when the Rust waiter
//! is granted or leaves and takes `wait` off them, no Java waiter behind is left with a
//! deadline in the past, so none loses its place to a live Rust waiter. Only the first two
//! waiters ever raise (deeper ones are a `wait` beyond the one ahead already): an attempt
//! costs O(1) deeper in the queue, O(queue) when it raises.
//!
//! **A Rust waiter that dies** (killed, frozen) without leaving stalls the waiters behind it
//! the way a dead Java `lock()` waiter does: once it is first and the lock is free, until its
//! deadline passes. That deadline is the chain's (each grant ahead of it takes off what each
//! link added), so the stall is at most `wait` + `PLACE_TTL` (305 s) plus what was left of the
//! lease of the holder when the queue formed, wherever it was in the queue (a dead Java
//! `lock()` waiter: 300 s plus the same). Lowering our own deadline to stall less is not safe:
//! later Java waiters chain from it, and our grant takes `wait` off theirs, which would leave
//! them a deadline in the past. A Rust waiter that times out or is cancelled leaves at once,
//! and if it was first while the lock is free, the next waiter is told so at once (Redisson's
//! own give-up does not publish).

use std::sync::LazyLock;

use redis::Script;

use crate::keys::redisson::{FAIR_WAIT_MS as WAIT, fair_queue as queue, fair_timeout as timeout};
use crate::keys::{LockNames, PLACE_TTL};
use crate::script::call::Arg;
use crate::script::{Call, Publishing, with_prelude};

/// `prelude.lua`, then `fair_common.lua`, then `script`.
fn fair_script(script: &str) -> String {
    with_prelude(&[include_str!("fair_common.lua"), script].concat())
}

/// Takes the fair lock on our turn, or keeps our place in its queue.
pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&fair_script(include_str!("fair_acquire.lua"))));
/// Releases a hold (waking the first waiter on its channel) or leaves the queue.
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&fair_script(include_str!("fair_release.lua"))));
/// Deletes the lock whoever holds it and wakes the first waiter.
pub(crate) static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(&fair_script(include_str!("fair_force_unlock.lua"))));

/// The sharded twins (`SPUBLISH`), for Redis Cluster.
#[cfg(feature = "cluster")]
pub(crate) static RELEASE_SHARDED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&super::super::sharded(&fair_script(include_str!(
        "fair_release.lua"
    ))))
});
/// See [`RELEASE_SHARDED`].
#[cfg(feature = "cluster")]
pub(crate) static FORCE_UNLOCK_SHARDED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&super::super::sharded(&fair_script(include_str!(
        "fair_force_unlock.lua"
    ))))
});

/// `fair_acquire.lua`.
pub(crate) fn acquire(names: &LockNames, owner: &str, lease_ms: u64, retention_ms: u64) -> Call {
    let keys = [
        names.key.as_str(),
        &names.fence,
        &queue(names),
        &timeout(names),
    ];
    Call::new(
        &ACQUIRE,
        &keys,
        [
            Arg::Str(owner),
            Arg::Int(lease_ms),
            Arg::Int(retention_ms),
            Arg::Int(WAIT),
            Arg::Int(PLACE_TTL.as_millis() as u64),
        ],
    )
}

/// `fair_release.lua`: release `owner`'s hold, or its place in the queue.
pub(crate) fn release(publishing: Publishing, names: &LockNames, owner: &str) -> Call {
    let keys = [
        names.key.as_str(),
        &queue(names),
        &timeout(names),
        &names.channel,
    ];
    Call::new(
        publishing.redisson_fair_release,
        &keys,
        [Arg::Str(owner), Arg::Int(WAIT)],
    )
}

/// `fair_force_unlock.lua`.
pub(crate) fn force_unlock(publishing: Publishing, names: &LockNames) -> Call {
    let keys = [
        names.key.as_str(),
        &queue(names),
        &timeout(names),
        &names.channel,
    ];
    Call::new(publishing.redisson_fair_force_unlock, &keys, [])
}

/// `inspect.lua` as is, with the deadlines set as both its queue and its places: `queued` counts
/// the waiters whose deadline has not passed. The queue list stands in for the other
/// families' keys, which `inspect.lua` reads as absent (wrong type: no writers, no capacity).
pub(crate) fn inspect(publishing: Publishing, names: &LockNames, max_holders: u32) -> Call {
    let (queue, timeout) = (queue(names), timeout(names));
    let keys = [
        names.key.as_str(),
        &names.fence,
        &names.channel,
        &timeout,
        &timeout,
        &queue,
        &queue,
    ];
    Call::new(publishing.inspect, &keys, [Arg::Int(max_holders.into())])
}
