//! What a client gets when its request cannot run under the lock.
//!
//! Every failure becomes a response (the layer never returns an error of its own, as axum
//! requires). The [`DefaultRejection`] answers:
//!
//! | [`RejectionKind`] | HTTP | gRPC (trailers-only) |
//! |---|---|---|
//! | `Busy`: still held by another owner after `wait` | 423 Locked (configurable, e.g. 409) + `Retry-After` (see [`DefaultRejection::retry_after`]) | `ABORTED` |
//! | `Limited`: no permit of the key came free within `wait` ([`KeyedConcurrencyLimitLayer`](crate::KeyedConcurrencyLimitLayer)) | 429 Too Many Requests (configurable) + `Retry-After` | `RESOURCE_EXHAUSTED` |
//! | `Unavailable`: Redis unreachable or too slow | 503 Service Unavailable | `UNAVAILABLE` |
//! | `Lost`: the lock (or permit) was lost while the handler ran (the handler was dropped) | 503 (configurable) | `ABORTED` |
//! | `InvalidName`: an empty, over-long or otherwise unusable value for the lock name; a request body that names no lock, too many, or cannot be read ([`MultiLockLayer`](crate::MultiLockLayer)) | 400 Bad Request | `INVALID_ARGUMENT` |
//! | `TooLarge`: a request body over [`max_body_bytes`](crate::MultiLockLayer::max_body_bytes) ([`MultiLockLayer`](crate::MultiLockLayer)) | 413 Content Too Large | `RESOURCE_EXHAUSTED` (what gRPC servers answer for a message over their limit) |
//! | `Internal`: anything else (a misconfiguration) | 500 Internal Server Error | `INTERNAL` |
//!
//! A request is treated as gRPC when its `content-type` starts with `application/grpc`; it
//! then gets a trailers-only response (HTTP 200, `grpc-status` and `grpc-message` in the
//! headers, empty body), never an HTTP error page. Busy and limited gRPC rejections carry
//! their retry hint as `grpc-retry-pushback-ms` (the same wait as `Retry-After`, in
//! milliseconds, not rounded): a client whose retry policy covers the status (`ABORTED`,
//! `RESOURCE_EXHAUSTED`) waits that long before its next attempt. Other statuses carry none.
//!
//! Replace the default with [`LockLayer::with_rejection_response`](crate::LockLayer::with_rejection_response)
//! (or [`KeyedConcurrencyLimitLayer::with_rejection_response`](crate::KeyedConcurrencyLimitLayer::with_rejection_response)):
//! any `Fn(LockRejection) -> Response<B> + Send + Sync + 'static` (where `B` is the inner
//! service's response body) or your own [`RejectionResponse`]. Whatever produced it, the layer
//! inserts the [`LockRejection`] into the response's extensions, so outer layers can inspect
//! the [`LockError`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use lock_runtime::LockError;

use crate::body::ResponseBody;

/// Why a request was not served under its lock (or permit); cheap to clone (the error is
/// shared).
///
/// Passed to the [`RejectionResponse`] and inserted into the rejection response's extensions.
///
/// ```
/// use lock_tower::{LockRejection, RejectionKind};
///
/// fn describe(response: &http::Response<()>) -> Option<String> {
///     let rejection = response.extensions().get::<LockRejection>()?;
///     Some(match rejection.kind() {
///         RejectionKind::Busy => format!("busy, retry after {:?}", rejection.retry_after()),
///         _ => rejection.error().to_string(),
///     })
/// }
/// # let _ = describe;
/// ```
#[derive(Debug, Clone)]
pub struct LockRejection {
    error: Arc<LockError>,
    grpc: bool,
    permit: bool,
    /// For a request body over the limit: the limit, in bytes.
    body_limit: Option<usize>,
    /// The longest wait [`retry_after`](LockRejection::retry_after) suggests: the layer's.
    retry_hint: Duration,
}

