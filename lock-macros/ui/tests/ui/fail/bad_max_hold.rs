use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "a", max_hold = "30 s")]
async fn bad_unit() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", max_hold = "0s")]
async fn zero() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", max_hold = "87601h")]
async fn too_long() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", max_hold = 30)]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", lease = "5ms")]
async fn lease_too_short() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
