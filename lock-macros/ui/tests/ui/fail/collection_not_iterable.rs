use lock_runtime::{LockError, distributed_lock};

pub struct Item {
    pub sku: String,
}

pub struct Cart {
    pub id: u64,
    pub items: Vec<Item>,
}

// `cart.id` is a number, not a collection.
#[distributed_lock(name = "cart:<cart.id[]>")]
async fn scalar(cart: &Cart) -> Result<(), LockError> {
    let _ = cart;
    Ok(())
}

// `cart` itself is not a collection (its `items` are).
#[distributed_lock(name = "stock:<cart[].sku>")]
async fn struct_not_items(cart: &Cart) -> Result<(), LockError> {
    let _ = cart;
    Ok(())
}

// The elements are formatted with `Display`: an `Item` is not.
#[distributed_lock(name = "stock:<cart.items[]>")]
async fn element_not_display(cart: &Cart) -> Result<(), LockError> {
    let _ = cart;
    Ok(())
}

fn main() {}
