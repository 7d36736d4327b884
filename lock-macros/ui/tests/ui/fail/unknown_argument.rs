use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "a", timeout = "5s")]
async fn unknown() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", on_lost = retry)]
async fn unknown_on_lost() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    // The fns are still emitted.
    let _ = unknown();
    let _ = unknown_on_lost();
}
