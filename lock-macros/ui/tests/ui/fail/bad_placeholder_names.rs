//! Malformed placeholders: each is a compile error at the name, never a panic of the macro.
use lock_runtime::{LockError, distributed_lock};

struct Order {
    id: u64,
}

#[distributed_lock(name = "order:<order.a²>")]
async fn non_identifier_field(order: Order) -> Result<(), LockError> {
    let _ = order.id;
    Ok(())
}

#[distributed_lock(name = "order:<order.self>")]
async fn self_as_field(order: Order) -> Result<(), LockError> {
    let _ = order.id;
    Ok(())
}

#[distributed_lock(name = "order:<.id>")]
async fn missing_root(order: Order) -> Result<(), LockError> {
    let _ = order.id;
    Ok(())
}

#[distributed_lock(name = "order:<order.>")]
async fn missing_field(order: Order) -> Result<(), LockError> {
    let _ = order.id;
    Ok(())
}

#[distributed_lock(name = "order:<order..id>")]
async fn double_dot(order: Order) -> Result<(), LockError> {
    let _ = order.id;
    Ok(())
}

#[distributed_lock(name = "pair:<pair.01>")]
async fn leading_zero_index(pair: (u8, u8)) -> Result<(), LockError> {
    let _ = pair;
    Ok(())
}

#[distributed_lock(name = "pair:<pair.99999999999>")]
async fn huge_index(pair: (u8, u8)) -> Result<(), LockError> {
    let _ = pair;
    Ok(())
}

#[distributed_lock(name = "n:<0>")]
async fn number_as_root(n: u8) -> Result<(), LockError> {
    let _ = n;
    Ok(())
}

#[distributed_lock(name = "n:<Self>")]
async fn self_type_as_root(n: u8) -> Result<(), LockError> {
    let _ = n;
    Ok(())
}

#[distributed_lock(name = "n:<r#self>")]
async fn raw_self(n: u8) -> Result<(), LockError> {
    let _ = n;
    Ok(())
}

#[distributed_lock(name = "n:<_>")]
async fn underscore(n: u8) -> Result<(), LockError> {
    let _ = n;
    Ok(())
}

#[distributed_lock(name = "n:<n<m>")]
async fn nested_open(n: u8) -> Result<(), LockError> {
    let _ = n;
    Ok(())
}

#[distributed_lock(name = "n:<n>>")]
async fn stray_close_after_placeholder(n: u8) -> Result<(), LockError> {
    let _ = n;
    Ok(())
}

#[distributed_lock(name = "n:<1st>")]
async fn starts_with_digit(n: u8) -> Result<(), LockError> {
    let _ = n;
    Ok(())
}

#[distributed_lock(name = "n:<n.\u{200b}>")]
async fn zero_width_space(n: u8) -> Result<(), LockError> {
    let _ = n;
    Ok(())
}

#[distributed_lock(name = "n:<n>", crate = "lock²runtime")]
async fn bad_crate_path(n: u8) -> Result<(), LockError> {
    let _ = n;
    Ok(())
}

#[distributed_lock(name = "n:<n>", crate = "\"")]
async fn unlexable_crate_path(n: u8) -> Result<(), LockError> {
    let _ = n;
    Ok(())
}

fn main() {}
