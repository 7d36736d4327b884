use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "a", permits = 3, capacity = 2)]
async fn more_than_capacity() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", capacity = 1, permits = 2)]
async fn capacity_first() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", permits = 2)]
async fn no_capacity() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
