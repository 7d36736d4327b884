//! [`ResponseFuture`]: acquire the lock, then call the inner service with the guard riding
//! along; the response future of every service of the crate, once it knows what to lock.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::{Request, Response};
use lock_runtime::LockError;
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::access::Access;
use crate::body::ResponseBody;
use crate::hold::Hold;
use crate::rejection::{DEFAULT_RETRY_AFTER, LockRejection, RejectionResponse};

pub(crate) type AcquireFuture = Pin<Box<dyn Future<Output = Result<Hold, LockError>> + Send>>;

/// What a rejection needs to know about the request and the layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin {
    /// The request is a gRPC call.
    pub(crate) grpc: bool,
    /// The layer takes semaphore permits
    /// ([`KeyedConcurrencyLimitLayer`](crate::KeyedConcurrencyLimitLayer)).
    pub(crate) permit: bool,
    /// The layer's retry hint for busy and limited rejections.
    pub(crate) retry_hint: Duration,
}

impl Origin {
    /// The rejection of a request of this origin for `error`.
    pub(crate) fn rejection(self, error: LockError) -> LockRejection {
        let rejection = if self.permit {
            LockRejection::permit_limit(error, self.grpc)
        } else {
            LockRejection::new(error, self.grpc)
        };
        rejection.with_retry_hint(self.retry_hint)
    }
}

/// The inner call run under the hold: dropped if a lock is lost; hands the hold back.
type LockedFuture<T> = Pin<Box<dyn Future<Output = (Result<T, LockError>, Hold)> + Send>>;

pin_project! {
    /// The response future of [`LockService`](crate::LockService) (and, once the request body
    /// is read, of [`MultiLockService`](crate::MultiLockService)).
    ///
    /// Acquiring → calling: the lock (or permit) is taken first, then the inner service is
    /// called inside the guard's reentrancy scope with the guard riding in this future. Dropping
    /// the future (a client that went away) drops the guard, which releases the lock or gives
    /// the permit back at once; dropped while it waits, it leaves nothing taken.
    pub struct ResponseFuture<S, ReqBody, R>
    where
        S: Service<Request<ReqBody>>,
    {
        #[pin]
        state: State<S, ReqBody>,
        rejection: Arc<R>,
        hold_body: bool,
        origin: Origin,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqBody>
    where
        S: Service<Request<ReqBody>>,
    {
        // No lock name: the request passes through unlocked.
        Unlocked {
            #[pin]
            fut: S::Future,
        },
        // Waiting for the lock, with the ready inner service and the request.
        Acquiring {
            acquire: AcquireFuture,
            inner: Option<S>,
            request: Option<Request<ReqBody>>,
            access: Option<Access>,
        },
        // The inner service runs under the lock.
        Calling {
            fut: LockedFuture<Result<S::Response, S::Error>>,
        },
        // Rejected before acquiring (an invalid lock name).
        Rejected {
            rejection: Option<LockRejection>,
        },
    }
}

impl<S, ReqBody, R> ResponseFuture<S, ReqBody, R>
where
    S: Service<Request<ReqBody>>,
{
    pub(crate) fn unlocked(fut: S::Future, rejection: Arc<R>) -> Self {
        ResponseFuture {
            state: State::Unlocked { fut },
            rejection,
            hold_body: false,
            origin: Origin {
                grpc: false,
                permit: false,
                retry_hint: DEFAULT_RETRY_AFTER,
            },
        }
    }

    pub(crate) fn acquiring(
        acquire: AcquireFuture,
        inner: S,
        request: Request<ReqBody>,
        access: Option<Access>,
        rejection: Arc<R>,
        hold_body: bool,
        origin: Origin,
    ) -> Self {
        ResponseFuture {
            state: State::Acquiring {
                acquire,
                inner: Some(inner),
                request: Some(request),
                access,
            },
            rejection,
            hold_body,
            origin,
        }
    }

    pub(crate) fn rejected(error: LockError, rejection: Arc<R>, origin: Origin) -> Self {
        ResponseFuture::rejected_with(origin.rejection(error), rejection, origin)
    }

    pub(crate) fn rejected_with(info: LockRejection, rejection: Arc<R>, origin: Origin) -> Self {
        ResponseFuture {
            state: State::Rejected {
                rejection: Some(info),
            },
            rejection,
            hold_body: false,
            origin,
        }
    }
}

impl<S, ReqBody, ResBody: 'static, R> Future for ResponseFuture<S, ReqBody, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    R: RejectionResponse<ResBody>,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Unlocked { fut } => {
                    let response = ready!(fut.poll(cx))?;
                    return Poll::Ready(Ok(response.map(ResponseBody::new)));
                }
                StateProj::Acquiring {
                    acquire,
                    inner,
                    request,
                    access,
                } => {
                    let hold = match ready!(acquire.as_mut().poll(cx)) {
                        Ok(hold) => hold,
                        Err(error) => {
                            let info = this.origin.rejection(error);
                            return Poll::Ready(Ok(reject(&**this.rejection, info)));
                        }
                    };
                    let mut inner = inner.take().expect("polled after completion");
                    let mut request = request.take().expect("polled after completion");
                    hold.describe(request.extensions_mut(), *access);
                    // `inner` is the instance that went through `poll_ready`.
                    let fut = inner.call(request);
                    let fut: LockedFuture<_> = Box::pin(async move {
                        let out = hold.run(fut).await;
                        (out, hold)
                    });
                    this.state.set(State::Calling { fut });
                }
                StateProj::Calling { fut } => {
                    let (out, guard) = ready!(fut.as_mut().poll(cx));
                    return Poll::Ready(match out {
                        Ok(Ok(response)) if *this.hold_body => {
                            let grpc = this.origin.grpc;
                            Ok(response.map(|body| ResponseBody::holding(body, guard, grpc)))
                        }
                        Ok(Ok(response)) => {
                            // Released in the background within milliseconds.
                            drop(guard);
                            Ok(response.map(ResponseBody::new))
                        }
                        Ok(Err(error)) => Err(error),
                        Err(lost) => Ok(reject(&**this.rejection, this.origin.rejection(lost))),
                    });
                }
                StateProj::Rejected { rejection } => {
                    let info = rejection.take().expect("polled after completion");
                    return Poll::Ready(Ok(reject(&**this.rejection, info)));
                }
            }
        }
    }
}

fn reject<R, B>(rejection: &R, rejection_info: LockRejection) -> Response<ResponseBody<B>>
where
    R: RejectionResponse<B>,
{
    tracing::debug!(
        error = %rejection_info,
        grpc = rejection_info.is_grpc(),
        permit = rejection_info.is_permit_limit(),
        "request rejected by the lock layer"
    );
    let mut response = rejection.rejection_response(rejection_info.clone());
    response.extensions_mut().insert(rejection_info);
    response
}

impl<S, ReqBody, R> fmt::Debug for ResponseFuture<S, ReqBody, R>
where
    S: Service<Request<ReqBody>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Unlocked { .. } => "unlocked",
            State::Acquiring { .. } => "acquiring",
            State::Calling { .. } => "calling",
            State::Rejected { .. } => "rejected",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .field("hold_body", &self.hold_body)
            .field("grpc", &self.origin.grpc)
            .field("permit", &self.origin.permit)
            .finish()
    }
}
