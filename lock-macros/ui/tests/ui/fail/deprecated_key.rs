//! `key = "…"` is deprecated since 0.2.0: a warning at `key` (an error here, under
//! `deny(deprecated)`), never an error by itself.

#![deny(deprecated)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "stock:<id>")]
async fn reserve(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
