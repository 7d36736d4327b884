use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(wait = "1s")]
async fn no_name() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock]
async fn no_arguments() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
