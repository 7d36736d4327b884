use lock_runtime::{LockError, distributed_lock};

// A semaphore cannot be one of several locks taken together.
#[distributed_lock(name = "supplier:<suppliers[]>", capacity = 10)]
async fn semaphore(suppliers: Vec<String>) -> Result<(), LockError> {
    let _ = suppliers;
    Ok(())
}

#[distributed_lock(name = "supplier:<suppliers[]>", permits = 2, capacity = 10, max_names = 4)]
async fn permits(suppliers: Vec<String>) -> Result<(), LockError> {
    let _ = suppliers;
    Ok(())
}

fn main() {}
