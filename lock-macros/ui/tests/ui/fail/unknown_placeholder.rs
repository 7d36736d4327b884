use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "stock:<idd>")]
async fn typo(id: u64, qty: u32) -> Result<(), LockError> {
    let _ = (id, qty);
    Ok(())
}

#[distributed_lock(name = "tenant:<self.tenant>")]
async fn no_self(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

struct Order {
    id: u64,
}

#[distributed_lock(name = "order:<order.number>")]
async fn no_such_field(order: &Order) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