/// The classes of [`LockRejection`], each with its own default response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectionKind {
    /// The lock stayed held by another owner for the whole wait.
    Busy,
    /// Every permit of the key stayed taken for the whole wait: the request would exceed the
    /// [`KeyedConcurrencyLimitLayer`](crate::KeyedConcurrencyLimitLayer)'s limit. Also when
    /// an operator stored a capacity of 0 for the key
    /// ([`Semaphore::set_capacity`](lock_runtime::Semaphore::set_capacity)), which turns all of
    /// its requests away.
    Limited,
    /// Redis could not be reached or did not answer in time.
    Unavailable,
    /// The lock was lost while the inner service ran; its future was dropped.
    Lost,
    /// The request's value for the lock name is unusable (empty, too long, not UTF-8, …); for
    /// a [`MultiLockLayer`](crate::MultiLockLayer), the request body cannot be read for lock
    /// names, names none, or names more than
    /// [`max_names`](crate::MultiLockLayer::max_names)
    /// ([`LockError::TooManyNames`]).
    InvalidName,
    /// The request body is larger than a [`MultiLockLayer`](crate::MultiLockLayer)'s
    /// [`max_body_bytes`](crate::MultiLockLayer::max_body_bytes) (by its `Content-Length`, or
    /// as it streamed in). See [`LockRejection::body_too_large`].
    TooLarge,
    /// Renamed to [`InvalidName`](RejectionKind::InvalidName); never produced.
    ///
    /// [`LockRejection::kind`] returns `InvalidName` since 0.2, so a `match` arm on
    /// `InvalidKey` no longer matches anything: match `InvalidName` instead. A
    /// [`DefaultRejection`] answers it like `InvalidName` (400 / `INVALID_ARGUMENT`).
    #[deprecated(
        since = "0.2.0",
        note = "renamed to `InvalidName`, which is what is produced"
    )]
    InvalidKey,
    /// Anything else, such as invalid lock options.
    Internal,
}

impl LockRejection {
    /// A rejection for `error` by a [`LockLayer`](crate::LockLayer); `grpc` says whether the
    /// request was a gRPC call.
    pub fn new(error: LockError, grpc: bool) -> LockRejection {
        LockRejection {
            error: Arc::new(error),
            grpc,
            permit: false,
            body_limit: None,
            retry_hint: DEFAULT_RETRY_AFTER,
        }
    }

    /// The same rejection, suggesting waits of at most `hint` (the layer's `retry_after`).
    pub(crate) fn with_retry_hint(mut self, hint: Duration) -> LockRejection {
        self.retry_hint = hint;
        self
    }

    /// A rejection of a request whose body is larger than `limit` bytes, by a
    /// [`MultiLockLayer`](crate::MultiLockLayer) ([`RejectionKind::TooLarge`]); `grpc` says
    /// whether the request was a gRPC call.
    ///
    /// Its [`error`](LockRejection::error) is a [`LockError::InvalidName`] naming
    /// `<request body>` (no lock name could be read from the body); it displays as the limit
    /// that was passed.
    ///
    /// ```
    /// use lock_tower::{LockRejection, RejectionKind};
    ///
    /// let rejection = LockRejection::body_too_large(65536, false);
    /// assert_eq!(rejection.kind(), RejectionKind::TooLarge);
    /// assert_eq!(rejection.body_limit(), Some(65536));
    /// assert_eq!(rejection.to_string(), "the request body is larger than 65536 bytes");
    /// ```
    pub fn body_too_large(limit: usize, grpc: bool) -> LockRejection {
        LockRejection {
            body_limit: Some(limit),
            ..LockRejection::new(
                LockError::InvalidName {
                    name: "<request body>".into(),
                    reason: "the request body is larger than the layer's maximum",
                },
                grpc,
            )
        }
    }

    /// For [`TooLarge`](RejectionKind::TooLarge): the limit the request body passed, in bytes.
    pub fn body_limit(&self) -> Option<usize> {
        self.body_limit
    }

    /// A rejection for `error` by a
    /// [`KeyedConcurrencyLimitLayer`](crate::KeyedConcurrencyLimitLayer), whose busy errors
    /// are [`Limited`](RejectionKind::Limited) rather than [`Busy`](RejectionKind::Busy); `grpc`
    /// says whether the request was a gRPC call.
    pub fn permit_limit(error: LockError, grpc: bool) -> LockRejection {
        LockRejection {
            permit: true,
            ..LockRejection::new(error, grpc)
        }
    }

