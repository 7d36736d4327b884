//! [`LockLayer`]: configuration, and the [`Layer`] that wraps services in a [`LockService`].

use std::fmt;
use std::time::Duration;

use http::StatusCode;
use http::request::Parts;
use lock_runtime::{LockClient, LockOptions};
use tower_layer::Layer;

use crate::access::{Access, Classifier};
use crate::config::Config;
use crate::name::{IntoNameSource, NameSource};
use crate::rejection::DefaultRejection;
use crate::service::{LockService, LockSettings, Primitive};

/// Serves each request while holding a distributed lock named after the request.
///
/// See the [crate docs](crate) for examples.
///
/// The lock is a mutex ([`LockClient::lock`]): one request per name at a time. In
/// [read/write mode](LockLayer::read_write) it is a read/write lock ([`LockClient::rw_lock`]):
/// reading requests of one name run together, a writing one runs alone. For *N* requests per
/// name at a time, see [`KeyedConcurrencyLimitLayer`](crate::KeyedConcurrencyLimitLayer).
///
/// | option | default |
/// |---|---|
/// | [`read_write`](LockLayer::read_write) / [`access`](LockLayer::access) | off: a mutex, every request alone |
/// | [`wait`](LockLayer::wait) for a busy lock | [`DEFAULT_WAIT`](crate::DEFAULT_WAIT) (10 s), then 423 |
/// | [`retry_after`](LockLayer::retry_after): longest `Retry-After` of a 423 | 1 s |
/// | [`lease`](LockLayer::lease) | none: the watchdog renews the lock while the request runs |
/// | [`max_hold`](LockLayer::max_hold) | none |
/// | [`hold_until_body_end`](LockLayer::hold_until_body_end) | off: released when the response head is ready |
/// | [`fenced`](LockLayer::fenced): the fencing token issued with the grant | off: on demand, [`HeldLock::fencing_token`](crate::HeldLock::fencing_token) |
/// | [`require_name`](LockLayer::require_name) | off: requests without a lock name pass unlocked |
/// | [`max_name_value_len`](LockLayer::max_name_value_len) | [`DEFAULT_MAX_NAME_VALUE_LEN`](crate::name::DEFAULT_MAX_NAME_VALUE_LEN) (128 bytes) |
/// | [`with_rejection_response`](LockLayer::with_rejection_response) | [`DefaultRejection`] |
#[must_use = "a layer does nothing until it wraps a service"]
pub struct LockLayer<N, R = DefaultRejection> {
    config: Config<N, LockSettings, R>,
}

impl<N: NameSource> LockLayer<N> {
    /// A layer taking locks on `client`, named by `names`: a [`NameSource`], or with the
    /// `axum` feature a template over the matched route's path parameters (`"stock:<id>"`).
    pub fn new<T>(client: LockClient, names: T) -> LockLayer<N>
    where
        T: IntoNameSource<Source = N>,
    {
        LockLayer::of(client, names.into_name_source(), Primitive::Mutex)
    }

    /// A layer holding `primitive`, with the default options.
    pub(crate) fn of(client: LockClient, names: N, primitive: Primitive) -> LockLayer<N> {
        let own = LockSettings {
            primitive,
            require_name: false,
            fenced: false,
        };
        LockLayer {
            config: Config::new(client, names, own),
        }
    }

    /// Changes the default rejection.
    pub(crate) fn map_rejection(
        self,
        f: impl FnOnce(DefaultRejection) -> DefaultRejection,
    ) -> Self {
        self.map(|c| c.map_rejection(f))
    }

    /// The HTTP status for a busy lock (default 423 Locked; 409 Conflict is common too).
    pub fn busy_status(self, status: StatusCode) -> Self {
        self.map_rejection(|r| r.busy_status(status))
    }

    /// The HTTP status when the lock was lost while the handler ran (default 503).
    pub fn lost_status(self, status: StatusCode) -> Self {
        self.map_rejection(|r| r.lost_status(status))
    }

