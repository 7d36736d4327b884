//! [`Hold`]: what a request is served under, one guard or several, with the two things the
//! response future and the response body need of it: its reentrancy scope and its loss.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

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
    fn guards(&self) -> &[LockGuard] {
        match self {
            Hold::One(guard) => std::slice::from_ref(guard),
            Hold::Many(guards) => guards.guards(),
        }
    }

    /// Tells the inner service what it runs under: a [`HeldLock`] for one guard, a
    /// [`HeldLocks`] for several.
    pub(crate) fn describe(&self, extensions: &mut Extensions, access: Option<Access>) {
        match self {
            Hold::One(guard) => {
                extensions.insert(HeldLock::new(guard.name(), guard.fencing_token(), access));
            }
            Hold::Many(guards) => {
                extensions.insert(HeldLocks::new(guards.guards()));
            }
        }
    }

    /// Runs `f` inside the reentrancy scope of every guard.
    pub(crate) fn sync_scope<T>(&self, f: impl FnOnce() -> T) -> T {
        fn nest<T>(guards: &[LockGuard], f: impl FnOnce() -> T) -> T {
            match guards.split_first() {
                None => f(),
                Some((first, rest)) => first.sync_scope(|| nest(rest, f)),
            }
        }
        nest(self.guards(), f)
    }

    /// Resolves with the first loss among the guards.
    pub(crate) fn lost_owned(&self) -> LostFuture {
        match self {
            Hold::One(guard) => Box::pin(guard.lost_owned()),
            Hold::Many(guards) => {
                let mut losses: Vec<LostFuture> = guards
                    .guards()
                    .iter()
                    .map(|g| Box::pin(g.lost_owned()) as LostFuture)
                    .collect();
                Box::pin(std::future::poll_fn(move |cx| first_ready(&mut losses, cx)))
            }
        }
    }

    /// Runs `fut` inside the reentrancy scope of every guard; drops it and returns
    /// [`LockError::Lost`] as soon as any of them is lost (checked before every poll of `fut`).
    pub(crate) async fn run<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        match self {
            // The runtime's own, for the single guard.
            Hold::One(guard) => guard.run(fut).await,
            Hold::Many(_) => {
                let mut lost = self.lost_owned();
                let mut fut = std::pin::pin!(fut);
                std::future::poll_fn(|cx| {
                    if let Poll::Ready(error) = lost.as_mut().poll(cx) {
                        return Poll::Ready(Err(error));
                    }
                    self.sync_scope(|| fut.as_mut().poll(cx)).map(Ok)
                })
                .await
            }
        }
    }
}

fn first_ready(losses: &mut [LostFuture], cx: &mut Context<'_>) -> Poll<LockError> {
    for loss in losses {
        if let Poll::Ready(error) = loss.as_mut().poll(cx) {
            return Poll::Ready(error);
        }
    }
    Poll::Pending
}
