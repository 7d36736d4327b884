use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "a", wait = "5 seconds")]
async fn unknown_unit() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", wait = "30s1m")]
async fn out_of_order() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", lease = "10")]
async fn no_unit() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", lease = "0ms")]
async fn zero_lease() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", wait = 5)]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
