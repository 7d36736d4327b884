use lock_runtime::{LockError, distributed_lock};

struct State {
    locks: String,
}

#[distributed_lock(name = "a", client = state.locks)]
async fn not_a_client(state: &State) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
