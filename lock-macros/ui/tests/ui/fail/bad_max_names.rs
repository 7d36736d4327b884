use lock_runtime::{LockError, distributed_lock};

// `max_names` needs a lock name over a collection.
#[distributed_lock(name = "stock:<sku>", max_names = 8)]
async fn one_name(sku: String) -> Result<(), LockError> {
    let _ = sku;
    Ok(())
}

#[distributed_lock(name = "stock:<skus[]>", max_names = 0)]
async fn zero(skus: Vec<String>) -> Result<(), LockError> {
    let _ = skus;
    Ok(())
}

#[distributed_lock(name = "stock:<skus[]>", max_names = 1001)]
async fn too_large(skus: Vec<String>) -> Result<(), LockError> {
    let _ = skus;
    Ok(())
}

#[distributed_lock(name = "stock:<skus[]>", max_names = "8")]
async fn string(skus: Vec<String>) -> Result<(), LockError> {
    let _ = skus;
    Ok(())
}

#[distributed_lock(name = "stock:<skus[]>", max_names = 8, max_names = 9)]
async fn twice(skus: Vec<String>) -> Result<(), LockError> {
    let _ = skus;
    Ok(())
}

fn main() {}
