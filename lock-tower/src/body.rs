//! The response body of a [`LockService`](crate::LockService).

use std::fmt;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::hold::{Hold, LostFuture};

/// The error type of [`ResponseBody`]: the inner body's error, or the [`LockError`](crate::LockError) that
/// ended a held body because its lock was lost (downcast to find out which).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The hold's loss signal. In a `Mutex` only so that the body stays `Sync` (it is reached
/// with `get_mut`, never locked).
type SyncLostFuture = Mutex<LostFuture>;

pin_project! {
    /// The inner service's response body, or a rejection's body.
    ///
    /// With [`LockLayer::hold_until_body_end`](crate::LockLayer::hold_until_body_end) the lock
    /// guard rides in this body and is released when the body has ended (or is dropped, for
    /// example when the client goes away), so a streamed response is covered by the lock too:
    ///
    /// - the inner body is polled inside the guard's reentrancy scope, so code it drives that
    ///   takes the same lock with the same client re-enters instead of waiting for its own
    ///   request;
    /// - once the lock is lost (lease over, renewal failed, `max_hold`, force-unlocked), the
    ///   body stops: the inner body is dropped without being polled again and the next frame
    ///   is an error carrying the [`LockError`](crate::LockError), so the response is truncated visibly (hyper
    ///   resets the stream or closes the connection) instead of looking complete. A gRPC call's
    ///   response (`content-type: application/grpc…`) is ended properly instead: trailers with
    ///   `grpc-status: 10` (`ABORTED`) and the error as `grpc-message`, so the client sees a
    ///   status it can act on, not a reset stream. The loss is noticed even while the inner
    ///   body is pending.
    ///
    /// Errors of the inner body are passed on boxed ([`BoxError`]).
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner {
            #[pin]
            body: B,
            guard: Option<Hold>,
            lost: Option<SyncLostFuture>,
            // A gRPC call's loss ends the stream with `ABORTED` trailers instead of an error.
            grpc: bool,
        },
        Full {
            data: Option<Bytes>,
        },
    }
}

impl<B> ResponseBody<B> {
    /// Wraps an inner body.
    pub fn new(body: B) -> ResponseBody<B> {
        ResponseBody {
            kind: Kind::Inner {
                body,
                guard: None,
                lost: None,
                grpc: false,
            },
        }
    }

    /// A body of one chunk (empty chunks are not sent).
    pub fn full(data: impl Into<Bytes>) -> ResponseBody<B> {
        let data: Bytes = data.into();
        ResponseBody {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }

    /// An empty body.
    pub fn empty() -> ResponseBody<B> {
        ResponseBody {
            kind: Kind::Full { data: None },
        }
    }

    /// Wraps an inner body and keeps `guard` (one lock or several) until it has ended; `grpc`
    /// says whether the response answers a gRPC call.
    pub(crate) fn holding(body: B, guard: Hold, grpc: bool) -> ResponseBody<B> {
        ResponseBody {
            kind: Kind::Inner {
                body,
                lost: Some(Mutex::new(guard.lost_owned())),
                guard: Some(guard),
                grpc,
            },
        }
    }

    /// Whether this body still holds a lock (only in hold-until-body-end mode, until the
    /// body has ended).
    pub fn holds_lock(&self) -> bool {
        matches!(&self.kind, Kind::Inner { guard: Some(_), .. })
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut kind = self.project().kind;
        match kind.as_mut().project() {
            KindProj::Inner {
                mut body,
                guard,
                lost,
                grpc,
            } => {
                let Some(held) = guard.as_ref() else {
                    return body.poll_frame(cx).map_err(Into::into);
                };
                // The loss first, so that it is noticed even while the inner body is pending.
                let lost_now = lost.as_mut().map(|l| {
                    let l = l.get_mut().unwrap_or_else(PoisonError::into_inner);
                    l.as_mut().poll(cx)
                });
                if let Some(Poll::Ready(error)) = lost_now {
                    let grpc = *grpc;
                    // Drops the inner body (it stops working) and the guard.
                    kind.set(Kind::Full { data: None });
                    if grpc {
                        tracing::debug!(%error, "lock lost while the gRPC response streamed; ending it with ABORTED");
                        return Poll::Ready(Some(Ok(Frame::trailers(crate::grpc::lost_trailers(
                            &error,
                        )))));
                    }
                    tracing::debug!(%error, "lock lost while the response body streamed; ending it with an error");
                    return Poll::Ready(Some(Err(Box::new(error))));
                }
                let frame = std::task::ready!(held.sync_scope(|| body.as_mut().poll_frame(cx)));
                if frame.is_none() || matches!(frame, Some(Err(_))) || body.is_end_stream() {
                    // The body has ended (an error ends it too): release now rather than
                    // whenever the body is dropped.
                    drop(guard.take());
                    drop(lost.take());
                }
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body, .. } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body, .. } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

impl<B> Default for ResponseBody<B> {
    fn default() -> Self {
        ResponseBody::empty()
    }
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Inner { guard, .. } => f
                .debug_struct("ResponseBody")
                .field("inner", &std::any::type_name::<B>())
                .field("guard", guard)
                .finish(),
            Kind::Full { data } => f.debug_struct("ResponseBody").field("full", data).finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_send_and_sync_when_the_inner_body_is() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<ResponseBody<http_body_util::Empty<Bytes>>>();
    }
}
