//! `key = "…"`, the spelling of `name = "…"` before 0.2.0, still compiles (with a deprecation
//! warning, silenced here as a caller would while migrating).
// A module of the `behaviour` test binary (`ui/pass/mod.rs` runs its `main`), linted as
// trybuild's crates were: the lints at rustc's defaults (the workspace's are for the crates' code),
// dead code allowed, no clippy.
#![allow(
    dead_code,
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    elided_lifetimes_in_paths,
    explicit_outlives_requirements,
    unused_extern_crates,
    clippy::all
)]

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
