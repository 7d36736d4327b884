use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "")]
async fn empty_name() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "stock:<id")]
async fn unclosed(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(name = "stock:<>")]
async fn empty_placeholder(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(name = "stock:<id + 1>")]
async fn not_a_name(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(name = "a>b")]
async fn stray_close() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = 42)]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
