//! `key = "…"`, the spelling of `name = "…"` before 0.2.0, still compiles (with a deprecation
//! warning, silenced here as a caller would while migrating).

use lock_runtime::{LockError, distributed_lock};

#[allow(deprecated)]
#[distributed_lock(key = "stock:<id>", wait = "1s")]
async fn reserve(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

struct Stock;

impl Stock {
    // A parameter called `key` is not confused with anything the expansion adds.
    #[allow(deprecated)]
    #[distributed_lock(wait = "0s", key = "stock:<key>")]
    async fn take(&self, key: &str) -> Result<usize, LockError> {
        Ok(key.len())
    }
}

pub(super) fn main() {
    let _ = reserve(1);
    let _ = Stock.take("a");
}
