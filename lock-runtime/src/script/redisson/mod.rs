//! The lock family in Redisson's layout ([`Layout::Redisson`](crate::Layout::Redisson)): the
//! scripts and calls of the primitives whose keys differ from this crate's own, written from
//! Redisson's on-Redis contract (each primitive's keys, fields, channels and payloads), so that
//! Rust and Java holders exclude each other and wake each other's waiters.
//!
//! - [`fair`]: Redisson's `RFairLock`;
//! - [`rwlock`]: Redisson's `RReadWriteLock`;
//! - [`semaphore`]: Redisson's `RPermitExpirableSemaphore` and `RSemaphore`.
//!
//! The functions here pick the member's call; `None` means this crate's own script serves
//! the name (the native layout, or the mutex).
//!
//! The mutex needs none of its own: Redisson's `RLock` hash is this crate's mutex hash, so
//! `acquire.lua`, `release.lua` and `renew.lua` serve both layouts.

pub(crate) mod fair;
pub(crate) mod rwlock;
pub(crate) mod semaphore;

use super::{Call, Publishing};
use crate::Layout;
use crate::family::Family;
use crate::names::LockNames;

/// The family member `names` is used as, when Redisson's layout gives it scripts of its own.
fn member(names: &LockNames) -> Option<Family> {
    (names.layout == Layout::Redisson && names.family != Family::Mutex).then_some(names.family)
}

/// See `Call::acquire`.
pub(crate) fn acquire(
    publishing: Publishing,
    names: &LockNames,
    owner: &str,
    lease_ms: u64,
    retention_ms: u64,
) -> Option<Call> {
    match member(names)? {
        Family::Fair => Some(fair::acquire(names, owner, lease_ms, retention_ms)),
        Family::ReadWrite => Some(rwlock::acquire(names, owner, lease_ms, retention_ms)),
        Family::Semaphore { .. } => {
            semaphore::acquire(publishing, names, owner, lease_ms, retention_ms)
        }
        Family::Mutex => None,
    }
}

/// See `Call::release`.
pub(crate) fn release(publishing: Publishing, names: &LockNames, owner: &str) -> Option<Call> {
    match member(names)? {
        Family::Fair => Some(fair::release(publishing, names, owner)),
        Family::ReadWrite => Some(rwlock::release(publishing.redisson_rwlock, names, owner)),
        Family::Semaphore { .. } => semaphore::release(publishing, names, owner),
        Family::Mutex => None,
    }
}

/// See `Call::force_unlock`.
pub(crate) fn force_unlock(publishing: Publishing, names: &LockNames) -> Option<Call> {
    match member(names)? {
        Family::Fair => Some(fair::force_unlock(publishing, names)),
        Family::ReadWrite => Some(rwlock::force_unlock(publishing.redisson_rwlock, names)),
        Family::Semaphore { .. } => semaphore::force_unlock(publishing, names),
        Family::Mutex => None,
    }
}

/// See `Call::inspect`.
pub(crate) fn inspect(publishing: Publishing, names: &LockNames, max_holders: u32) -> Option<Call> {
    match member(names)? {
        Family::Fair => Some(fair::inspect(publishing, names, max_holders)),
        Family::ReadWrite => Some(rwlock::inspect(
            publishing.redisson_rwlock,
            names,
            max_holders,
        )),
        Family::Semaphore { .. } => semaphore::inspect(publishing, names, max_holders),
        Family::Mutex => None,
    }
}
