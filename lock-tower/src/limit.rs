//! [`KeyedConcurrencyLimitLayer`]: at most N requests per key at a time, across every
//! instance.

use std::fmt;
use std::time::Duration;

use http::StatusCode;
use lock_runtime::{LockClient, LockOptions};
use tower_layer::Layer;

use crate::layer::LockLayer;
use crate::name::{IntoNameSource, NameSource};
use crate::rejection::DefaultRejection;
use crate::service::{LockService, Primitive};

/// Serves at most `limit` requests per key at a time, counted across every instance of the
/// service: the distributed, keyed sibling of tower's process-local `ConcurrencyLimitLayer`.
///
/// Each request with a key (a lock name, from the same [name sources](crate::name) as
/// [`LockLayer`]: path parameters, headers, URI patterns, closures) takes one permit of the
/// distributed semaphore of that name ([`LockClient::semaphore`]) before the inner service is
/// called, and gives it back when the response is ready (or, with
/// [`hold_until_body_end`](KeyedConcurrencyLimitLayer::hold_until_body_end), when its body has
/// ended), when the inner service fails, or when the client goes away (the response future or
/// body is dropped). Different keys have their own permits; requests without a key pass
/// through unlimited (or, with [`require_name`](KeyedConcurrencyLimitLayer::require_name), are
/// rejected with 400 / `INVALID_ARGUMENT`).
///
/// A request that finds no permit free waits for one, woken by pub/sub when one is given back,
/// for at most [`wait`](KeyedConcurrencyLimitLayer::wait) (default [`DEFAULT_WAIT`](crate::DEFAULT_WAIT),
/// 10 s; `Duration::ZERO` sheds load at once), then is answered **429 Too Many Requests** with
/// `Retry-After` ([`RejectionKind::Limited`](crate::RejectionKind::Limited); gRPC:
/// `RESOURCE_EXHAUSTED`). Redis down or too slow: **503** / `UNAVAILABLE`. See
/// [`rejection`](crate::rejection) for the whole table.
///
/// ```no_run
/// # #[cfg(feature = "axum")] {
/// use std::time::Duration;
/// use axum::{Router, extract::Path, routing::post};
/// use lock_tower::{KeyedConcurrencyLimitLayer, LockClient};
///
/// async fn export(Path(tenant): Path<String>) -> String {
///     // At most 4 exports per tenant run at once, across all instances.
///     format!("exported {tenant}")
/// }
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let locks = LockClient::connect("redis://127.0.0.1:6379").await?;
/// let app = Router::new()
///     .route("/tenants/{tenant}/export", post(export))
///     .route_layer(
///         KeyedConcurrencyLimitLayer::new(locks, "exports:<tenant>", 4)
///             // The fifth concurrent export waits up to 500 ms for a permit, then gets 429.
///             .wait(Duration::from_millis(500)),
///     );
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
/// axum::serve(listener, app).await?;
/// # Ok(()) }
/// # }
/// ```
///
/// With tonic, take the key from metadata:
///
/// ```
/// use lock_tower::{KeyedConcurrencyLimitLayer, name::Headers};
///
/// # fn demo(locks: lock_tower::LockClient) {
/// // At most 10 calls per tenant at a time; tonic: `Server::builder().layer(limit)`.
/// let limit = KeyedConcurrencyLimitLayer::new(locks, Headers::new("calls:<x-tenant-id>"), 10);
/// # let _ = limit; }
/// ```
///
/// | option | default |
/// |---|---|
/// | [`wait`](KeyedConcurrencyLimitLayer::wait) for a free permit | [`DEFAULT_WAIT`](crate::DEFAULT_WAIT) (10 s), then 429 |
/// | [`retry_after`](KeyedConcurrencyLimitLayer::retry_after): longest `Retry-After` of a 429 | 1 s |
/// | [`limited_status`](KeyedConcurrencyLimitLayer::limited_status) | 429 Too Many Requests |
/// | [`lease`](KeyedConcurrencyLimitLayer::lease) | none: the watchdog renews the permit while the request runs |
/// | [`max_hold`](KeyedConcurrencyLimitLayer::max_hold) | none |
/// | [`hold_until_body_end`](KeyedConcurrencyLimitLayer::hold_until_body_end) | off: given back when the response head is ready |
/// | [`require_name`](KeyedConcurrencyLimitLayer::require_name) | off: requests without a key pass unlimited |
/// | [`max_name_value_len`](KeyedConcurrencyLimitLayer::max_name_value_len) | [`DEFAULT_MAX_NAME_VALUE_LEN`](crate::name::DEFAULT_MAX_NAME_VALUE_LEN) (128 bytes) |
/// | [`with_rejection_response`](KeyedConcurrencyLimitLayer::with_rejection_response) | [`DefaultRejection`] |
///
/// **Compared with tower's `ConcurrencyLimitLayer`**: that one counts the requests of one
/// process, for all keys together, and applies back-pressure through `poll_ready`. This one
/// counts per key in Redis, for every process together, and waits inside the response future
/// (the service's readiness stays the inner service's), answering 429 when the wait is over.
/// Stack both for a per-process bound as well.
///
/// **Permits are leased.** An instance that dies while serving gives its permits back when
/// their lease ends (the client's watchdog timeout, 30 s by default), so a crash never shrinks
/// the limit for good. If a permit cannot be renewed (Redis unreachable), the request is
/// dropped and answered 503 ([`lost_status`](KeyedConcurrencyLimitLayer::lost_status)), like a
/// lost lock.
///
/// **The limit at run time.** `limit` applies while no capacity is stored in Redis for the
/// key. An operator can change one key's limit for every instance at once with
/// [`Semaphore::set_capacity`](lock_runtime::Semaphore::set_capacity) on
/// `client.semaphore(key, limit)` (0 turns the key's requests away with 429), and undo it with
/// `reset_capacity`. Instances configured with different limits for one key each admit
/// requests by their own limit (against the same count), so deploy one limit per key.
///
/// **One primitive per name**: the semaphore lives at the Redis key a lock of the same name
/// would use, as another data type. Give the limit's keys their own prefix (`"exports:<id>"`
/// rather than the `"stock:<id>"` of a `LockLayer`); a name used both ways fails with
/// [`LockError::ForeignData`](crate::LockError::ForeignData) (answered 500).
///
/// Handlers find the permit in the request extensions as [`HeldLock`](crate::HeldLock) (the
/// key and the permit's fencing token: issued with the grant, or on demand for a permit passed
/// in memory from another request of this instance; [`fenced`](Self::fenced) issues every one
/// with its grant) and run inside its reentrancy scope.
#[must_use = "a layer does nothing until it wraps a service"]
pub struct KeyedConcurrencyLimitLayer<N, R = DefaultRejection> {
    inner: LockLayer<N, R>,
    limit: u32,
}

