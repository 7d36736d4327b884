use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "")]
async fn empty_key() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "stock:<id")]
async fn unclosed(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "stock:<>")]
async fn empty_placeholder(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "stock:<id + 1>")]
async fn not_a_name(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "a>b")]
async fn stray_close() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = 42)]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
