//! [`LockLayer`]: configuration, and the [`Layer`] that wraps services in a [`LockService`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use lock_runtime::{LockClient, LockOptions};
use tower_layer::Layer;

use crate::key::{DEFAULT_MAX_KEY_VALUE_LEN, IntoKeySource, KeySource};
use crate::rejection::DefaultRejection;
use crate::service::{LockService, Shared};

/// How long a request waits for a busy lock unless [`LockLayer::wait`] says otherwise.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// Serves each request while holding a distributed lock named after the request.
///
/// See the [crate docs](crate) for examples.
///
/// | option | default |
/// |---|---|
/// | [`wait`](LockLayer::wait) for a busy lock | [`DEFAULT_WAIT`] (10 s), then 423 |
/// | [`retry_after`](LockLayer::retry_after): longest `Retry-After` of a 423 | 1 s |
/// | [`lease`](LockLayer::lease) | none: the watchdog renews the lock while the request runs |
/// | [`max_hold`](LockLayer::max_hold) | none |
/// | [`hold_until_body_end`](LockLayer::hold_until_body_end) | off: released when the response head is ready |
/// | [`require_key`](LockLayer::require_key) | off: requests without a key pass unlocked |
/// | [`max_key_value_len`](LockLayer::max_key_value_len) | [`DEFAULT_MAX_KEY_VALUE_LEN`] (128 bytes) |
/// | [`with_rejection_response`](LockLayer::with_rejection_response) | [`DefaultRejection`] |
#[must_use = "a layer does nothing until it wraps a service"]
pub struct LockLayer<K, R = DefaultRejection> {
    shared: Arc<Shared<K>>,
    rejection: Arc<R>,
}

impl<K: KeySource> LockLayer<K> {
    /// A layer taking locks on `client`, named by `key`: a [`KeySource`], or with the `axum`
    /// feature a template over the matched route's path parameters (`"stock:<id>"`).
    pub fn new<T>(client: LockClient, key: T) -> LockLayer<K>
    where
        T: IntoKeySource<Source = K>,
    {
        LockLayer {
            shared: Arc::new(Shared {
                client,
                key: key.into_key_source(),
                options: LockOptions::new().wait(DEFAULT_WAIT),
                hold_body: false,
                max_value_len: DEFAULT_MAX_KEY_VALUE_LEN,
                require_key: false,
            }),
            rejection: Arc::new(DefaultRejection::new()),
        }
    }

    /// The HTTP status for a busy lock (default 423 Locked; 409 Conflict is common too).
    pub fn busy_status(mut self, status: StatusCode) -> Self {
        let r = Arc::make_mut(&mut self.rejection);
        *r = r.busy_status(status);
        self
    }

    /// The HTTP status when the lock was lost while the handler ran (default 503).
    pub fn lost_status(mut self, status: StatusCode) -> Self {
        let r = Arc::make_mut(&mut self.rejection);
        *r = r.lost_status(status);
        self
    }

    /// The longest `Retry-After` a busy (423) response suggests (default
    /// [`DEFAULT_RETRY_AFTER`](crate::rejection::DEFAULT_RETRY_AFTER), 1 s). The header says
    /// the smaller of this and the holder's remaining TTL when known, rounded up to whole
    /// seconds, never 0. (The TTL alone is no help for a watchdog-renewed lock: it always has
    /// about the watchdog timeout left.) gRPC rejections carry no retry hint.
    pub fn retry_after(mut self, hint: Duration) -> Self {
        let r = Arc::make_mut(&mut self.rejection);
        *r = r.retry_after(hint);
        self
    }
}

impl<K: KeySource + Clone, R> LockLayer<K, R> {
    fn shared_mut(&mut self) -> &mut Shared<K> {
        Arc::make_mut(&mut self.shared)
    }

    /// How long a request waits for a busy lock before it is rejected as busy;
    /// `Duration::ZERO` tries once.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.shared_mut().options.wait = Some(wait);
        self
    }

    /// Holds the lock for this fixed lease instead of renewing it with the watchdog. A request
    /// still running when the lease is about to end (a safety margin of a tenth of it, at least
    /// 5 ms, before Redis lets the lock go) is dropped and answered as lost (503). At least 10 ms.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.shared_mut().options.lease = Some(lease);
        self
    }

    /// With the watchdog: the longest a request may hold its lock; after that the lock is
    /// released and the request dropped and answered as lost (503).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.shared_mut().options.max_hold = Some(max_hold);
        self
    }

    /// Replaces all lock options (a [`LockOptions`] without `wait` waits indefinitely).
    pub fn options(mut self, options: LockOptions) -> Self {
        self.shared_mut().options = options;
        self
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
    pub fn hold_until_body_end(mut self) -> Self {
        self.shared_mut().hold_body = true;
        self
    }

    /// Rejects requests whose lock key cannot be built (a missing header or path parameter, a
    /// route without the parameter, a [`from_fn`](crate::key::from_fn) returning `None`) with
    /// 400 / `INVALID_ARGUMENT` ([`RejectionKind::InvalidKey`](crate::RejectionKind)) instead
    /// of serving them unlocked: fail closed, so that a client cannot bypass the lock by
    /// leaving the key out.
    ///
    /// Every request through the layer then needs a key: in axum use `Router::route_layer`
    /// on the routes that have the parameter (with `Router::layer`, unknown paths would be
    /// answered 400 rather than 404). Without this option, a request passing unlocked is
    /// logged at debug level (`tracing`).
    pub fn require_key(mut self) -> Self {
        self.shared_mut().require_key = true;
        self
    }

    /// The longest value taken from a request for a key (a path parameter, a header), in
    /// bytes before escaping; longer ones are rejected with 400 / `INVALID_ARGUMENT`.
    pub fn max_key_value_len(mut self, max: usize) -> Self {
        self.shared_mut().max_value_len = max;
        self
    }
}

impl<K, R> LockLayer<K, R> {
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
    pub fn with_rejection_response<R2>(self, rejection: R2) -> LockLayer<K, R2> {
        LockLayer {
            shared: self.shared,
            rejection: Arc::new(rejection),
        }
    }

    /// The lock client.
    pub fn client(&self) -> &LockClient {
        &self.shared.client
    }

    /// The key source.
    pub fn key_source(&self) -> &K {
        &self.shared.key
    }

    /// The lock options used for every acquisition.
    pub fn lock_options(&self) -> LockOptions {
        self.shared.options
    }
}

impl<S, K, R> Layer<S> for LockLayer<K, R> {
    type Service = LockService<S, K, R>;

    fn layer(&self, inner: S) -> Self::Service {
        LockService::new(inner, self.shared.clone(), self.rejection.clone())
    }
}

impl<K, R> Clone for LockLayer<K, R> {
    fn clone(&self) -> Self {
        LockLayer {
            shared: self.shared.clone(),
            rejection: self.rejection.clone(),
        }
    }
}

impl<K: fmt::Debug, R> fmt::Debug for LockLayer<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockLayer")
            .field("client", &self.shared.client)
            .field("key", &self.shared.key)
            .field("options", &self.shared.options)
            .field("hold_body", &self.shared.hold_body)
            .field("max_key_value_len", &self.shared.max_value_len)
            .field("require_key", &self.shared.require_key)
            .field("rejection", &std::any::type_name::<R>())
            .finish()
    }
}
