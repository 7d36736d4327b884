//! Shared helpers for the lock-tower integration tests.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::time::Duration;

use lock_tests::RedisServer;
use lock_tower::LockClient;

/// Runs `fut`, failing the test if it takes longer than `limit`.
pub async fn bounded<F: Future>(limit: Duration, fut: F) -> F::Output {
    tokio::time::timeout(limit, fut)
        .await
        .expect("test took too long")
}

/// A client of `redis` whose replies time out after `response_timeout`.
pub async fn client(redis: &RedisServer, response_timeout: Duration) -> LockClient {
    lock_tests::client_with(redis, |b| {
        b.response_timeout(response_timeout)
            .connect_timeout(Duration::from_secs(2))
    })
    .await
}

/// Counts how many holders are inside at once (now, the most ever) and how many entered.
#[derive(Debug, Default)]
pub struct Gauge {
    now: std::sync::atomic::AtomicUsize,
    max: std::sync::atomic::AtomicUsize,
    entered: std::sync::atomic::AtomicUsize,
    left: std::sync::atomic::AtomicUsize,
}

/// One holder inside a [`Gauge`]; counted out on drop (completion or cancellation).
#[derive(Debug)]
pub struct Inside(std::sync::Arc<Gauge>);

impl Gauge {
    pub fn new() -> std::sync::Arc<Gauge> {
        std::sync::Arc::default()
    }

    /// Counts one holder in until the returned value is dropped.
    pub fn enter(self: &std::sync::Arc<Self>) -> Inside {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.now.fetch_add(1, SeqCst) + 1;
        self.max.fetch_max(now, SeqCst);
        self.entered.fetch_add(1, SeqCst);
        Inside(self.clone())
    }

    pub fn now(&self) -> usize {
        self.now.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn max(&self) -> usize {
        self.max.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn entered(&self) -> usize {
        self.entered.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Holders that left (finished or were dropped).
    pub fn left(&self) -> usize {
        self.left.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering::SeqCst;
        self.0.now.fetch_sub(1, SeqCst);
        self.0.left.fetch_add(1, SeqCst);
    }
}

/// Waits (polling every 5 ms) until `condition` holds; false if it does not within `limit`.
pub async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    loop {
        if condition() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Sends `request` to `app`: its status, headers and body text.
pub async fn send(
    app: &axum::Router,
    request: http::Request<axum::body::Body>,
) -> (http::StatusCode, http::HeaderMap, String) {
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    let response = app.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// A response body whose chunks come from a channel; ends when the sender is dropped.
pub struct ChannelBody(pub tokio::sync::mpsc::Receiver<bytes::Bytes>);

impl http_body::Body for ChannelBody {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(http_body::Frame::data(c))))
    }
}

/// The senders of the bodies [`streaming_handler`] has answered with, newest last.
pub type Senders = std::sync::Arc<std::sync::Mutex<Vec<tokio::sync::mpsc::Sender<bytes::Bytes>>>>;

/// A response body future of [`streaming_handler`].
pub type BodyFuture = std::pin::Pin<Box<dyn Future<Output = axum::body::Body> + Send>>;

/// An axum handler whose response body streams what the test sends through that body's
/// sender (the newest in `Senders`), and ends when the sender is dropped.
pub fn streaming_handler() -> (
    Senders,
    impl Fn() -> BodyFuture + Clone + Send + Sync + 'static,
) {
    let senders = Senders::default();
    let handler = {
        let senders = senders.clone();
        move || -> BodyFuture {
            let senders = senders.clone();
            Box::pin(async move {
                let (tx, rx) = tokio::sync::mpsc::channel(4);
                senders.lock().unwrap().push(tx);
                axum::body::Body::new(ChannelBody(rx))
            })
        }
    };
    (senders, handler)
}
