//! [`Hold`]: what a request is served under, one guard or several, with the two things the
//! response future and the response body need of it: its reentrancy scope and its loss.

use std::future::Future;
use std::pin::Pin;

use http::Extensions;
use lock_runtime::{LockError, LockGuard, MultiLockGuard};

use crate::access::Access;
use crate::extension::{HeldLock, HeldLocks};

/// A loss signal that owns what it needs.
pub(crate) type LostFuture = Pin<Box<dyn Future<Output = LockError> + Send>>;

/// The guard (or guards) a request is served under.
#[derive(Debug)]
pub(crate) enum Hold {
    /// One lock, side or permit ([`LockLayer`](crate::LockLayer),
    /// [`KeyedConcurrencyLimitLayer`](crate::KeyedConcurrencyLimitLayer)).
    One(LockGuard),
    /// Several locks ([`MultiLockLayer`](crate::MultiLockLayer)).
    Many(MultiLockGuard),
}

impl Hold {
    /// Tells the inner service what it runs under: a [`HeldLock`] for one guard, a
    /// [`HeldLocks`] for several.
    pub(crate) fn describe(&self, extensions: &mut Extensions, access: Option<Access>) {
        match self {
            Hold::One(guard) => {
                extensions.insert(HeldLock::new(guard, access));
            }
            Hold::Many(guards) => {
                extensions.insert(HeldLocks::new(guards.guards()));
            }
        }
    }

    /// Runs `f` inside the reentrancy scope of every guard.
    pub(crate) fn sync_scope<T>(&self, f: impl FnOnce() -> T) -> T {
        match self {
            Hold::One(guard) => guard.sync_scope(f),
            Hold::Many(guards) => guards.sync_scope(f),
        }
    }

    /// Resolves with the first loss among the guards.
    pub(crate) fn lost_owned(&self) -> LostFuture {
        match self {
            Hold::One(guard) => Box::pin(guard.lost_owned()),
            Hold::Many(guards) => Box::pin(guards.lost_owned()),
        }
    }

    /// Runs `fut` inside the reentrancy scope of every guard; drops it and returns
    /// [`LockError::Lost`] as soon as any of them is lost.
    pub(crate) async fn run<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        match self {
            Hold::One(guard) => guard.run(fut).await,
            Hold::Many(guards) => guards.run(fut).await,
        }
    }
}
