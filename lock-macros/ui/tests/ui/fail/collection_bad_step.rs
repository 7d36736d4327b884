use lock_runtime::{LockError, distributed_lock};

// `[]` must follow a path.
#[distributed_lock(name = "stock:<[]>")]
async fn no_path(skus: Vec<String>) -> Result<(), LockError> {
    let _ = skus;
    Ok(())
}

// Only `.field` (or the end) may follow `[]`.
#[distributed_lock(name = "stock:<skus[]sku>")]
async fn text_after(skus: Vec<String>) -> Result<(), LockError> {
    let _ = skus;
    Ok(())
}

// Nothing between the brackets: no spaces…
#[distributed_lock(name = "stock:<skus[ ]>")]
async fn space_inside(skus: Vec<String>) -> Result<(), LockError> {
    let _ = skus;
    Ok(())
}

// …and no index.
#[distributed_lock(name = "stock:<skus[0]>")]
async fn index_inside(skus: Vec<String>) -> Result<(), LockError> {
    let _ = skus;
    Ok(())
}

#[distributed_lock(name = "stock:<cart.[]>")]
async fn dot_before(cart: Vec<String>) -> Result<(), LockError> {
    let _ = cart;
    Ok(())
}

#[distributed_lock(name = "stock:<skus[>")]
async fn unclosed(skus: Vec<String>) -> Result<(), LockError> {
    let _ = skus;
    Ok(())
}

#[distributed_lock(name = "stock:<skus]>")]
async fn unmatched(skus: Vec<String>) -> Result<(), LockError> {
    let _ = skus;
    Ok(())
}

// The path before `[]` must name a parameter.
#[distributed_lock(name = "stock:<carts[].sku>")]
async fn unknown_parameter(cart: Vec<String>) -> Result<(), LockError> {
    let _ = cart;
    Ok(())
}

fn main() {}
