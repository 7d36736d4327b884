//! More `crate = "…"` strings that do not lex or parse as a path (see also
//! bad_placeholder_names.rs): errors at the string, never a macro panic.

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "a", crate = "(")]
async fn unbalanced() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", crate = "/*")]
async fn unterminated_comment() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", crate = "")]
async fn empty() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(name = "a", crate = "r#self")]
async fn raw_self() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
