//! Visibility, attributes and doc comments survive: `missing_docs` is denied, so a lost doc
//! comment fails the build, and `pub` items must stay reachable from outside their module.
#![deny(missing_docs)]

use lock_runtime::{LockError, distributed_lock};

/// Items in a module, called from outside.
pub mod api {
    use super::*;

    /// Public: documented, with attributes kept.
    #[distributed_lock(name = "a")]
    #[inline]
    #[allow(clippy::needless_return)]
    pub async fn public() -> Result<(), LockError> {
        return Ok(());
    }

    /// Crate-visible.
    #[distributed_lock(name = "b")]
    pub(crate) async fn crate_visible() -> Result<(), LockError> {
        Ok(())
    }

    #[distributed_lock(name = "c")]
    #[cfg(any())]
    pub async fn compiled_out() -> Result<(), LockError> {
        this_does_not_exist()
    }

    #[distributed_lock(name = "d")]
    #[deprecated(note = "kept")]
    /// Deprecated, and the attribute is kept.
    pub async fn old() -> Result<(), LockError> {
        #![allow(unused_variables)]
        let unused = 1;
        Ok(())
    }
}

#[allow(deprecated)]
pub(super) fn main() {
    let _ = api::public();
    let _ = api::crate_visible();
    let _ = api::old();
}
