//! The rest of the lock family against a real `redis-server` (one per test): semaphores,
//! read/write locks, fair locks and multi-locks. Each module was a test binary of its own.

#[path = "../common/mod.rs"]
mod common;

mod fair;
mod multilock;
mod rwlock;
mod semaphore;
