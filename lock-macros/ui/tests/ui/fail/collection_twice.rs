use lock_runtime::{LockError, distributed_lock};

// At most one `[]` per lock name: across placeholders…
#[distributed_lock(name = "stock:<warehouses[]>:<skus[]>")]
async fn two_collections(warehouses: Vec<u32>, skus: Vec<String>) -> Result<(), LockError> {
    let _ = (warehouses, skus);
    Ok(())
}

// …and within one.
#[distributed_lock(name = "stock:<orders[].skus[]>")]
async fn nested_collections(orders: Vec<Vec<String>>) -> Result<(), LockError> {
    let _ = orders;
    Ok(())
}

fn main() {}
