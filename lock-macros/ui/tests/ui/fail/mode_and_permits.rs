use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "a", mode = "read", permits = 1, capacity = 4)]
async fn read_semaphore() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", capacity = 4, mode = "fair")]
async fn fair_semaphore() -> Result<(), LockError> {
    Ok(())
}

// Every rule between the arguments is reported at once.
#[distributed_lock(name = "a", mode = "write", permits = 5)]
async fn write_permits_without_capacity() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
