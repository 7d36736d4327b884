//! [`MultiLockService`]: the middleware service of a [`MultiLockLayer`](crate::MultiLockLayer).

use std::fmt;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use lock_runtime::{LockError, MultiLock};
use tower_service::Service;

use super::Bounds;
use super::buffer::BufferedBody;
use super::future::MultiResponseFuture;
use crate::body::{BoxError, ResponseBody};
use crate::config::{Config, Shared};
use crate::grpc::is_grpc;
use crate::hold::Hold;
use crate::name::{BodyNameSource, invalid_body};
use crate::rejection::{DefaultRejection, LockRejection, RejectionResponse};
use crate::response::{AcquireFuture, Origin};
use crate::service::take_ready;

impl<N: BodyNameSource> Shared<N, Bounds> {
    /// Computes the request's names and starts taking them all.
    pub(crate) fn acquire(
        &self,
        request: &Parts,
        body: &Bytes,
    ) -> Result<AcquireFuture, LockError> {
        let mut names = self.names.lock_names(request, body, self.max_value_len)?;
        names.sort_unstable();
        names.dedup();
        if names.is_empty() {
            return Err(invalid_body("the request body names no lock"));
        }
        if names.len() > self.own.max_names {
            return Err(LockError::TooManyNames {
                count: names.len(),
                max: self.own.max_names,
            });
        }
        let group = self.names.metrics_group();
        // Fenced: `HeldLocks` hands the handler every token without a round trip.
        let multi = MultiLock::new(
            names
                .iter()
                .map(|name| crate::service::grouped(self.client.lock(name), group).fenced()),
        )?;
        let options = self.options;
        Ok(Box::pin(async move {
            let guards = multi.acquire_with(options).await?;
            // A name re-entered from an enclosing hold taken without a token (an unfenced
            // `LockLayer` outside this layer) shares that hold's token: none yet. It is asked
            // for now (one round trip, only in that case), so that `HeldLocks` carries a real
            // token for every name.
            for guard in guards.guards() {
                if guard.issued_token().is_none() {
                    guard.fencing_token().await?;
                }
            }
            Ok(Hold::Many(guards))
        }))
    }

    /// Whether the head alone shows the body to be over the bound.
    fn declared_too_large(&self, parts: &Parts, hint: u64) -> bool {
        let max = u64::try_from(self.own.max_body_bytes).unwrap_or(u64::MAX);
        let declared = parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
        declared.is_some_and(|len| len > max) || hint > max
    }
}

/// Serves each request while holding every lock its body names; made by
/// [`MultiLockLayer`](crate::MultiLockLayer).
///
/// Readiness is the inner service's. The instance that was polled ready is moved into the
/// response future and called with a [`BufferedBody`] once the body is read and the locks are
/// held.
pub struct MultiLockService<S, N, R = DefaultRejection> {
    inner: S,
    config: Config<N, Bounds, R>,
}

impl<S, N, R> MultiLockService<S, N, R> {
    pub(crate) fn new(inner: S, config: Config<N, Bounds, R>) -> Self {
        MultiLockService { inner, config }
    }

    define_inner_service_accessors!();
}

impl<S, N, R, ReqBody, ResBody: 'static> Service<Request<ReqBody>> for MultiLockService<S, N, R>
where
    S: Service<Request<BufferedBody>, Response = Response<ResBody>> + Clone,
    S::Future: Send + 'static,
    S::Error: 'static,
    N: BodyNameSource,
    R: RejectionResponse<ResBody>,
    ReqBody: Body,
    ReqBody::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = MultiResponseFuture<S, N, ReqBody, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let origin = Origin {
            grpc: is_grpc(&parts.headers),
            permit: false,
            retry_hint: self.config.retry_hint,
        };
        let shared = &self.config.shared;
        if shared.declared_too_large(&parts, body.size_hint().lower()) {
            let info = LockRejection::body_too_large(shared.own.max_body_bytes, origin.grpc);
            return MultiResponseFuture::rejected(info, self.config.rejection.clone(), origin);
        }
        let inner = take_ready(&mut self.inner);
        MultiResponseFuture::reading(parts, body, inner, self.config.clone(), origin)
    }
}

impl<S: Clone, N, R> Clone for MultiLockService<S, N, R> {
    fn clone(&self) -> Self {
        MultiLockService::new(self.inner.clone(), self.config.clone())
    }
}

impl<S: fmt::Debug, N: fmt::Debug, R> fmt::Debug for MultiLockService<S, N, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockService")
            .field("inner", &self.inner)
            .field("shared", &self.config.shared)
            .field("rejection", &std::any::type_name::<R>())
            .finish()
    }
}