    /// The longest `Retry-After` a busy (423) response suggests (default
    /// [`DEFAULT_RETRY_AFTER`](crate::rejection::DEFAULT_RETRY_AFTER), 1 s). The header says
    /// the smaller of this and the holder's remaining TTL when known, rounded up to whole
    /// seconds, never 0. (The TTL alone is no help for a watchdog-renewed lock: it always has
    /// about the watchdog timeout left.) Busy gRPC rejections carry the same wait, in
    /// milliseconds, as `grpc-retry-pushback-ms`.
    ///
    /// A custom rejection response set afterwards
    /// ([`with_rejection_response`](LockLayer::with_rejection_response)) gets the same wait
    /// from [`LockRejection::retry_after`](crate::LockRejection::retry_after).
    pub fn retry_after(self, hint: Duration) -> Self {
        self.map(|c| c.retry_after(hint))
    }
}

impl<N: NameSource + Clone, R> LockLayer<N, R> {
    /// Read/write mode: requests take a side of a read/write lock
    /// ([`LockClient::rw_lock`]) of their lock name instead of a mutex. Safe methods (`GET`,
    /// `HEAD`, `OPTIONS`, `TRACE`) take the read side and run together; every other method
    /// takes the write side and runs alone ([`Access::of_request`]). Override the choice with
    /// [`access`](LockLayer::access).
    ///
    /// Writers go first: while a writing request waits, new reading requests of the same name
    /// wait behind it, so a stream of reads cannot starve a write. A reading request that
    /// waits longer than [`wait`](LockLayer::wait) is answered as busy (423) like any other.
    ///
    /// ```
    /// # #[cfg(feature = "axum")] {
    /// use std::time::Duration;
    /// use axum::{Router, routing::get};
    /// use lock_tower::LockLayer;
    ///
    /// # async fn show() {} async fn update() {}
    /// # fn demo(locks: lock_tower::LockClient) {
    /// let app: Router = Router::new()
    ///     // GETs of one document run side by side; a PUT waits for them and runs alone.
    ///     .route("/docs/{id}", get(show).put(update))
    ///     .route_layer(LockLayer::new(locks, "doc:<id>").read_write().wait(Duration::from_secs(2)));
    /// # let _ = app; }
    /// # }
    /// ```
    ///
    /// **gRPC**: every call is a `POST`, so by method every call takes the write side (the
    /// layer then behaves like a mutex). Classify gRPC calls by their path,
    /// `/package.Service/Method`, with [`access`](LockLayer::access).
    ///
    /// **Reentrancy**: the handler runs inside its guard's scope. A handler holding the read
    /// side may take the read side of the same name again (it re-enters), but taking the write
    /// side fails at once with [`LockError::WouldDeadlock`](crate::LockError::WouldDeadlock)
    /// (an upgrade would wait for itself): classify such requests as writes.
    ///
    /// **One primitive per name**: a read/write lock lives at the same Redis key as a mutex of
    /// the same name, as another data type. Taking the name as a mutex elsewhere (another
    /// `LockLayer` not in this mode, `LockClient::lock`, `#[distributed_lock]`) fails with
    /// [`LockError::ForeignData`](crate::LockError::ForeignData) (answered 500) while the other
    /// is held. When switching a running deployment to this mode, change the template's prefix
    /// (`"doc-rw:<id>"`), so that old and new instances never meet on one key.
    pub fn read_write(self) -> Self {
        self.access(Access::of_request)
    }

    /// Read/write mode (see [`read_write`](LockLayer::read_write)) with your own classifier:
    /// `classify` looks at each request's head and says which side of the read/write lock it
    /// takes. It runs once per request that has a lock name, before the lock is taken, and
    /// must not block.
    ///
    /// A tonic service whose query methods read:
    ///
    /// ```
    /// use http::request::Parts;
    /// use lock_tower::{Access, LockLayer, name::Headers};
    ///
    /// # fn demo(locks: lock_tower::LockClient) {
    /// let layer = LockLayer::new(locks, Headers::new("stock:<x-product-id>")).access(
    ///     |call: &Parts| match call.uri.path() {
    ///         "/inventory.Inventory/GetStock" | "/inventory.Inventory/ListReservations" => {
    ///             Access::Read
    ///         }
    ///         _ => Access::Write,
    ///     },
    /// );
    /// # let _ = layer; }
    /// ```
    ///
    /// Or over HTTP, a `POST` that only computes a quote reads:
    ///
    /// ```
    /// use http::request::Parts;
    /// use lock_tower::{Access, LockLayer, name::UriPattern};
    ///
    /// # fn demo(locks: lock_tower::LockClient) {
    /// let layer = LockLayer::new(locks, UriPattern::new("/stock/{id}/{action}", "stock:<id>"))
    ///     .access(|request: &Parts| {
    ///         if request.uri.path().ends_with("/quote") {
    ///             Access::Read
    ///         } else {
    ///             Access::of_request(request)
    ///         }
    ///     });
    /// # let _ = layer; }
    /// ```
    pub fn access<F>(self, classify: F) -> Self
    where
        F: Fn(&Parts) -> Access + Send + Sync + 'static,
    {
        let primitive = Primitive::ReadWrite(Classifier::new(classify));
        self.map(|c| c.map_shared(|s| s.own.primitive = primitive))
    }

