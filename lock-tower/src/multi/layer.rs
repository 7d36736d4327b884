//! [`MultiLockLayer`]: configuration, and the [`Layer`] that wraps services in a
//! [`MultiLockService`].

use std::fmt;
use std::time::Duration;

use http::StatusCode;
use lock_runtime::{LockClient, LockOptions};
use tower_layer::Layer;

use super::Bounds;
use super::service::MultiLockService;
use crate::config::Config;
use crate::name::BodyNameSource;
use crate::rejection::DefaultRejection;

/// The default bound on a request body a [`MultiLockLayer`] reads: 64 KiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;

/// The default bound on the distinct lock names of one request of a [`MultiLockLayer`]: 64.
pub const DEFAULT_MAX_NAMES: usize = 64;

/// Serves each request while holding several distributed locks, named by the request body:
/// a checkout locks every product in the cart.
///
/// See the [crate docs](crate#several-names-from-the-body-a-cart) for the axum example.
///
/// For each request the layer
///
/// 1. reads the body, up to [`max_body_bytes`](MultiLockLayer::max_body_bytes) (default
///    [`DEFAULT_MAX_BODY_BYTES`], 64 KiB): a `Content-Length` over the bound is answered
///    **413** without reading anything, a body that streams past it 413 as soon as it does
///    (gRPC: `RESOURCE_EXHAUSTED`, [`RejectionKind::TooLarge`](crate::RejectionKind::TooLarge));
/// 2. computes the lock names from the head and the body with a [`BodyNameSource`]
///    ([`JsonNames`](crate::name::JsonNames) for JSON, [`BodyNames`](crate::name::BodyNames)
///    for anything else), removes duplicates and answers **400** / `INVALID_ARGUMENT` for a
///    body it cannot read, one that names no lock (an empty cart is never served unlocked),
///    or more than [`max_names`](MultiLockLayer::max_names) distinct names (default
///    [`DEFAULT_MAX_NAMES`], 64; [`LockError::TooManyNames`](crate::LockError::TooManyNames));
/// 3. takes every lock with a [`MultiLock`](lock_runtime::MultiLock): in one global order
///    (so two carts listing the same products in opposite orders never deadlock), all or
///    nothing within [`wait`](MultiLockLayer::wait) in total. Busy: **423** with
///    `Retry-After` / `ABORTED`, as [`LockLayer`](crate::LockLayer); Redis down: **503** /
///    `UNAVAILABLE`;
/// 4. calls the inner service with the same head and the same bytes (a [`BufferedBody`](crate::BufferedBody)),
///    inside the reentrancy scope of every lock, with a [`HeldLocks`](crate::HeldLocks)
///    (each name's fencing token) in the request extensions;
/// 5. releases the locks when the response is ready (or with
///    [`hold_until_body_end`](MultiLockLayer::hold_until_body_end) when its body has ended),
///    when the inner service fails, or when the client goes away. If any lock is lost while
///    the handler runs, the handler is dropped and the request answered **503**
///    ([`lost_status`](MultiLockLayer::lost_status)), as with `LockLayer`.
///
/// **The body is read before any lock is taken**, so a slow client never holds a lock while
/// it sends; the [`wait`](MultiLockLayer::wait) starts once the body is in and counts only
/// the waiting for locks. Bound the time a client may take to send its body with your
/// server's or a timeout layer's settings, not with this layer.
///
/// | option | default |
/// |---|---|
/// | [`max_body_bytes`](MultiLockLayer::max_body_bytes) | [`DEFAULT_MAX_BODY_BYTES`] (64 KiB), then 413 |
/// | [`max_names`](MultiLockLayer::max_names) distinct names per request | [`DEFAULT_MAX_NAMES`] (64), then 400 |
/// | [`max_name_value_len`](MultiLockLayer::max_name_value_len) | [`DEFAULT_MAX_NAME_VALUE_LEN`](crate::name::DEFAULT_MAX_NAME_VALUE_LEN) (128 bytes) |
/// | [`wait`](MultiLockLayer::wait) for all the locks together | [`DEFAULT_WAIT`](crate::DEFAULT_WAIT) (10 s), then 423 |
/// | [`retry_after`](MultiLockLayer::retry_after): longest `Retry-After` of a 423 | 1 s |
/// | [`lease`](MultiLockLayer::lease) | none: the watchdog renews the locks while the request runs |
/// | [`max_hold`](MultiLockLayer::max_hold) | none |
/// | [`hold_until_body_end`](MultiLockLayer::hold_until_body_end) | off: released when the response head is ready |
/// | [`with_rejection_response`](MultiLockLayer::with_rejection_response) | [`DefaultRejection`] |
///
/// **gRPC**: the body of a gRPC call is length-prefixed messages (a unary call: one); take
/// the names with [`BodyNames::from_fn`](crate::name::BodyNames::from_fn), decoding the
/// message that [`grpc_message`](crate::name::grpc_message) returns:
///
/// ```
/// use bytes::Bytes;
/// use http::request::Parts;
/// use lock_tower::MultiLockLayer;
/// use lock_tower::name::{BodyNames, escape, grpc_message, invalid_body};
/// use prost::Message;
///
/// #[derive(Clone, PartialEq, prost::Message)]
/// struct CheckoutRequest {
///     #[prost(string, repeated, tag = "1")]
///     skus: Vec<String>,
/// }
///
/// # fn demo(locks: lock_tower::LockClient) {
/// let names = BodyNames::from_fn(|_: &Parts, body: &Bytes| {
///     let request = CheckoutRequest::decode(grpc_message(body)?)
///         .map_err(|_| invalid_body("not a CheckoutRequest"))?;
///     Ok(request.skus.iter().map(|sku| format!("stock:{}", escape(sku))).collect())
/// });
/// // tonic: `Server::builder().layer(layer).add_service(…)`.
/// let layer = MultiLockLayer::new(locks, names);
/// # let _ = layer; }
/// ```
///
/// Put the layer on the routes whose bodies it understands (`Router::route_layer` on the
/// checkout route, or a router of its own): every request through it has its body read and
/// needs at least one lock name. Locks are mutexes ([`LockClient::lock`]); use each name
/// (each template prefix) for one kind of primitive only, as with `LockLayer`.
#[must_use = "a layer does nothing until it wraps a service"]
pub struct MultiLockLayer<N, R = DefaultRejection> {
    config: Config<N, Bounds, R>,
}

