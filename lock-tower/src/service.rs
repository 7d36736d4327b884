//! [`LockService`]: the middleware service.

use std::fmt;
use std::mem;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use lock_runtime::{LockClient, LockError, LockOptions};
use tower_service::Service;

use crate::access::{Access, Classifier};
use crate::future::{AcquireFuture, Origin, ResponseFuture};
use crate::hold::Hold;
use crate::name::NameSource;
use crate::rejection::{DefaultRejection, RejectionResponse, is_grpc};

/// What a layer and its services share.
#[derive(Debug, Clone)]
pub(crate) struct Shared<N> {
    pub(crate) client: LockClient,
    pub(crate) names: N,
    pub(crate) primitive: Primitive,
    pub(crate) options: LockOptions,
    pub(crate) hold_body: bool,
    pub(crate) max_value_len: usize,
    pub(crate) require_name: bool,
}

/// What a request holds while it is served.
#[derive(Debug, Clone)]
pub(crate) enum Primitive {
    /// [`LockClient::lock`]: one request per name at a time.
    Mutex,
    /// A side of [`LockClient::rw_lock`], chosen per request by the classifier.
    ReadWrite(Classifier),
    /// One permit of [`LockClient::semaphore`] with this capacity.
    Semaphore {
        /// The capacity while none is stored in Redis.
        limit: u32,
    },
}

impl<N> Shared<N> {
    /// Starts acquiring what a request named `name` (classified as `access`) needs.
    fn acquire(&self, name: String, access: Option<Access>) -> AcquireFuture {
        let options = self.options;
        match &self.primitive {
            Primitive::Mutex => {
                let lock = self.client.lock(name);
                Box::pin(async move { lock.acquire_with(options).await.map(Hold::One) })
            }
            Primitive::ReadWrite(_) => {
                let rw = self.client.rw_lock(name);
                let side = match access {
                    Some(Access::Read) => rw.read().clone(),
                    _ => rw.write().clone(),
                };
                Box::pin(async move { side.acquire_with(options).await.map(Hold::One) })
            }
            Primitive::Semaphore { limit } => {
                let semaphore = self.client.semaphore(name, *limit);
                Box::pin(async move { semaphore.acquire_with(options).await.map(Hold::One) })
            }
        }
    }

    /// How rejections of this layer are classified.
    fn origin(&self, grpc: bool) -> Origin {
        Origin {
            grpc,
            permit: matches!(self.primitive, Primitive::Semaphore { .. }),
        }
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
    shared: Arc<Shared<N>>,
    rejection: Arc<R>,
}

impl<S, N, R> LockService<S, N, R> {
    pub(crate) fn new(inner: S, shared: Arc<Shared<N>>, rejection: Arc<R>) -> Self {
        LockService {
            inner,
            shared,
            rejection,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes `self`, returning the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
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
        let (mut parts, body) = request.into_parts();
        let origin = self.shared.origin(is_grpc(&parts.headers));
        let name = self
            .shared
            .names
            .lock_name(&mut parts, self.shared.max_value_len);
        let access = match &self.shared.primitive {
            Primitive::ReadWrite(classifier) => Some(classifier.classify(&parts)),
            Primitive::Mutex | Primitive::Semaphore { .. } => None,
        };
        let request = Request::from_parts(parts, body);
        let rejection = self.rejection.clone();
        match name {
            Ok(None) if self.shared.require_name => {
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
            Ok(Some(name)) => {
                // The instance that went through `poll_ready` goes into the future; a fresh
                // clone stays here (tower-service, "Be careful when cloning inner services").
                let clone = self.inner.clone();
                let inner = mem::replace(&mut self.inner, clone);
                let acquire = self.shared.acquire(name, access);
                ResponseFuture::acquiring(
                    acquire,
                    inner,
                    request,
                    access,
                    rejection,
                    self.shared.hold_body,
                    origin,
                )
            }
        }
    }
}

impl<S: Clone, N, R> Clone for LockService<S, N, R> {
    fn clone(&self) -> Self {
        LockService {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
            rejection: self.rejection.clone(),
        }
    }
}

impl<S: fmt::Debug, N: fmt::Debug, R> fmt::Debug for LockService<S, N, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockService")
            .field("inner", &self.inner)
            .field("shared", &self.shared)
            .field("rejection", &std::any::type_name::<R>())
            .finish()
    }
}
