//! `key` is the deprecated spelling of `name`: giving both, or `key` twice, is an error.

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "a", key = "b")]
async fn name_then_key() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", name = "b")]
async fn key_then_name() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", key = "b")]
async fn key_twice() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
