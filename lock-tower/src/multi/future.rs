//! [`MultiResponseFuture`]: read the body (bounded), compute the names, then go on as the
//! shared [`ResponseFuture`] (acquiring → calling).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BufMut, BytesMut};
use http::request::Parts;
use http::{HeaderMap, Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use tower_service::Service;

use super::Bounds;
use super::buffer::BufferedBody;
use crate::body::{BoxError, ResponseBody};
use crate::config::Config;
use crate::name::{BodyNameSource, invalid_body};
use crate::rejection::{LockRejection, RejectionResponse};
use crate::response::{Origin, ResponseFuture};

/// Frames read in one poll before yielding to the executor (a body that is always ready
/// must not starve the other tasks of the worker).
const FRAMES_PER_POLL: usize = 64;

pin_project! {
    /// The response future of [`MultiLockService`](crate::MultiLockService).
    ///
    /// Reading → acquiring → calling: the request body is read first (bounded, before any lock
    /// is taken), then the locks it names are taken together, then the inner service is called
    /// inside the scope of every lock with the guards riding in this future. Dropping the
    /// future (a client that went away) drops the guards, which releases every lock at once;
    /// dropped while it reads or waits, it leaves nothing taken.
    pub struct MultiResponseFuture<S, N, ReqBody, R>
    where
        S: Service<Request<BufferedBody>>,
    {
        #[pin]
        state: State<S, N, ReqBody, R>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, N, ReqBody, R>
    where
        S: Service<Request<BufferedBody>>,
    {
        // Reading the request body.
        Reading {
            #[pin]
            body: ReqBody,
            read: Option<Read<S, N, R>>,
        },
        // The body is in (or the request is rejected): the shared future takes over.
        Locked {
            #[pin]
            fut: ResponseFuture<S, BufferedBody, R>,
        },
    }
}

/// What the reading state keeps besides the body.
struct Read<S, N, R> {
    parts: Parts,
    inner: S,
    config: Config<N, Bounds, R>,
    origin: Origin,
    data: BytesMut,
    trailers: Option<HeaderMap>,
}

/// How reading the body ended.
enum Outcome {
    Complete,
    TooLarge,
    Failed(BoxError),
}

impl<S, N, R> Read<S, N, R>
where
    S: Service<Request<BufferedBody>>,
    N: BodyNameSource,
{
    /// Where the request goes once its body is read.
    fn finish(self, outcome: Outcome) -> ResponseFuture<S, BufferedBody, R> {
        let Config {
            shared, rejection, ..
        } = self.config;
        let origin = self.origin;
        match outcome {
            Outcome::TooLarge => {
                let info = LockRejection::body_too_large(shared.own.max_body_bytes, origin.grpc);
                ResponseFuture::rejected_with(info, rejection, origin)
            }
            Outcome::Failed(error) => {
                tracing::debug!(%error, "the request body could not be read");
                let error = invalid_body("the request body could not be read");
                ResponseFuture::rejected(error, rejection, origin)
            }
            Outcome::Complete => {
                let data = self.data.freeze();
                match shared.acquire(&self.parts, &data) {
                    Err(error) => ResponseFuture::rejected(error, rejection, origin),
                    Ok(acquire) => {
                        let body = BufferedBody::with_trailers(data, self.trailers);
                        ResponseFuture::acquiring(
                            acquire,
                            self.inner,
                            Request::from_parts(self.parts, body),
                            None,
                            rejection,
                            shared.hold_body,
                            origin,
                        )
                    }
                }
            }
        }
    }
}

impl<S, N, ReqBody, R> MultiResponseFuture<S, N, ReqBody, R>
where
    S: Service<Request<BufferedBody>>,
    ReqBody: Body,
{
    pub(crate) fn reading(
        parts: Parts,
        body: ReqBody,
        inner: S,
        config: Config<N, Bounds, R>,
        origin: Origin,
    ) -> Self {
        let expected = usize::try_from(body.size_hint().lower()).unwrap_or(usize::MAX);
        let data = BytesMut::with_capacity(expected.min(config.shared.own.max_body_bytes));
        let read = Read {
            parts,
            inner,
            config,
            origin,
            data,
            trailers: None,
        };
        MultiResponseFuture {
            state: State::Reading {
                body,
                read: Some(read),
            },
        }
    }

    pub(crate) fn rejected(info: LockRejection, rejection: Arc<R>, origin: Origin) -> Self {
        MultiResponseFuture {
            state: State::Locked {
                fut: ResponseFuture::rejected_with(info, rejection, origin),
            },
        }
    }
}

/// Reads frames of `body` into `data` and `trailers` until the body ends, passes the bound, fails, or
/// [`FRAMES_PER_POLL`] frames have been read (then wakes itself and yields).
fn read_frames<B>(
    mut body: Pin<&mut B>,
    data: &mut BytesMut,
    trailers: &mut Option<HeaderMap>,
    max: usize,
    cx: &mut Context<'_>,
) -> Poll<Outcome>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    for _ in 0..FRAMES_PER_POLL {
        let frame = match ready!(body.as_mut().poll_frame(cx)) {
            None => return Poll::Ready(Outcome::Complete),
            Some(Err(error)) => return Poll::Ready(Outcome::Failed(error.into())),
            Some(Ok(frame)) => frame,
        };
        match frame.into_data() {
            Ok(mut chunk) => {
                if chunk.remaining() > max.saturating_sub(data.len()) {
                    return Poll::Ready(Outcome::TooLarge);
                }
                while chunk.has_remaining() {
                    let piece = chunk.chunk();
                    let len = piece.len();
                    data.put_slice(piece);
                    chunk.advance(len);
                }
            }
            Err(frame) => {
                if let Ok(more) = frame.into_trailers() {
                    trailers.get_or_insert_with(HeaderMap::new).extend(more);
                }
            }
        }
    }
    cx.waker().wake_by_ref();
    Poll::Pending
}

impl<S, N, ReqBody, ResBody: 'static, R> Future for MultiResponseFuture<S, N, ReqBody, R>
where
    S: Service<Request<BufferedBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    N: BodyNameSource,
    R: RejectionResponse<ResBody>,
    ReqBody: Body,
    ReqBody::Error: Into<BoxError>,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                StateProj::Locked { fut } => return fut.poll(cx),
                StateProj::Reading { body, read } => {
                    let r = read.as_mut().expect("polled after completion");
                    let max = r.config.shared.own.max_body_bytes;
                    let outcome = ready!(read_frames(body, &mut r.data, &mut r.trailers, max, cx));
                    let read = read.take().expect("polled after completion");
                    state.set(State::Locked {
                        fut: read.finish(outcome),
                    });
                }
            }
        }
    }
}

impl<S, N, ReqBody, R> fmt::Debug for MultiResponseFuture<S, N, ReqBody, R>
where
    S: Service<Request<BufferedBody>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            State::Reading { read, .. } => f
                .debug_struct("MultiResponseFuture")
                .field("state", &"reading")
                .field("bytes_read", &read.as_ref().map_or(0, |r| r.data.len()))
                .finish(),
            State::Locked { fut } => f
                .debug_struct("MultiResponseFuture")
                .field("state", fut)
                .finish(),
        }
    }
}