impl<N: NameSource> KeyedConcurrencyLimitLayer<N> {
    /// A layer letting at most `limit` requests per key run at once, with permits of semaphores
    /// on `client`, keyed by `names`: a [`NameSource`], or with the `axum` feature a template
    /// over the matched route's path parameters (`"exports:<tenant>"`).
    ///
    /// A `limit` of 0 closes the route: every request is answered as limited (429) at once,
    /// unless an operator stored a capacity for the key with
    /// [`Semaphore::set_capacity`](lock_runtime::Semaphore::set_capacity).
    pub fn new<T>(client: LockClient, names: T, limit: u32) -> KeyedConcurrencyLimitLayer<N>
    where
        T: IntoNameSource<Source = N>,
    {
        KeyedConcurrencyLimitLayer {
            inner: LockLayer::of(
                client,
                names.into_name_source(),
                Primitive::Semaphore { limit },
            ),
            limit,
        }
    }

    /// The HTTP status when no permit came free within the wait (default 429 Too Many
    /// Requests; 503 Service Unavailable suits load shedding too). gRPC calls get
    /// `RESOURCE_EXHAUSTED` whatever this says.
    pub fn limited_status(self, status: StatusCode) -> Self {
        self.map(|l| l.map_rejection(|r| r.limited_status(status)))
    }

    /// The HTTP status when a permit was lost while the handler ran (default 503).
    pub fn lost_status(self, status: StatusCode) -> Self {
        self.map(|l| l.lost_status(status))
    }

    /// The longest `Retry-After` a 429 suggests (default
    /// [`DEFAULT_RETRY_AFTER`](crate::rejection::DEFAULT_RETRY_AFTER), 1 s): the smaller of
    /// this and the time until the first permit holder's lease ends, rounded up to whole
    /// seconds, never 0. Limited gRPC rejections carry the same wait, in milliseconds, as
    /// `grpc-retry-pushback-ms`; a custom rejection response set afterwards gets the same wait
    /// from [`LockRejection::retry_after`](crate::LockRejection::retry_after).
    pub fn retry_after(self, hint: Duration) -> Self {
        self.map(|l| l.retry_after(hint))
    }
}

impl<N: NameSource + Clone, R> KeyedConcurrencyLimitLayer<N, R> {
    /// How long a request waits for a free permit before it is rejected as limited (429);
    /// `Duration::ZERO` tries once, which sheds load at once.
    pub fn wait(self, wait: Duration) -> Self {
        self.map(|l| l.wait(wait))
    }

    /// Holds each permit for this fixed lease instead of renewing it with the watchdog. A
    /// request still running when the lease is about to end is dropped and answered as lost
    /// (503). At least 10 ms.
    pub fn lease(self, lease: Duration) -> Self {
        self.map(|l| l.lease(lease))
    }

