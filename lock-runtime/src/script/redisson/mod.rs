//! The lock family in Redisson's layout ([`Layout::Redisson`](crate::Layout::Redisson)): the
//! scripts and calls of the primitives whose keys differ from this crate's own, written from
//! Redisson's on-Redis contract (each primitive's keys, fields, channels and payloads), so that
//! Rust and Java holders exclude each other and wake each other's waiters.
//!
//! - [`fair`]: Redisson's `RFairLock`;
//! - [`rwlock`]: Redisson's `RReadWriteLock`;
//! - [`semaphore`]: Redisson's `RPermitExpirableSemaphore` and `RSemaphore`.
//!
//! Their keys are named in `keys/redisson.rs`; `Call`'s constructors (`script/call.rs`) pick
//! these calls by the name's scheme.
//!
//! The mutex needs none of its own: Redisson's `RLock` hash is this crate's mutex hash, so
//! `acquire.lua`, `release.lua` and `renew.lua` serve both layouts.

pub(crate) mod fair;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
