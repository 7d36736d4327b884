//! What `#[distributed_lock]` expansions call, re-exported as `__private`. Not public API.

pub use crate::client::LockClient;
pub use crate::error::LockError;
pub use crate::options::LockOptions;
pub use tracing;

use std::future::Future;

use crate::guard::LockGuard;

/// What to do when the lock is lost while the body runs (`on_lost = …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLost {
    /// Drop the body and return [`LockError::Lost`] through the fn's error type.
    Abort,
    /// Keep running the body; the loss is only logged.
    Ignore,
}

/// Which primitive a `#[distributed_lock]` fn takes (`mode = …`, `permits`/`capacity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The default: [`LockClient::lock`].
    Mutex,
    /// `mode = "fair"`: [`LockClient::fair_lock`].
    Fair,
    /// `mode = "read"`: the read side of [`LockClient::rw_lock`].
    Read,
    /// `mode = "write"`: the write side of [`LockClient::rw_lock`].
    Write,
    /// `permits = N, capacity = M`: `N` permits of [`LockClient::semaphore`] with capacity `M`.
    Semaphore {
        /// Permits taken by each call (at least 1).
        permits: u32,
        /// The capacity used while none is stored in Redis.
        capacity: u32,
    },
}

impl Kind {
    /// Acquires `name` on `client` as this primitive.
    async fn acquire(
        self,
        client: &LockClient,
        name: &str,
        options: LockOptions,
    ) -> Result<LockGuard, LockError> {
        match self {
            Kind::Mutex => client.lock(name).acquire_with(options).await,
            Kind::Fair => client.fair_lock(name).acquire_with(options).await,
            Kind::Read => client.rw_lock(name).read().acquire_with(options).await,
            Kind::Write => client.rw_lock(name).write().acquire_with(options).await,
            Kind::Semaphore { permits, capacity } => {
                client
                    .semaphore(name, capacity)
                    .acquire_many(permits, options)
                    .await
            }
        }
    }
}

/// The return types `#[distributed_lock]` accepts: `Result<T, E>` with `E: From<LockError>`.
#[diagnostic::on_unimplemented(
    message = "a `#[distributed_lock]` fn must return `Result<T, E>` with `E: From<LockError>`, not `{Self}`",
    label = "this must be `Result<T, E>` where `E: From<LockError>`",
    note = "the lock error (wait timeout, lost lock, Redis unavailable, no default client) is returned through `E`"
)]
pub trait LockedResult: Sized {
    /// The `Err` carrying a lock error.
    fn from_lock_error(error: LockError) -> Self;
}

impl<T, E: From<LockError>> LockedResult for Result<T, E> {
    fn from_lock_error(error: LockError) -> Self {
        Err(E::from(error))
    }
}

/// The body of every `#[distributed_lock]` fn: acquire `key` on `client` as `kind` with
/// `options`, run `body` inside the guard's reentrancy scope (dropping it if the lock is lost
/// and `on_lost` is `Abort`), then release explicitly.
///
/// A release error never replaces the body's result (the body's effects have happened;
/// reporting failure would invite a retry that does them twice): it is logged. Panics and
/// cancellation (also during the final release) drop the guard, which releases in the
/// background.
pub async fn run_locked<R, F>(
    client: Result<LockClient, LockError>,
    key: String,
    kind: Kind,
    options: LockOptions,
    on_lost: OnLost,
    body: F,
) -> R
where
    R: LockedResult,
    F: Future<Output = R>,
{
    let client = match client {
        Ok(client) => client,
        Err(e) => return R::from_lock_error(e),
    };
    let guard = match kind.acquire(&client, &key, options).await {
        Ok(guard) => guard,
        Err(e) => return R::from_lock_error(e),
    };
    let out = match on_lost {
        OnLost::Abort => match guard.run(body).await {
            Ok(out) => out,
            Err(lost) => {
                // Frees whatever is left of the hold; its error repeats `lost`.
                let _ = guard.release().await;
                return R::from_lock_error(lost);
            }
        },
        OnLost::Ignore => guard.scope(body).await,
    };
    if let Err(e) = guard.release().await {
        tracing::warn!(lock = %key, error = %e, "could not release the lock after the body; returning the body's result");
    }
    out
}