impl<N: BodyNameSource> MultiLockLayer<N> {
    /// A layer taking the locks named by `names` on `client`.
    ///
    /// ```
    /// # #[cfg(feature = "json")] {
    /// use lock_tower::{MultiLockLayer, name::JsonNames};
    ///
    /// # fn demo(locks: lock_tower::LockClient) {
    /// let layer = MultiLockLayer::new(locks, JsonNames::new("stock:<items[].sku>"));
    /// # let _ = layer; }
    /// # }
    /// ```
    pub fn new(client: LockClient, names: N) -> MultiLockLayer<N> {
        let bounds = Bounds {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_names: DEFAULT_MAX_NAMES,
        };
        MultiLockLayer {
            config: Config::new(client, names, bounds),
        }
    }

    /// The HTTP status when a lock stayed busy (default 423 Locked; 409 Conflict is common
    /// too).
    pub fn busy_status(self, status: StatusCode) -> Self {
        self.map(|c| c.map_rejection(|r| r.busy_status(status)))
    }

    /// The HTTP status when a lock was lost while the handler ran (default 503).
    pub fn lost_status(self, status: StatusCode) -> Self {
        self.map(|c| c.map_rejection(|r| r.lost_status(status)))
    }

    /// The longest `Retry-After` a busy (423) response suggests (default
    /// [`DEFAULT_RETRY_AFTER`](crate::rejection::DEFAULT_RETRY_AFTER), 1 s); see
    /// [`LockLayer::retry_after`](crate::LockLayer::retry_after).
    pub fn retry_after(self, hint: Duration) -> Self {
        self.map(|c| c.retry_after(hint))
    }
}

impl<N: BodyNameSource + Clone, R> MultiLockLayer<N, R> {
    /// How long a request waits for all of its locks together before it is rejected as busy;
    /// `Duration::ZERO` tries each once. Reading the body does not count.
    pub fn wait(self, wait: Duration) -> Self {
        self.map(|c| c.wait(wait))
    }

    /// Holds each lock for this fixed lease instead of renewing it with the watchdog; see
    /// [`LockLayer::lease`](crate::LockLayer::lease). At least 10 ms.
    pub fn lease(self, lease: Duration) -> Self {
        self.map(|c| c.lease(lease))
    }

    /// With the watchdog: the longest a request may hold its locks; after that they are
    /// released and the request dropped and answered as lost (503).
    pub fn max_hold(self, max_hold: Duration) -> Self {
        self.map(|c| c.max_hold(max_hold))
    }

