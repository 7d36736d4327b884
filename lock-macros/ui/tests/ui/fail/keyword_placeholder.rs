//! A keyword placeholder is the raw identifier (`<type>` is the parameter `r#type`), so the
//! usual errors follow: an unknown parameter, a missing field. Errors, not panics.

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "kind:<type>")]
async fn no_such_parameter(kind: u64) -> Result<(), LockError> {
    let _ = kind;
    Ok(())
}

struct Item {
    kind: u64,
}

#[distributed_lock(name = "kind:<item.type>")]
async fn no_such_field(item: &Item) -> Result<(), LockError> {
    let _ = item.kind;
    Ok(())
}

#[distributed_lock(name = "kind:<id.0>")]
async fn not_a_tuple(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