    /// The class of failure.
    pub fn kind(&self) -> RejectionKind {
        if self.body_limit.is_some() {
            return RejectionKind::TooLarge;
        }
        match &*self.error {
            e if e.is_busy() && self.permit => RejectionKind::Limited,
            LockError::InvalidPermits { .. } if self.permit => RejectionKind::Limited,
            e if e.is_busy() => RejectionKind::Busy,
            e if e.is_unavailable() => RejectionKind::Unavailable,
            e if e.is_lost() => RejectionKind::Lost,
            LockError::InvalidName { .. } | LockError::TooManyNames { .. } => {
                RejectionKind::InvalidName
            }
            _ => RejectionKind::Internal,
        }
    }

    /// The lock error.
    pub fn error(&self) -> &LockError {
        &self.error
    }

    /// The lock error, shared.
    pub fn shared_error(&self) -> Arc<LockError> {
        self.error.clone()
    }

    /// For [`Busy`](RejectionKind::Busy) and [`Limited`](RejectionKind::Limited): how long a
    /// client should wait before it retries, the hint a [`DefaultRejection`] sends: the smaller
    /// of the layer's [`retry_after`](crate::LockLayer::retry_after) (default
    /// [`DEFAULT_RETRY_AFTER`], 1 s; a rejection made with [`new`](LockRejection::new) has
    /// the default) and the holder's remaining lease (for `Limited`, the first permit
    /// holder's) when it is known. `None` for every other kind.
    ///
    /// The holder's lease alone is no hint: a lock renewed by the watchdog always has about
    /// the watchdog timeout (30 s) left, however soon it is released. It is still there, as
    /// `rejection.error().retry_after()`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_runtime::LockError;
    /// use lock_tower::LockRejection;
    ///
    /// let held_by_a_watchdog = LockError::WaitTimeout {
    ///     name: "stock:42".into(),
    ///     waited: Duration::from_millis(100),
    ///     remaining_ttl: Some(Duration::from_secs(30)),
    /// };
    /// let rejection = LockRejection::new(held_by_a_watchdog, false);
    /// assert_eq!(rejection.retry_after(), Some(Duration::from_secs(1)));
    /// assert_eq!(rejection.error().retry_after(), Some(Duration::from_secs(30)));
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self.kind() {
            RejectionKind::Busy | RejectionKind::Limited => Some(
                self.error
                    .retry_after()
                    .map_or(self.retry_hint, |ttl| ttl.min(self.retry_hint)),
            ),
            _ => None,
        }
    }

    /// Whether the request was a gRPC call (`content-type: application/grpc…`).
    pub fn is_grpc(&self) -> bool {
        self.grpc
    }

    /// Whether a [`KeyedConcurrencyLimitLayer`](crate::KeyedConcurrencyLimitLayer) rejected
    /// the request (the error is about one of its permits), rather than a
    /// [`LockLayer`](crate::LockLayer).
    pub fn is_permit_limit(&self) -> bool {
        self.permit
    }
}

impl fmt::Display for LockRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(limit) = self.body_limit {
            return write!(f, "the request body is larger than {limit} bytes");
        }
        fmt::Display::fmt(&self.error, f)
    }
}

/// Turns a [`LockRejection`] into a response; see the [module docs](crate::rejection).
///
/// Implemented by [`DefaultRejection`] and by every
/// `Fn(LockRejection) -> Response<B> + Send + Sync + 'static`.
pub trait RejectionResponse<B>: Send + Sync + 'static {
    /// The response for `rejection`.
    fn rejection_response(&self, rejection: LockRejection) -> Response<ResponseBody<B>>;
}

impl<B, F> RejectionResponse<B> for F
where
    F: Fn(LockRejection) -> Response<B> + Send + Sync + 'static,
{
    fn rejection_response(&self, rejection: LockRejection) -> Response<ResponseBody<B>> {
        self(rejection).map(ResponseBody::new)
    }
}

/// The default rejection responses (see the [module docs](crate::rejection) for the table).
///
/// HTTP responses carry the error as a `text/plain` body; busy and limited ones a
/// `Retry-After` header: the smaller of the [`retry_after`](DefaultRejection::retry_after)
/// hint (default [`DEFAULT_RETRY_AFTER`], 1 s) and the holder's remaining TTL when it is known,
/// rounded up to whole seconds, at least 1.
///
/// The holder's TTL alone would be a poor hint: a lock renewed by the watchdog always has
/// about the watchdog timeout (30 s) left, however soon it is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultRejection {
    busy_status: StatusCode,
    limited_status: StatusCode,
    lost_status: StatusCode,
    retry_after: Duration,
}

