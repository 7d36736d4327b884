//! What `#[distributed_lock]` expansions call, re-exported as `__private`. Not public API.

pub use crate::client::LockClient;
pub use crate::error::LockError;
pub use crate::options::LockOptions;
pub use tracing;

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::ops::Deref;

use crate::guard::LockGuard;
use crate::lock::Lock;
use crate::multi::{MultiLock, MultiLockGuard};

/// Named by the expansion of `#[distributed_lock(key = "…")]`, the deprecated spelling of
/// `name = "…"`, so that its use warns at the `key` argument, as the use of a deprecated item
/// (the way to warn from a proc macro on stable Rust). `#[allow(deprecated)]` silences it.
#[deprecated(
    since = "0.2.0",
    note = "`key = \"…\"` in `#[distributed_lock]` is renamed: use `name = \"…\"`"
)]
#[allow(non_upper_case_globals)]
pub const distributed_lock_key_argument: () = ();

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
    /// `fenced`: [`LockClient::lock`] taken [`fenced`](Lock::fenced), its token issued with
    /// the grant.
    FencedMutex,
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
    /// The lock `name` on `client` as this primitive, its metrics under `group` (for a
    /// [`MultiLock`], and for the primitives other than a semaphore); a semaphore cannot
    /// be one of several locks taken together (the macro refuses `capacity` with a collection
    /// template, so this is never reached from generated code).
    fn lock(self, client: &LockClient, name: &str, group: &'static str) -> Result<Lock, LockError> {
        let lock = match self {
            Kind::Mutex => client.lock(name),
            Kind::FencedMutex => client.lock(name).fenced(),
            Kind::Fair => client.fair_lock(name),
            Kind::Read => client.rw_lock(name).read().clone(),
            Kind::Write => client.rw_lock(name).write().clone(),
            Kind::Semaphore { .. } => {
                return Err(LockError::InvalidConfig(
                    "a semaphore cannot be taken for several names at once".into(),
                ));
            }
        };
        Ok(lock.group(group))
    }

    /// Acquires `name` on `client` as this primitive, recorded in the metrics under `group`.
    async fn acquire(
        self,
        client: &LockClient,
        name: &str,
        group: &'static str,
        options: LockOptions,
    ) -> Result<LockGuard, LockError> {
        match self {
            Kind::Semaphore { permits, capacity } => {
                client
                    .semaphore(name, capacity)
                    .group(group)
                    .acquire_many(permits, options)
                    .await
            }
            _ => self.lock(client, name, group)?.acquire_with(options).await,
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
/// `options` (its metrics under `group`, the name template), run `body` inside the guard's reentrancy scope (dropping it if the lock is lost
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
    group: &'static str,
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
    let guard = match kind.acquire(&client, &key, group, options).await {
        Ok(guard) => guard,
        Err(e) => return R::from_lock_error(e),
    };
    run_guarded(guard, on_lost, body, |e| {
        tracing::warn!(lock = %key, error = %e, "could not release the lock after the body; returning the body's result");
    })
    .await
}

/// The lock names of one call whose template runs over a collection (`<cart.items[].sku>`):
/// distinct, sorted, with the template and the most names allowed (`max_names`).
///
/// Displays as the names separated by `, ` (the `lock` field of the call's span).
#[derive(Debug)]
pub struct LockNameSet {
    template: &'static str,
    max: usize,
    names: BTreeSet<String>,
}

impl LockNameSet {
    /// No names yet, for `template` (as written in the attribute) and at most `max` names.
    pub fn new(template: &'static str, max: usize) -> LockNameSet {
        LockNameSet {
            template,
            max,
            names: BTreeSet::new(),
        }
    }

    /// Adds the name formatted for one element; a name already added is kept once.
    pub fn insert(&mut self, name: String) {
        self.names.insert(name);
    }

    /// The locks of `kind` to take, or the error that stops the call before anything is taken:
    /// no names ([`LockError::InvalidName`] with the template), more than `max`
    /// ([`LockError::TooManyNames`]), or an invalid name.
    fn multi_lock(
        &self,
        client: &LockClient,
        kind: Kind,
        group: &'static str,
    ) -> Result<MultiLock, LockError> {
        if self.names.is_empty() {
            return Err(LockError::invalid_name(
                self.template,
                "the collection in the template is empty, so there is no lock name to take",
            ));
        }
        if self.names.len() > self.max {
            return Err(LockError::TooManyNames {
                count: self.names.len(),
                max: self.max,
            });
        }
        let locks = self
            .names
            .iter()
            .map(|name| kind.lock(client, name, group))
            .collect::<Result<Vec<Lock>, LockError>>()?;
        MultiLock::new(locks)
    }
}

impl fmt::Display for LockNameSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in self.names.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

/// The collection before `[]` in a template, by reference: `Collection(&cart.items)`. The
/// expansion calls `(&&&Collection(&path)).lock_name_items()`, so method resolution picks the
/// first of [`ByRef`] (`&path` iterates: `Vec`, arrays, sets, maps), [`ByDeref`] (`&*path`
/// iterates: `&[T]`, `&HashSet<T>`, `&mut Vec<T>`, `Arc<Vec<T>>`) and the expansion's own
/// fallback, whose unmet bound is the "not a collection" compile error naming the path.
#[derive(Debug)]
pub struct Collection<T>(pub T);

/// `&path` is iterable: its items.
pub trait ByRef {
    /// The iterator over the collection's elements.
    type Iter: Iterator;
    /// Iterates over the collection by reference.
    fn lock_name_items(self) -> Self::Iter;
}

impl<'a, C: ?Sized> ByRef for &&&Collection<&'a C>
where
    &'a C: IntoIterator,
{
    type Iter = <&'a C as IntoIterator>::IntoIter;

    fn lock_name_items(self) -> Self::Iter {
        self.0.into_iter()
    }
}

/// `path` is a reference or smart pointer to something `&` iterates: its items.
pub trait ByDeref {
    /// The iterator over the collection's elements.
    type Iter: Iterator;
    /// Iterates over what the path points to, by reference.
    fn lock_name_items(self) -> Self::Iter;
}

impl<'a, D: ?Sized + Deref> ByDeref for &&Collection<&'a D>
where
    &'a D::Target: IntoIterator,
{
    type Iter = <&'a D::Target as IntoIterator>::IntoIter;

    fn lock_name_items(self) -> Self::Iter {
        (**self.0).into_iter()
    }
}

/// The body of a `#[distributed_lock]` fn whose template runs over a collection: take every
/// name of `names` as `kind` on `client` through one [`MultiLock`] (one global order, all or
/// nothing, `options.wait` bounding the whole acquisition), run `body` inside the reentrancy
/// scope of every lock (dropping it if any lock is lost and `on_lost` is `Abort`), then
/// release them all. Errors and release failures are treated as in [`run_locked`].
pub async fn run_locked_all<R, F>(
    client: Result<LockClient, LockError>,
    names: LockNameSet,
    kind: Kind,
    group: &'static str,
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
    let guard = match names.multi_lock(&client, kind, group) {
        Ok(locks) => match locks.acquire_with(options).await {
            Ok(guard) => guard,
            Err(e) => return R::from_lock_error(e),
        },
        Err(e) => return R::from_lock_error(e),
    };
    run_guarded(guard, on_lost, body, |e| {
        tracing::warn!(locks = %names, error = %e, "could not release the locks after the body; returning the body's result");
    })
    .await
}

/// What the body of a `#[distributed_lock]` fn runs under: the guard of its lock
/// ([`run_locked`]) or of all the locks of its names ([`run_locked_all`]).
trait BodyGuard: Sized {
    /// Runs `body` inside the reentrancy scope of every lock held.
    fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output>;

    /// Like [`scope`](BodyGuard::scope), but drops `body` and returns [`LockError::Lost`] if a
    /// lock is lost (or already was).
    fn run<F: Future>(&self, body: F) -> impl Future<Output = Result<F::Output, LockError>>;

    /// Releases every lock held.
    fn release(self) -> impl Future<Output = Result<(), LockError>>;
}

impl BodyGuard for LockGuard {
    fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output> {
        LockGuard::scope(self, body)
    }

    fn run<F: Future>(&self, body: F) -> impl Future<Output = Result<F::Output, LockError>> {
        LockGuard::run(self, body)
    }

    fn release(self) -> impl Future<Output = Result<(), LockError>> {
        LockGuard::release(self)
    }
}

impl BodyGuard for MultiLockGuard {
    fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output> {
        MultiLockGuard::scope(self, body)
    }

    fn run<F: Future>(&self, body: F) -> impl Future<Output = Result<F::Output, LockError>> {
        MultiLockGuard::run(self, body)
    }

    fn release(self) -> impl Future<Output = Result<(), LockError>> {
        MultiLockGuard::release(self)
    }
}

/// What [`run_locked`] and [`run_locked_all`] do once the locks are taken: run `body` under
/// `guard` as `on_lost` says, then release, handing a release error to `release_failed`.
async fn run_guarded<R, F, G>(
    guard: G,
    on_lost: OnLost,
    body: F,
    release_failed: impl FnOnce(LockError),
) -> R
where
    R: LockedResult,
    F: Future<Output = R>,
    G: BodyGuard,
{
    let out = match on_lost {
        OnLost::Abort => match guard.run(body).await {
            Ok(out) => out,
            Err(lost) => {
                // Frees whatever is left of the holds; its error repeats `lost`.
                let _ = guard.release().await;
                return R::from_lock_error(lost);
            }
        },
        OnLost::Ignore => guard.scope(body).await,
    };
    if let Err(e) = guard.release().await {
        release_failed(e);
    }
    out
}
