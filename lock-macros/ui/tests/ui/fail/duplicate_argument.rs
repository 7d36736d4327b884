use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "a", wait = "1s", wait = "2s")]
async fn twice() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", name = "b")]
async fn two_names() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
