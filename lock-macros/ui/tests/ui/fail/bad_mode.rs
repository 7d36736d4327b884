use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "a", mode = "exclusive")]
async fn unknown_mode() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", mode = "Read")]
async fn wrong_case() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", mode = read)]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", mode = "read", mode = "write")]
async fn twice() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