/// The default `Retry-After` hint of a busy rejection: 1 s.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

impl DefaultRejection {
    /// 423 for busy, 429 for limited, 503 for lost.
    pub const fn new() -> DefaultRejection {
        DefaultRejection {
            busy_status: StatusCode::LOCKED,
            limited_status: StatusCode::TOO_MANY_REQUESTS,
            lost_status: StatusCode::SERVICE_UNAVAILABLE,
            retry_after: DEFAULT_RETRY_AFTER,
        }
    }

    /// The longest `Retry-After` a busy or limited response suggests (default
    /// [`DEFAULT_RETRY_AFTER`], 1 s). The header says the smaller of this and the holder's remaining TTL when known,
    /// rounded up to whole seconds, never 0.
    pub const fn retry_after(mut self, hint: Duration) -> DefaultRejection {
        self.retry_after = hint;
        self
    }

    /// The HTTP status for a busy lock (default 423 Locked; 409 Conflict is common too).
    pub const fn busy_status(mut self, status: StatusCode) -> DefaultRejection {
        self.busy_status = status;
        self
    }

    /// The HTTP status when no permit came free (default 429 Too Many Requests; 503 Service
    /// Unavailable suits load shedding too).
    pub const fn limited_status(mut self, status: StatusCode) -> DefaultRejection {
        self.limited_status = status;
        self
    }

    /// The HTTP status when the lock was lost while the handler ran (default 503).
    pub const fn lost_status(mut self, status: StatusCode) -> DefaultRejection {
        self.lost_status = status;
        self
    }
}

impl Default for DefaultRejection {
    fn default() -> Self {
        DefaultRejection::new()
    }
}

impl<B> RejectionResponse<B> for DefaultRejection {
    fn rejection_response(&self, rejection: LockRejection) -> Response<ResponseBody<B>> {
        let message = rejection.to_string();
        if rejection.is_grpc() {
            let mut response = grpc_response(grpc_code(rejection.kind()), &message);
            if matches!(
                rejection.kind(),
                RejectionKind::Busy | RejectionKind::Limited
            ) {
                let wait = retry_wait(self.retry_after, rejection.error().retry_after());
                let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                response
                    .headers_mut()
                    .insert("grpc-retry-pushback-ms", ms.into());
            }
            return response;
        }
        let status = match rejection.kind() {
            RejectionKind::Busy => self.busy_status,
            RejectionKind::Limited => self.limited_status,
            RejectionKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            RejectionKind::Lost => self.lost_status,
            #[allow(deprecated)]
            RejectionKind::InvalidName | RejectionKind::InvalidKey => StatusCode::BAD_REQUEST,
            RejectionKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            RejectionKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut response = Response::new(ResponseBody::full(Bytes::from(message + "\n")));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if matches!(
            rejection.kind(),
            RejectionKind::Busy | RejectionKind::Limited
        ) {
            headers.insert(
                RETRY_AFTER,
                retry_after_secs(self.retry_after, rejection.error().retry_after()).into(),
            );
        }
        response
    }
}

/// `min(hint, ttl)`.
fn retry_wait(hint: Duration, ttl: Option<Duration>) -> Duration {
    ttl.map_or(hint, |ttl| ttl.min(hint))
}

/// `min(hint, ttl)` in whole seconds, rounded up, at least 1.
fn retry_after_secs(hint: Duration, ttl: Option<Duration>) -> u64 {
    let wait = retry_wait(hint, ttl);
    let secs = wait
        .as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0));
    secs.max(1)
}

/// gRPC status codes (grpc/doc/statuscodes.md) used by the default rejection.
fn grpc_code(kind: RejectionKind) -> u16 {
    use crate::grpc::{ABORTED, INTERNAL, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE};
    match kind {
        RejectionKind::Busy | RejectionKind::Lost => ABORTED,
        // gRPC servers answer a message over their size limit with RESOURCE_EXHAUSTED.
        RejectionKind::Limited | RejectionKind::TooLarge => RESOURCE_EXHAUSTED,
        RejectionKind::Unavailable => UNAVAILABLE,
        #[allow(deprecated)]
        RejectionKind::InvalidName | RejectionKind::InvalidKey => INVALID_ARGUMENT,
        RejectionKind::Internal => INTERNAL,
    }
}