    /// How long a request waits for a busy lock before it is rejected as busy;
    /// `Duration::ZERO` tries once.
    pub fn wait(self, wait: Duration) -> Self {
        self.map(|c| c.wait(wait))
    }

    /// Holds the lock for this fixed lease instead of renewing it with the watchdog. A request
    /// still running when the lease is about to end (a safety margin of a tenth of it, at least
    /// 5 ms, before Redis lets the lock go) is dropped and answered as lost (503). At least 10 ms.
    pub fn lease(self, lease: Duration) -> Self {
        self.map(|c| c.lease(lease))
    }

    /// With the watchdog: the longest a request may hold its lock; after that the lock is
    /// released and the request dropped and answered as lost (503).
    pub fn max_hold(self, max_hold: Duration) -> Self {
        self.map(|c| c.max_hold(max_hold))
    }

    /// Replaces all lock options (a [`LockOptions`] without `wait` waits indefinitely).
    pub fn options(self, options: LockOptions) -> Self {
        self.map(|c| c.options(options))
    }

    /// Keeps the lock until the response body has ended (or is dropped), not just until the
    /// response head is ready: for handlers that stream work out in the body. The lock is
    /// released at the body's last frame.
    ///
    /// The body is covered like the handler: it is polled inside the guard's reentrancy scope
    /// (code it drives that takes the same lock with the same client re-enters), and if the
    /// lock is lost while it streams, the inner body is dropped and the next frame is an error
    /// with the [`LockError`](crate::LockError) (see [`ResponseBody`](crate::ResponseBody)),
    /// so the client sees a truncated response fail (hyper resets the stream) rather than end
    /// normally. The status and headers have been sent by then; they cannot be changed.
    pub fn hold_until_body_end(self) -> Self {
        self.map(Config::hold_until_body_end)
    }

    /// Takes each lock with its fencing token, issued in the acquire's own round trip, for
    /// services whose every request writes a fenced store (with
    /// [`lock-fence`](https://docs.rs/lock-fence) or a token column of your own).
    ///
    /// Without it the token is issued on demand: a request that never asks
    /// [`HeldLock::fencing_token`](crate::HeldLock::fencing_token) costs Redis no token at all
    /// (an uncontended grant is one `SET NX PX`), and the requests of one process waiting for a
    /// hot name take turns in memory while the process holds the lock; a request that asks pays
    /// one round trip for it. Fenced, every grant carries a token, so `fencing_token` answers
    /// without a round trip, and every hand-over between requests goes through Redis to issue
    /// a fresh one.
    ///
    /// The read/write mode and [`KeyedConcurrencyLimitLayer`](crate::KeyedConcurrencyLimitLayer)
    /// always issue their token with the grant; [`MultiLockLayer`](crate::MultiLockLayer) takes
    /// its locks fenced.
    ///
    /// ```
    /// use lock_tower::{LockLayer, name::Headers};
    ///
    /// # fn demo(locks: lock_tower::LockClient) {
    /// // Every purchase writes `stock` fenced by the product's token: issue it with the grant.
    /// let layer = LockLayer::new(locks, Headers::new("stock:<x-product-id>")).fenced();
    /// # let _ = layer; }
    /// ```
    pub fn fenced(self) -> Self {
        self.map(|c| c.map_shared(|s| s.own.fenced = true))
    }

