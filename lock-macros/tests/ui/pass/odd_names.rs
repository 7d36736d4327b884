//! More odd but valid names (see also keyword_and_unicode_fields.rs): an edition-2024 keyword
//! field (`<item.gen>` is `item.r#gen`), a raw non-keyword (`<r#x>` is `x`), a raw keyword
//! parameter written plainly, a leading underscore, names bound by patterns.

use lock_runtime::{LockClient, LockError, distributed_lock};

struct Item {
    r#gen: (u8, (u8, u8)),
}

#[distributed_lock(name = "a:<item.gen.1.0>:<r#x>:<_y>:<async>:<first>", client = locks)]
async fn odd(
    locks: &LockClient,
    item: &Item,
    x: u8,
    _y: u8,
    r#async: bool,
    (first, _): (u8, u8),
) -> Result<(), LockError> {
    let _ = (item, x, r#async, first);
    Ok(())
}

#[allow(dead_code)]
async fn call(locks: &LockClient) -> Result<(), LockError> {
    let item = Item { r#gen: (0, (1, 2)) };
    odd(locks, &item, 1, 2, true, (3, 4)).await
}

pub(super) fn main() {}
