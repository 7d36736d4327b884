//! `MultiLock`: one guard over several locks, all or nothing, deadlock-free.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::guard::{LossFuture, first_loss};
use crate::hold::Held;
use crate::scope;
use crate::{Lock, LockError, LockGuard, LockOptions};

/// Several locks taken together: all of them or none.
///
/// The locks are always taken in one global order: by Redis key (prefix included), and the
/// same key on two deployments by [deployment identity](crate::LockClient::deployment_id). Every
/// process derives the same order, whatever order the locks were listed in and whichever client
/// instances they came from, so `MultiLock`s that share locks, in one process or in many, never
/// wait for each other in a cycle. The locks may belong to different clients (different Redis
/// deployments, or different prefixes on one). If one lock cannot be had within the wait, the
/// ones already taken are released and the error is returned.
///
/// Where the order rests on the identities (the same key on two deployments), processes agree
/// only if they derive the same identity for each deployment: one reaching a server as
/// `redis://cache:6379` and another as `redis://10.0.0.5:6379` do not; give such deployments an
/// explicit [`deployment_id`](crate::LockClientBuilder::deployment_id).
///
/// ```no_run
/// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
/// use std::time::Duration;
/// use lock_runtime::MultiLock;
///
/// let both = MultiLock::new([locks.lock("account:1"), locks.lock("account:2")])?;
/// let guard = both.try_acquire(Duration::from_secs(5)).await?;
/// guard.run(async { /* move money between the two accounts */ }).await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MultiLock {
    locks: Vec<Lock>,
}

impl MultiLock {
    /// The locks to take together. At least one lock is needed.
    ///
    /// Duplicates are taken once: two locks are the same when they have the same Redis key on
    /// the same deployment (equal [`deployment_id`](crate::LockClient::deployment_id)), even if
    /// they come from different clients; the first one listed is kept. An invalid name is
    /// reported as [`LockError::InvalidName`].
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> Result<MultiLock, LockError> {
        let mut locks: Vec<Lock> = locks.into_iter().collect();
        if locks.is_empty() {
            return Err(LockError::InvalidConfig(
                "a MultiLock needs at least one lock".into(),
            ));
        }
        for lock in &locks {
            lock.validated()?;
        }
        locks.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
        locks.dedup_by(|a, b| a.order_key() == b.order_key());
        Ok(MultiLock { locks })
    }

    /// The locks, in the order they are taken (duplicates removed).
    pub fn locks(&self) -> &[Lock] {
        &self.locks
    }

    /// Waits as long as it takes for all of them.
    pub async fn acquire(&self) -> Result<MultiLockGuard, LockError> {
        self.acquire_with(LockOptions::new()).await
    }

    /// Waits at most `wait` in total.
    pub async fn try_acquire(&self, wait: Duration) -> Result<MultiLockGuard, LockError> {
        self.acquire_with(LockOptions::new().wait(wait)).await
    }

    /// Takes every lock with `opts`; `opts.wait` bounds the whole acquisition. On any error the
    /// locks already taken are released before the error is returned.
    pub async fn acquire_with(&self, opts: LockOptions) -> Result<MultiLockGuard, LockError> {
        // A wait too long to represent (`Duration::MAX`) is a wait without a deadline.
        let deadline = opts.wait.and_then(|w| Instant::now().checked_add(w));
        let mut guards = Vec::with_capacity(self.locks.len());
        for lock in &self.locks {
            let mut each = opts;
            each.wait = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match lock.acquire_with(each).await {
                Ok(guard) => guards.push(guard),
                Err(e) => {
                    for guard in guards {
                        // Best effort: a failure here is retried by the background releaser.
                        let _ = guard.release().await;
                    }
                    return Err(e);
                }
            }
        }
        Ok(MultiLockGuard { guards })
    }
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.locks.iter().map(Lock::name))
            .finish()
    }
}

/// Proof of holding every lock of a [`MultiLock`]. Dropping it releases them all in the
/// background.
#[must_use = "the locks are released as soon as the guard is dropped"]
#[derive(Debug)]
pub struct MultiLockGuard {
    guards: Vec<LockGuard>,
}

impl MultiLockGuard {
    /// The guard of each lock, in acquisition order (for fencing tokens).
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Whether any of the locks is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Resolves with the first loss among the locks.
    pub async fn lost(&self) -> LockError {
        first_loss(
            self.guards
                .iter()
                .map(|g| Box::pin(g.lost()) as LossFuture<'_>),
        )
        .await
    }

    /// Like [`lost`](MultiLockGuard::lost), but the future owns what it needs (`'static`), so
    /// it can be stored next to the guard (a response body that must stop on a loss).
    pub fn lost_owned(&self) -> impl Future<Output = LockError> + Send + 'static {
        first_loss(
            self.guards
                .iter()
                .map(|g| Box::pin(g.lost_owned()) as LossFuture<'static>),
        )
    }

    /// Runs `fut` inside the reentrancy scope of every lock: taking one of them again inside
    /// it re-enters without a round trip. The locks share one scope, so `fut` need not be
    /// `Send` and the depth does not grow with the number of locks.
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        scope::enter_all(self.helds(), fut)
    }

    /// Runs the synchronous `f` inside the reentrancy scope of every lock, like
    /// [`scope`](MultiLockGuard::scope) does for a future (for poll-based code).
    pub fn sync_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        scope::enter_sync_all(self.helds(), f)
    }

    /// Like [`scope`](MultiLockGuard::scope), but drops `fut` and returns [`LockError::Lost`]
    /// if any of the locks is lost meanwhile (or already was).
    pub async fn run<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        if let Some(guard) = self.guards.iter().find(|g| g.is_lost()) {
            return Err(guard.lost().await);
        }
        crate::guard::unless_lost(self.scope(fut), self.lost()).await
    }

    fn helds(&self) -> Vec<Arc<Held>> {
        self.guards.iter().map(|g| g.held.clone()).collect()
    }

    /// Releases every lock; returns the first error, after trying them all.
    pub async fn release(self) -> Result<(), LockError> {
        let mut first = Ok(());
        for guard in self.guards {
            if let Err(e) = guard.release().await
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }
}
