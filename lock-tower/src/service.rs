//! [`LockService`]: the middleware service.

use std::fmt;
use std::mem;
use std::task::{Context, Poll};

use http::{Request, Response};
use lock_runtime::LockError;
use tower_service::Service;

use crate::access::{Access, Classifier};
use crate::config::{Config, Shared};
use crate::grpc::is_grpc;
use crate::hold::Hold;
use crate::name::NameSource;
use crate::rejection::{DefaultRejection, RejectionResponse};
use crate::response::{AcquireFuture, Origin, ResponseFuture};

/// The settings of a [`LockService`] besides those of every layer.
#[derive(Debug, Clone)]
pub(crate) struct LockSettings {
    pub(crate) primitive: Primitive,
    pub(crate) require_name: bool,
    /// Mutexes and permits are taken [`fenced`](lock_runtime::Lock::fenced)
    /// ([`LockLayer::fenced`](crate::LockLayer::fenced),
    /// [`KeyedConcurrencyLimitLayer::fenced`](crate::KeyedConcurrencyLimitLayer::fenced)).
    pub(crate) fenced: bool,
}

/// What a request holds while it is served.
#[derive(Debug, Clone)]
pub(crate) enum Primitive {
    /// [`LockClient::lock`](lock_runtime::LockClient::lock): one request per name at a time.
    Mutex,
    /// A side of [`LockClient::rw_lock`](lock_runtime::LockClient::rw_lock), chosen per request by the classifier.
    ReadWrite(Classifier),
    /// One permit of [`LockClient::semaphore`](lock_runtime::LockClient::semaphore) with this capacity.
    Semaphore {
        /// The capacity while none is stored in Redis.
        limit: u32,
    },
}

impl<N: NameSource> Shared<N, LockSettings> {
    /// Starts acquiring what a request named `name` (classified as `access`) needs; its
    /// metrics are recorded under the name source's group.
    fn acquire(&self, name: String, access: Option<Access>) -> AcquireFuture {
        let options = self.options;
        let group = self.names.metrics_group();
        match &self.own.primitive {
            Primitive::Mutex => {
                let mut lock = grouped(self.client.lock(name), group);
                if self.own.fenced {
                    lock = lock.fenced();
                }
                Box::pin(async move { lock.acquire_with(options).await.map(Hold::One) })
            }
            Primitive::ReadWrite(_) => {
                let rw = self.client.rw_lock(name);
                let side = match access {
                    Some(Access::Read) => rw.read().clone(),
                    _ => rw.write().clone(),
                };
                let side = grouped(side, group);
                Box::pin(async move { side.acquire_with(options).await.map(Hold::One) })
            }
            Primitive::Semaphore { limit } => {
                let mut semaphore = self.client.semaphore(name, *limit);
                if let Some(group) = group {
                    semaphore = semaphore.group(group);
                }
                if self.own.fenced {
                    semaphore = semaphore.fenced();
                }
                Box::pin(async move { semaphore.acquire_with(options).await.map(Hold::One) })
            }
        }
    }

    /// How rejections of this layer are classified.
    fn origin(&self, grpc: bool, retry_hint: std::time::Duration) -> Origin {
        Origin {
            grpc,
            permit: matches!(self.own.primitive, Primitive::Semaphore { .. }),
            retry_hint,
        }
    }
}

/// `lock`, its metrics under `group` when there is one.
pub(crate) fn grouped(lock: lock_runtime::Lock, group: Option<&str>) -> lock_runtime::Lock {
    match group {
        Some(group) => lock.group(group),
        None => lock,
    }
}

/// Serves each request while holding the lock its name source names; made by
/// [`LockLayer`](crate::LockLayer) (a mutex, or a side of a read/write lock), and by
/// [`KeyedConcurrencyLimitLayer`](crate::KeyedConcurrencyLimitLayer) (one permit of a
/// semaphore).
///
/// See the [crate docs](crate) for examples.
///
/// Readiness is the inner service's. The instance that was polled ready is moved into the
/// response future and called once the lock is held, so in a generic tower stack a request
/// waiting for its lock keeps one ready inner service (axum and tonic treat services as always
/// ready, so there this costs nothing).
pub struct LockService<S, N, R = DefaultRejection> {
    inner: S,
    config: Config<N, LockSettings, R>,
}

impl<S, N, R> LockService<S, N, R> {
    pub(crate) fn new(inner: S, config: Config<N, LockSettings, R>) -> Self {
        LockService { inner, config }
    }

    define_inner_service_accessors!();
}

impl<S, N, R, ReqBody, ResBody: 'static> Service<Request<ReqBody>> for LockService<S, N, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    S::Future: Send + 'static,
    S::Error: 'static,
    N: NameSource,
    R: RejectionResponse<ResBody>,
{
    type Response = Response<crate::ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let shared = &self.config.shared;
        let (mut parts, body) = request.into_parts();
        let origin = shared.origin(is_grpc(&parts.headers), self.config.retry_hint);
        let name = shared.names.lock_name(&mut parts, shared.max_value_len);
        let access = match &shared.own.primitive {
            Primitive::ReadWrite(classifier) => Some(classifier.classify(&parts)),
            Primitive::Mutex | Primitive::Semaphore { .. } => None,
        };
        let request = Request::from_parts(parts, body);
        let rejection = self.config.rejection.clone();
        match name {
            Ok(None) if shared.own.require_name => {
                tracing::debug!(
                    method = %request.method(),
                    path = request.uri().path(),
                    "request rejected by the lock layer: no lock name (require_name)"
                );
                let error = LockError::InvalidName {
                    name: String::new(),
                    reason: "the request carries no value for the lock key",
                };
                ResponseFuture::rejected(error, rejection, origin)
            }
            Ok(None) => {
                tracing::debug!(
                    method = %request.method(),
                    path = request.uri().path(),
                    "request passes the lock layer unlocked: no lock name"
                );
                ResponseFuture::unlocked(self.inner.call(request), rejection)
            }
            Err(error) => ResponseFuture::rejected(error, rejection, origin),
            Ok(Some(name)) => ResponseFuture::acquiring(
                shared.acquire(name, access),
                take_ready(&mut self.inner),
                request,
                access,
                rejection,
                shared.hold_body,
                origin,
            ),
        }
    }
}

/// The instance of `inner` that went through `poll_ready`, for the response future; a fresh
/// clone stays in the service (tower-service, "Be careful when cloning inner services").
pub(crate) fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    mem::replace(inner, clone)
}

impl<S: Clone, N, R> Clone for LockService<S, N, R> {
    fn clone(&self) -> Self {
        LockService::new(self.inner.clone(), self.config.clone())
    }
}

impl<S: fmt::Debug, N: fmt::Debug, R> fmt::Debug for LockService<S, N, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockService")
            .field("inner", &self.inner)
            .field("shared", &self.config.shared)
            .field("rejection", &std::any::type_name::<R>())
            .finish()
    }
}
