use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "unit")]
async fn returns_unit() {}

#[distributed_lock(name = "tuple")]
async fn returns_tuple() -> (u32, LockError) {
    todo!()
}

#[distributed_lock(name = "option")]
async fn returns_option() -> Option<u32> {
    Some(1)
}

fn main() {}
