use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "a", permits = "2", capacity = 4)]
async fn a_string() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", permits = -1, capacity = 4)]
async fn negative() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", capacity = 2.5)]
async fn a_float() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", capacity = 4u8)]
async fn a_suffix() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", capacity = 4294967296)]
async fn too_large() -> Result<(), LockError> {
    Ok(())
}

const N: u32 = 2;

#[distributed_lock(name = "a", capacity = N)]
async fn a_constant() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
