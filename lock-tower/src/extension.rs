//! [`HeldLock`]: the request extension that tells the inner service which lock it runs under.

use std::sync::Arc;

use crate::access::Access;

/// The lock a request is being served under, inserted into the request's extensions before the
/// inner service is called.
///
/// Handlers use it to pass the fencing token to the storage they write (axum:
/// `Extension(held): Extension<HeldLock>`; tonic: `request.extensions().get::<HeldLock>()`).
///
/// Under a [`KeyedConcurrencyLimitLayer`](crate::KeyedConcurrencyLimitLayer) it describes the
/// permit the request holds: the semaphore's name, and the permit's fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLock {
    name: Arc<str>,
    fencing_token: u64,
    access: Option<Access>,
}

impl HeldLock {
    pub(crate) fn new(name: &str, fencing_token: u64, access: Option<Access>) -> HeldLock {
        HeldLock {
            name: name.into(),
            fencing_token,
            access,
        }
    }

    /// The lock name (for example `stock:42`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token of this acquisition: strictly increasing per lock name. Send it with
    /// every write and have the storage reject writes with an older token.
    ///
    /// Both sides of a read/write lock share one counter: a writer's token is above every
    /// earlier reader's and writer's of the same name.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// In [read/write mode](crate::LockLayer::read_write), the side the request holds; `None`
    /// under a mutex or a permit.
    pub fn access(&self) -> Option<Access> {
        self.access
    }
}
