use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "a")]
fn not_async() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    // The fn is still emitted, so this call type-checks.
    let _: Result<(), LockError> = not_async();
}
