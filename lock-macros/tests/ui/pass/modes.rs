//! Every lock kind (`mode`, `permits`/`capacity`) and `max_hold`, alone and with the other
//! options, in any order; the futures stay `Send`.

use std::future::Future;

use lock_runtime::{LockClient, LockError, distributed_lock};

fn require_send<F: Future + Send>(fut: F) -> F {
    fut
}

#[distributed_lock(name = "stock:<id>", mode = "read", client = locks)]
async fn read(locks: &LockClient, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(name = "stock:<id>", client = locks, mode = "write", wait = "5s")]
async fn write(locks: &LockClient, id: u64) -> Result<u64, LockError> {
    // A writer may call a reader of the same lock: it re-enters.
    read(locks, id).await
}

#[distributed_lock(mode = "fair", name = "queue", client = locks, on_lost = ignore)]
async fn fair(locks: LockClient) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "api", permits = 2, capacity = 10, client = locks, wait = "1s")]
async fn two_permits(locks: &LockClient) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "api", capacity = 10, client = locks)]
async fn one_permit(locks: &LockClient) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "api", capacity = 3u32, permits = 3u32, client = locks)]
async fn all_permits(locks: &LockClient) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "job", max_hold = "30s", client = locks)]
async fn capped(locks: &LockClient) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(
    name = "job:<id>",
    mode = "write",
    wait = "0s",
    max_hold = "1h2m3s4ms",
    on_lost = abort,
    client = locks,
)]
async fn everything(locks: &LockClient, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(name = "pool", capacity = 4294967295, permits = 4294967295, max_hold = "87600h", client = locks)]
async fn largest(locks: &LockClient) -> Result<(), LockError> {
    Ok(())
}

#[allow(dead_code)]
fn futures_are_send(locks: LockClient) {
    let _ = require_send(read(&locks, 1));
    let _ = require_send(write(&locks, 1));
    let _ = require_send(two_permits(&locks));
    let _ = require_send(one_permit(&locks));
    let _ = require_send(all_permits(&locks));
    let _ = require_send(capped(&locks));
    let _ = require_send(everything(&locks, 1));
    let _ = require_send(largest(&locks));
    let _ = tokio::spawn(fair(locks));
}

pub(super) fn main() {}