    /// With the watchdog: the longest a request may hold its permit; after that the permit is
    /// given back and the request dropped and answered as lost (503).
    pub fn max_hold(self, max_hold: Duration) -> Self {
        self.map(|l| l.max_hold(max_hold))
    }

    /// Replaces all options of the permit acquisitions (a [`LockOptions`] without `wait`
    /// waits indefinitely).
    pub fn options(self, options: LockOptions) -> Self {
        self.map(|l| l.options(options))
    }

    /// Takes every permit with its fencing token in the grant's own round trip
    /// ([`HeldLock::issued_token`](crate::HeldLock::issued_token) is then always `Some`), for
    /// services whose every request writes a fenced store. By default a permit passed in memory
    /// from another request of this instance gets its token on demand
    /// ([`HeldLock::fencing_token`](crate::HeldLock::fencing_token)); see
    /// [`Semaphore::fenced`](lock_runtime::Semaphore::fenced).
    pub fn fenced(self) -> Self {
        self.map(LockLayer::fenced)
    }

    /// Keeps the permit until the response body has ended (or is dropped), not just until the
    /// response head is ready: for handlers that stream their work out in the body, such as
    /// exports and downloads. See [`LockLayer::hold_until_body_end`] for how the body behaves
    /// if the permit is lost while it streams.
    pub fn hold_until_body_end(self) -> Self {
        self.map(LockLayer::hold_until_body_end)
    }

    /// Rejects requests whose key cannot be built with 400 / `INVALID_ARGUMENT` instead of
    /// serving them unlimited: fail closed, so that a client cannot bypass the limit by
    /// leaving the value out. See [`LockLayer::require_name`].
    pub fn require_name(self) -> Self {
        self.map(LockLayer::require_name)
    }

    /// The longest value taken from a request for a key (a path parameter, a header), in bytes
    /// before escaping; longer ones are rejected with 400 / `INVALID_ARGUMENT`.
    pub fn max_name_value_len(self, max: usize) -> Self {
        self.map(|l| l.max_name_value_len(max))
    }
}

impl<N, R> KeyedConcurrencyLimitLayer<N, R> {
    fn map<N2, R2>(
        self,
        f: impl FnOnce(LockLayer<N, R>) -> LockLayer<N2, R2>,
    ) -> KeyedConcurrencyLimitLayer<N2, R2> {
        KeyedConcurrencyLimitLayer {
            inner: f(self.inner),
            limit: self.limit,
        }
    }

    /// Replaces the rejection response: a [`RejectionResponse`](crate::RejectionResponse),
    /// such as a closure `Fn(LockRejection) -> Response<B>` where `B` is the inner service's
    /// response body. Rejections for want of a permit have the kind
    /// [`RejectionKind::Limited`](crate::RejectionKind::Limited).
    ///
    /// ```
    /// # #[cfg(feature = "axum")] {
    /// use axum::response::{IntoResponse, Response};
    /// use http::StatusCode;
    /// use lock_tower::{KeyedConcurrencyLimitLayer, LockRejection, RejectionKind};
    ///
    /// # fn demo(locks: lock_tower::LockClient) {
    /// let layer = KeyedConcurrencyLimitLayer::new(locks, "exports:<tenant>", 4)
    ///     .with_rejection_response(|rejection: LockRejection| -> Response {
    ///         match rejection.kind() {
    ///             RejectionKind::Limited => {
    ///                 (StatusCode::TOO_MANY_REQUESTS, "4 exports at a time, please").into_response()
    ///             }
    ///             _ => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    ///         }
    ///     });
    /// # let _ = layer; }
    /// # }
    /// ```
    pub fn with_rejection_response<R2>(self, rejection: R2) -> KeyedConcurrencyLimitLayer<N, R2> {
        self.map(|l| l.with_rejection_response(rejection))
    }

    /// The number of requests per key that may run at once (unless a capacity is stored in
    /// Redis for the key).
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The lock client.
    pub fn client(&self) -> &LockClient {
        self.inner.client()
    }

    /// The name source of the keys.
    pub fn name_source(&self) -> &N {
        self.inner.name_source()
    }

    /// The options used for every permit acquisition.
    pub fn lock_options(&self) -> LockOptions {
        self.inner.lock_options()
    }
}

impl<S, N, R> Layer<S> for KeyedConcurrencyLimitLayer<N, R> {
    type Service = LockService<S, N, R>;

    fn layer(&self, inner: S) -> Self::Service {
        self.inner.layer(inner)
    }
}

impl<N, R> Clone for KeyedConcurrencyLimitLayer<N, R> {
    fn clone(&self) -> Self {
        KeyedConcurrencyLimitLayer {
            inner: self.inner.clone(),
            limit: self.limit,
        }
    }
}

impl<N: fmt::Debug, R> fmt::Debug for KeyedConcurrencyLimitLayer<N, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedConcurrencyLimitLayer")
            .field("limit", &self.limit)
            .field("layer", &self.inner)
            .finish()
    }
}
