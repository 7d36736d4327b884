//! [`BufferedBody`]: the request body a [`MultiLockService`](crate::MultiLockService) read,
//! handed on to the inner service.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

/// The request body a [`MultiLockLayer`](crate::MultiLockLayer) hands on to the inner service:
/// the bytes it read to compute the lock names, exactly as they arrived (one data frame), then
/// the request's trailers if it had any.
///
/// Any axum `Router` (under `route_layer` or `layer`) and tonic's `Routes` accept it, as
/// they accept any body with `Bytes` data; in axum it becomes the handler's `Body` (`Bytes`,
/// `String` and `Json` extractors read it as usual).
///
/// ```
/// use http_body::Body;
/// use lock_tower::BufferedBody;
///
/// let body = BufferedBody::new("{\"items\": []}");
/// assert_eq!(body.size_hint().exact(), Some(13));
/// ```
#[derive(Debug, Default)]
pub struct BufferedBody {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl BufferedBody {
    /// A body of `data` (no frame when it is empty), without trailers.
    pub fn new(data: impl Into<Bytes>) -> BufferedBody {
        BufferedBody::with_trailers(data.into(), None)
    }

    pub(crate) fn with_trailers(data: Bytes, trailers: Option<HeaderMap>) -> BufferedBody {
        BufferedBody {
            data: (!data.is_empty()).then_some(data),
            trailers,
        }
    }
}

impl Body for BufferedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(data) = this.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn the_body_yields_its_bytes_then_its_trailers() {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-checksum", "1".parse().unwrap());
        let body = BufferedBody::with_trailers(Bytes::from_static(b"abc"), Some(trailers.clone()));
        let collected = body.collect().await.unwrap();
        assert_eq!(collected.trailers(), Some(&trailers));
        assert_eq!(collected.to_bytes(), "abc");
        let empty = BufferedBody::new(Bytes::new());
        assert!(empty.is_end_stream());
    }

    #[test]
    fn the_body_is_send_sync_and_unpin() {
        fn check<T: Send + Sync + Unpin + 'static>() {}
        check::<BufferedBody>();
    }
}
