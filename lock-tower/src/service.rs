//! [`LockService`]: the middleware service.

use std::fmt;
use std::mem;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use lock_runtime::{LockClient, LockError, LockOptions};
use tower_service::Service;

use crate::future::ResponseFuture;
use crate::key::KeySource;
use crate::rejection::{RejectionResponse, is_grpc};

/// The lock a request is being served under, inserted into the request's extensions before the
/// inner service is called.
///
/// Handlers use it to pass the fencing token to the storage they write (axum:
/// `Extension(held): Extension<HeldLock>`; tonic: `request.extensions().get::<HeldLock>()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLock {
    name: Arc<str>,
    fencing_token: u64,
}

impl HeldLock {
    pub(crate) fn new(name: &str, fencing_token: u64) -> HeldLock {
        HeldLock {
            name: name.into(),
            fencing_token,
        }
    }

    /// The lock name (for example `stock:42`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token of this acquisition: strictly increasing per lock name. Send it with
    /// every write and have the storage reject writes with an older token.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }
}

/// What a layer and its services share.
#[derive(Debug, Clone)]
pub(crate) struct Shared<K> {
    pub(crate) client: LockClient,
    pub(crate) key: K,
    pub(crate) options: LockOptions,
    pub(crate) hold_body: bool,
    pub(crate) max_value_len: usize,
    pub(crate) require_key: bool,
}

/// Serves each request while holding the lock its key names; made by
/// [`LockLayer`](crate::LockLayer).
///
/// See the [crate docs](crate) for examples.
///
/// Readiness is the inner service's. The instance that was polled ready is moved into the
/// response future and called once the lock is held, so in a generic tower stack a request
/// waiting for its lock keeps one ready inner service (axum and tonic treat services as always
/// ready, so there this costs nothing).
pub struct LockService<S, K, R> {
    inner: S,
    shared: Arc<Shared<K>>,
    rejection: Arc<R>,
}

impl<S, K, R> LockService<S, K, R> {
    pub(crate) fn new(inner: S, shared: Arc<Shared<K>>, rejection: Arc<R>) -> Self {
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

impl<S, K, R, ReqBody, ResBody: 'static> Service<Request<ReqBody>> for LockService<S, K, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    S::Future: Send + 'static,
    S::Error: 'static,
    K: KeySource,
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
        let grpc = is_grpc(&parts.headers);
        let name = self
            .shared
            .key
            .lock_name(&mut parts, self.shared.max_value_len);
        let request = Request::from_parts(parts, body);
        let rejection = self.rejection.clone();
        match name {
            Ok(None) if self.shared.require_key => {
                tracing::debug!(
                    method = %request.method(),
                    path = request.uri().path(),
                    "request rejected by the lock layer: no lock key (require_key)"
                );
                let error = LockError::InvalidName {
                    name: String::new(),
                    reason: "the request carries no value for the lock key",
                };
                ResponseFuture::rejected(error, rejection, grpc)
            }
            Ok(None) => {
                tracing::debug!(
                    method = %request.method(),
                    path = request.uri().path(),
                    "request passes the lock layer unlocked: no lock key"
                );
                ResponseFuture::unlocked(self.inner.call(request), rejection)
            }
            Err(error) => ResponseFuture::rejected(error, rejection, grpc),
            Ok(Some(name)) => {
                // The instance that went through `poll_ready` goes into the future; a fresh
                // clone stays here (tower-service, "Be careful when cloning inner services").
                let clone = self.inner.clone();
                let inner = mem::replace(&mut self.inner, clone);
                let lock = self.shared.client.lock(name);
                let options = self.shared.options;
                let acquire = Box::pin(async move { lock.acquire_with(options).await });
                ResponseFuture::acquiring(
                    acquire,
                    inner,
                    request,
                    rejection,
                    self.shared.hold_body,
                    grpc,
                )
            }
        }
    }
}

impl<S: Clone, K, R> Clone for LockService<S, K, R> {
    fn clone(&self) -> Self {
        LockService {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
            rejection: self.rejection.clone(),
        }
    }
}

impl<S: fmt::Debug, K: fmt::Debug, R> fmt::Debug for LockService<S, K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockService")
            .field("inner", &self.inner)
            .field("shared", &self.shared)
            .field("rejection", &std::any::type_name::<R>())
            .finish()
    }
}
