//! [`HeldLock`]: the request extension that tells the inner service which lock it runs under.

use std::sync::Arc;

/// The lock a request is being served under, inserted into the request's extensions before the
/// inner service is called.
///
/// Handlers use it to pass the fencing token to the storage they write (axum:
/// `Extension(held): Extension<HeldLock>`; tonic: `request.extensions().get::<HeldLock>()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLock {
    name: Arc<str>,
    fencing_token: u64,
}

impl HeldLock {
    pub(crate) fn new(name: &str, fencing_token: u64) -> HeldLock {
        HeldLock {
            name: name.into(),
            fencing_token,
        }
    }

    /// The lock name (for example `stock:42`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token of this acquisition: strictly increasing per lock name. Send it with
    /// every write and have the storage reject writes with an older token.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }
}
