use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "a", permits = 0, capacity = 4)]
async fn zero_permits() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", capacity = 0)]
async fn zero_capacity() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