/// A trailers-only gRPC response: status and message in the headers, no body.
fn grpc_response<B>(code: u16, message: &str) -> Response<ResponseBody<B>> {
    let mut response = Response::new(ResponseBody::empty());
    let headers: &mut HeaderMap = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", code.into());
    if let Ok(value) = HeaderValue::from_str(&crate::grpc::message_encode(message)) {
        headers.insert("grpc-message", value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(ttl: Option<Duration>) -> LockError {
        LockError::WaitTimeout {
            name: "stock:1".into(),
            waited: Duration::from_millis(10),
            remaining_ttl: ttl,
        }
    }

    #[test]
    fn retry_after_is_the_smaller_of_hint_and_ttl_rounded_up_to_at_least_one_second() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        assert_eq!(retry_after_secs(s(1), None), 1);
        assert_eq!(retry_after_secs(s(1), Some(s(30))), 1);
        assert_eq!(retry_after_secs(s(60), None), 60);
        assert_eq!(retry_after_secs(s(60), Some(ms(1))), 1);
        assert_eq!(retry_after_secs(s(60), Some(ms(1001))), 2);
        assert_eq!(retry_after_secs(s(60), Some(s(30))), 30);
        assert_eq!(retry_after_secs(ms(2500), Some(s(30))), 3);
        assert_eq!(retry_after_secs(Duration::ZERO, Some(Duration::ZERO)), 1);
        assert_eq!(retry_after_secs(Duration::ZERO, None), 1);
        assert_eq!(retry_after_secs(Duration::MAX, None), u64::MAX);
    }

    #[test]
    fn busy_http_is_423_with_retry_after_or_the_configured_status() {
        let r = LockRejection::new(busy(Some(Duration::from_millis(2500))), false);
        let res: Response<ResponseBody<()>> = DefaultRejection::new().rejection_response(r.clone());
        assert_eq!(res.status(), StatusCode::LOCKED);
        assert_eq!(res.headers()[RETRY_AFTER], "1");
        let res: Response<ResponseBody<()>> = DefaultRejection::new()
            .retry_after(Duration::from_secs(10))
            .rejection_response(r.clone());
        assert_eq!(res.headers()[RETRY_AFTER], "3");
        let res: Response<ResponseBody<()>> = DefaultRejection::new()
            .busy_status(StatusCode::CONFLICT)
            .rejection_response(r);
        assert_eq!(res.status(), StatusCode::CONFLICT);
    }

    /// Regression: a custom rejection reading `retry_after()` got the holder's lease (30 s
    /// under a watchdog) instead of the hint the default rejection sends.
    #[test]
    fn custom_rejections_get_the_default_retry_hint_not_the_holders_lease() {
        let s = Duration::from_secs;
        let watchdog = LockRejection::new(busy(Some(s(30))), false);
        assert_eq!(watchdog.retry_after(), Some(s(1)));
        assert_eq!(watchdog.error().retry_after(), Some(s(30)));
        let soon = LockRejection::new(busy(Some(Duration::from_millis(300))), false);
        assert_eq!(soon.retry_after(), Some(Duration::from_millis(300)));
        assert_eq!(
            LockRejection::new(busy(None), false).retry_after(),
            Some(s(1))
        );
        let limited = LockRejection::permit_limit(busy(Some(s(20))), false);
        assert_eq!(limited.retry_after(), Some(s(1)));
        let unavailable = LockRejection::new(
            LockError::ResponseTimeout {
                op: "acquire",
                timeout: s(1),
            },
            false,
        );
        assert_eq!(unavailable.retry_after(), None);
    }

    #[test]
    fn busy_and_limited_grpc_rejections_carry_a_retry_pushback() {
        let ms = Duration::from_millis;
        let res: Response<ResponseBody<()>> = DefaultRejection::new()
            .rejection_response(LockRejection::new(busy(Some(ms(30_000))), true));
        assert_eq!(res.headers()["grpc-status"], "10");
        assert_eq!(res.headers()["grpc-retry-pushback-ms"], "1000");
        let res: Response<ResponseBody<()>> = DefaultRejection::new()
            .retry_after(Duration::from_secs(10))
            .rejection_response(LockRejection::permit_limit(busy(Some(ms(2500))), true));
        assert_eq!(res.headers()["grpc-status"], "8");
        assert_eq!(res.headers()["grpc-retry-pushback-ms"], "2500");
        let res: Response<ResponseBody<()>> =
            DefaultRejection::new().rejection_response(LockRejection::new(
                LockError::ResponseTimeout {
                    op: "acquire",
                    timeout: Duration::from_secs(1),
                },
                true,
            ));
        assert!(!res.headers().contains_key("grpc-retry-pushback-ms"));
    }

    #[test]
    fn grpc_gets_trailers_only_statuses() {
        let cases = [
            (busy(None), "10"),
            (
                LockError::ResponseTimeout {
                    op: "acquire",
                    timeout: Duration::from_secs(1),
                },
                "14",
            ),
            (
                LockError::InvalidName {
                    name: "x".into(),
                    reason: "too long",
                },
                "3",
            ),
            (LockError::InvalidConfig("x".into()), "13"),
        ];
        for (error, code) in cases {
            let res: Response<ResponseBody<()>> =
                DefaultRejection::new().rejection_response(LockRejection::new(error, true));
            assert_eq!(res.status(), StatusCode::OK);
            assert_eq!(res.headers()["grpc-status"], code);
            assert_eq!(res.headers()[CONTENT_TYPE], "application/grpc");
            assert!(res.headers().contains_key("grpc-message"));
        }
    }

    #[test]
    fn a_permit_limits_busy_error_is_429_with_retry_after_and_resource_exhausted() {
        let r = LockRejection::permit_limit(busy(Some(Duration::from_secs(30))), false);
        assert_eq!(r.kind(), RejectionKind::Limited);
        assert!(r.is_permit_limit());
        let res: Response<ResponseBody<()>> = DefaultRejection::new().rejection_response(r.clone());
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(res.headers()[RETRY_AFTER], "1");
        let res: Response<ResponseBody<()>> = DefaultRejection::new()
            .limited_status(StatusCode::SERVICE_UNAVAILABLE)
            .retry_after(Duration::from_secs(5))
            .rejection_response(r);
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(res.headers()[RETRY_AFTER], "5");

        // A stored capacity of 0 turns every request away the same way.
        let zero = LockError::InvalidPermits {
            name: "tenant:1".into(),
            requested: 1,
            capacity: 0,
        };
        let r = LockRejection::permit_limit(zero, false);
        assert_eq!(r.kind(), RejectionKind::Limited);
        let res: Response<ResponseBody<()>> = DefaultRejection::new().rejection_response(r);
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(res.headers()[RETRY_AFTER], "1");

        let res: Response<ResponseBody<()>> = DefaultRejection::new()
            .rejection_response(LockRejection::permit_limit(busy(None), true));
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()["grpc-status"], "8");

        // Other failures of a permit are classified as for a lock.
        let r = LockRejection::permit_limit(
            LockError::ResponseTimeout {
                op: "acquire",
                timeout: Duration::from_secs(1),
            },
            false,
        );
        assert_eq!(r.kind(), RejectionKind::Unavailable);
        // A lock layer's busy error stays busy.
        assert_eq!(
            LockRejection::new(busy(None), false).kind(),
            RejectionKind::Busy
        );
    }

    #[test]
    fn body_rejections_are_400_or_413_and_invalid_argument_or_resource_exhausted() {
        let too_large = LockRejection::body_too_large(10, false);
        assert_eq!(too_large.kind(), RejectionKind::TooLarge);
        let res: Response<ResponseBody<()>> = DefaultRejection::new().rejection_response(too_large);
        assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(!res.headers().contains_key(RETRY_AFTER));
        let res: Response<ResponseBody<()>> =
            DefaultRejection::new().rejection_response(LockRejection::body_too_large(10, true));
        assert_eq!(res.headers()["grpc-status"], "8");

        let too_many = LockRejection::new(LockError::TooManyNames { count: 65, max: 64 }, false);
        assert_eq!(too_many.kind(), RejectionKind::InvalidName);
        let res: Response<ResponseBody<()>> = DefaultRejection::new().rejection_response(too_many);
        assert_eq!(res.status(), StatusCode::BAD_REQUEST);
        let res: Response<ResponseBody<()>> = DefaultRejection::new().rejection_response(
            LockRejection::new(LockError::TooManyNames { count: 65, max: 64 }, true),
        );
        assert_eq!(res.headers()["grpc-status"], "3");
    }
}
