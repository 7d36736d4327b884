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

/// The locks a request is being served under by a [`MultiLockLayer`](crate::MultiLockLayer),
/// inserted into the request's extensions before the inner service is called: each lock name
/// with its fencing token, in the order the locks were taken (the global order of
/// [`MultiLock`](lock_runtime::MultiLock), duplicates removed). Cheap to clone.
///
/// Handlers pass each token to the storage they write, so that a write made under a lock that
/// has since been lost is refused (axum: `Extension(held): Extension<HeldLocks>`; tonic:
/// `request.extensions().get::<HeldLocks>()`).
///
/// ```
/// # fn demo(held: lock_tower::HeldLocks) {
/// for (name, token) in held.iter() {
///     println!("{name} is ours with fencing token {token}");
/// }
/// if let Some(token) = held.fencing_token("stock:sku-1") {
///     // UPDATE stock SET … WHERE sku = 'sku-1' AND fence < token
///     # let _ = token;
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLocks {
    locks: Arc<[(Arc<str>, u64)]>,
}

impl HeldLocks {
    pub(crate) fn new(guards: &[lock_runtime::LockGuard]) -> HeldLocks {
        HeldLocks {
            locks: guards
                .iter()
                .map(|g| (Arc::from(g.name()), g.fencing_token()))
                .collect(),
        }
    }

    /// The fencing token of the lock named `name` (for example `stock:sku-1`), or `None` when
    /// the request does not hold it. (A linear search: a request holds at most
    /// [`max_names`](crate::MultiLockLayer::max_names) locks.)
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        self.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, token)| token)
    }

    /// Each lock name with its fencing token, in the order the locks were taken.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, u64)> + '_ {
        self.locks.iter().map(|(name, token)| (&**name, *token))
    }

    /// The lock names, in the order the locks were taken.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.locks.iter().map(|(name, _)| &**name)
    }

    /// How many locks the request holds (at least one).
    pub fn len(&self) -> usize {
        self.locks.len()
    }

    /// Whether the request holds no lock: never for a request served by a
    /// [`MultiLockLayer`](crate::MultiLockLayer).
    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }
}
