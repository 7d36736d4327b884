use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "a", wait = "1s", wait = "2s")]
async fn twice() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", key = "b")]
async fn two_keys() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