    /// Rejects requests whose lock name cannot be built (a missing header or path parameter, a
    /// route without the parameter, a [`from_fn`](crate::name::from_fn) returning `None`) with
    /// 400 / `INVALID_ARGUMENT` ([`RejectionKind::InvalidName`](crate::RejectionKind)) instead
    /// of serving them unlocked: fail closed, so that a client cannot bypass the lock by
    /// leaving the value out.
    ///
    /// Every request through the layer then needs a lock name: in axum use
    /// `Router::route_layer` on the routes that have the parameter (with `Router::layer`,
    /// unknown paths would be answered 400 rather than 404). Without this option, a request
    /// passing unlocked is logged at debug level (`tracing`).
    pub fn require_name(self) -> Self {
        self.map(|c| c.map_shared(|s| s.own.require_name = true))
    }

    /// Renamed to [`require_name`](LockLayer::require_name).
    #[deprecated(since = "0.2.0", note = "renamed to `require_name`")]
    pub fn require_key(self) -> Self {
        self.require_name()
    }

    /// The longest value taken from a request for a lock name (a path parameter, a header), in
    /// bytes before escaping; longer ones are rejected with 400 / `INVALID_ARGUMENT`.
    pub fn max_name_value_len(self, max: usize) -> Self {
        self.map(|c| c.max_name_value_len(max))
    }

    /// Renamed to [`max_name_value_len`](LockLayer::max_name_value_len).
    #[deprecated(since = "0.2.0", note = "renamed to `max_name_value_len`")]
    pub fn max_key_value_len(self, max: usize) -> Self {
        self.max_name_value_len(max)
    }
}

impl<N, R> LockLayer<N, R> {
    fn map<R2>(
        self,
        f: impl FnOnce(Config<N, LockSettings, R>) -> Config<N, LockSettings, R2>,
    ) -> LockLayer<N, R2> {
        LockLayer {
            config: f(self.config),
        }
    }

    /// Replaces the rejection response: a
    /// [`RejectionResponse`](crate::RejectionResponse), such as a closure
    /// `Fn(LockRejection) -> Response<B>` where `B` is the inner service's response body.
    ///
    /// ```
    /// # #[cfg(feature = "axum")] {
    /// use axum::response::{IntoResponse, Response};
    /// use http::StatusCode;
    /// use lock_tower::{LockLayer, LockRejection, RejectionKind};
    ///
    /// # fn demo(locks: lock_tower::LockClient) {
    /// let layer = LockLayer::new(locks, "stock:<id>").with_rejection_response(
    ///     |rejection: LockRejection| -> Response {
    ///         match rejection.kind() {
    ///             RejectionKind::Busy => (StatusCode::CONFLICT, "try again").into_response(),
    ///             _ => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    ///         }
    ///     },
    /// );
    /// # let _ = layer; }
    /// # }
    /// ```
    pub fn with_rejection_response<R2>(self, rejection: R2) -> LockLayer<N, R2> {
        self.map(|c| c.with_rejection_response(rejection))
    }

    /// The lock client.
    pub fn client(&self) -> &LockClient {
        &self.config.shared.client
    }

    /// The name source.
    pub fn name_source(&self) -> &N {
        &self.config.shared.names
    }

    /// Renamed to [`name_source`](LockLayer::name_source).
    #[deprecated(since = "0.2.0", note = "renamed to `name_source`")]
    pub fn key_source(&self) -> &N {
        self.name_source()
    }

    /// The lock options used for every acquisition.
    pub fn lock_options(&self) -> LockOptions {
        self.config.shared.options
    }

    /// Whether the layer is in [read/write mode](LockLayer::read_write).
    pub fn is_read_write(&self) -> bool {
        matches!(self.config.shared.own.primitive, Primitive::ReadWrite(_))
    }
}

impl<S, N, R> Layer<S> for LockLayer<N, R> {
    type Service = LockService<S, N, R>;

    fn layer(&self, inner: S) -> Self::Service {
        LockService::new(inner, self.config.clone())
    }
}

impl<N, R> Clone for LockLayer<N, R> {
    fn clone(&self) -> Self {
        LockLayer {
            config: self.config.clone(),
        }
    }
}

impl<N: fmt::Debug, R> fmt::Debug for LockLayer<N, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = &self.config.shared;
        f.debug_struct("LockLayer")
            .field("client", &shared.client)
            .field("names", &shared.names)
            .field("primitive", &shared.own.primitive)
            .field("options", &shared.options)
            .field("hold_body", &shared.hold_body)
            .field("max_name_value_len", &shared.max_value_len)
            .field("require_name", &shared.own.require_name)
            .field("rejection", &std::any::type_name::<R>())
            .finish()
    }
}