    /// Replaces all lock options (a [`LockOptions`] without `wait` waits indefinitely).
    pub fn options(self, options: LockOptions) -> Self {
        self.map(|c| c.options(options))
    }

    /// Keeps the locks until the response body has ended (or is dropped); see
    /// [`LockLayer::hold_until_body_end`](crate::LockLayer::hold_until_body_end). The body is
    /// polled inside the scope of every lock and ends with an error if any of them is lost.
    pub fn hold_until_body_end(self) -> Self {
        self.map(Config::hold_until_body_end)
    }

    /// The largest request body read, in bytes (default [`DEFAULT_MAX_BODY_BYTES`], 64 KiB).
    /// A request whose `Content-Length` says more is answered 413 without its body being read;
    /// one whose body streams past the bound is answered 413 as soon as it does (the rest is
    /// not read). For gRPC the bound counts the whole body: each message and its 5-byte
    /// frame header.
    pub fn max_body_bytes(self, max: usize) -> Self {
        self.map(|c| c.map_shared(|s| s.own.max_body_bytes = max))
    }

    /// The most distinct lock names one request may ask for (default [`DEFAULT_MAX_NAMES`],
    /// 64); more are answered 400 / `INVALID_ARGUMENT`
    /// ([`LockError::TooManyNames`](crate::LockError::TooManyNames)) and nothing is locked.
    /// Each lock costs a round trip to Redis while the request waits.
    pub fn max_names(self, max: usize) -> Self {
        self.map(|c| c.map_shared(|s| s.own.max_names = max))
    }

    /// The longest value taken from the body for a lock name, in bytes before escaping;
    /// longer ones are rejected with 400 / `INVALID_ARGUMENT`.
    pub fn max_name_value_len(self, max: usize) -> Self {
        self.map(|c| c.max_name_value_len(max))
    }
}

impl<N, R> MultiLockLayer<N, R> {
    fn map<R2>(
        self,
        f: impl FnOnce(Config<N, Bounds, R>) -> Config<N, Bounds, R2>,
    ) -> MultiLockLayer<N, R2> {
        MultiLockLayer {
            config: f(self.config),
        }
    }

    /// Replaces the rejection response, as
    /// [`LockLayer::with_rejection_response`](crate::LockLayer::with_rejection_response)
    /// does. Bodies over the bound have the kind
    /// [`RejectionKind::TooLarge`](crate::RejectionKind::TooLarge).
    ///
    /// ```
    /// # #[cfg(all(feature = "axum", feature = "json"))] {
    /// use axum::response::{IntoResponse, Response};
    /// use http::StatusCode;
    /// use lock_tower::{LockRejection, MultiLockLayer, RejectionKind, name::JsonNames};
    ///
    /// # fn demo(locks: lock_tower::LockClient) {
    /// let layer = MultiLockLayer::new(locks, JsonNames::new("stock:<items[].sku>"))
    ///     .with_rejection_response(|rejection: LockRejection| -> Response {
    ///         match rejection.kind() {
    ///             RejectionKind::Busy => (StatusCode::CONFLICT, "cart busy").into_response(),
    ///             RejectionKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE.into_response(),
    ///             _ => (StatusCode::BAD_REQUEST, rejection.to_string()).into_response(),
    ///         }
    ///     });
    /// # let _ = layer; }
    /// # }
    /// ```
    pub fn with_rejection_response<R2>(self, rejection: R2) -> MultiLockLayer<N, R2> {
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

    /// The lock options used for every acquisition (`wait` bounds all of a request's locks
    /// together).
    pub fn lock_options(&self) -> LockOptions {
        self.config.shared.options
    }
}

impl<S, N, R> Layer<S> for MultiLockLayer<N, R> {
    type Service = MultiLockService<S, N, R>;

    fn layer(&self, inner: S) -> Self::Service {
        MultiLockService::new(inner, self.config.clone())
    }
}

impl<N, R> Clone for MultiLockLayer<N, R> {
    fn clone(&self) -> Self {
        MultiLockLayer {
            config: self.config.clone(),
        }
    }
}

impl<N: fmt::Debug, R> fmt::Debug for MultiLockLayer<N, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockLayer")
            .field("shared", &self.config.shared)
            .field("rejection", &std::any::type_name::<R>())
            .finish()
    }
}
