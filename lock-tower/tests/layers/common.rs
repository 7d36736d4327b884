//! Shared helpers for the lock-tower integration tests.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::net::SocketAddr;
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

/// Whether `name` can be taken right now by an independent client.
pub async fn is_free(locks: &LockClient, name: &str) -> bool {
    match locks.lock(name).try_acquire(Duration::ZERO).await {
        Ok(guard) => {
            guard.release().await.unwrap();
            true
        }
        Err(e) if e.is_busy() => false,
        Err(e) => panic!("unexpected {e}"),
    }
}

/// How long a lock or permit given back by a dropped handler or body may take to be free in
/// these tests: a third of the 30 s lease the watchdog gives it, so free within this means
/// released, not expired (how fast is not judged: a loaded machine can take its time).
pub const RELEASED_WITHIN: Duration = Duration::from_secs(10);

/// How long until `name` becomes free (polling every 5 ms), or `None` within `limit`.
pub async fn freed_within(locks: &LockClient, name: &str, limit: Duration) -> Option<Duration> {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if is_free(locks, name).await {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

/// Serves `app` over HTTP on a free loopback port, in the background: its address.
pub async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// A new HTTP/1.1 connection to `addr` (driven in the background), to send requests on.
pub async fn connect<B>(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<B>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(connection);
    sender
}

/// A boxed `Send` future.
pub type BoxFuture<T> = std::pin::Pin<Box<dyn Future<Output = T> + Send>>;

/// A unary gRPC method written by hand (what tonic-build would generate, minus the server
/// code, which [`GrpcServer`] adds).
pub trait UnaryMethod: Clone + Send + Sync + 'static {
    /// The request message.
    type Request: prost::Message + Default + Send + 'static;
    /// The reply message.
    type Reply: prost::Message + Send + 'static;
    /// The service's full name (`package.Service`).
    const SERVICE: &'static str;
    /// The method's path (`/package.Service/Method`).
    const PATH: &'static str;

    fn call(
        &self,
        request: tonic::Request<Self::Request>,
    ) -> BoxFuture<Result<tonic::Response<Self::Reply>, tonic::Status>>;
}

/// Serves one [`UnaryMethod`] as a tonic service; calls of any other path are answered
/// `UNIMPLEMENTED`.
#[derive(Clone)]
pub struct GrpcServer<T>(pub T);

impl<T: UnaryMethod> tonic::server::NamedService for GrpcServer<T> {
    const NAME: &'static str = T::SERVICE;
}

impl<T: UnaryMethod> tonic::server::UnaryService<T::Request> for GrpcServer<T> {
    type Response = T::Reply;
    type Future = BoxFuture<Result<tonic::Response<T::Reply>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<T::Request>) -> Self::Future {
        self.0.call(request)
    }
}

impl<T: UnaryMethod> tower::Service<http::Request<tonic::body::Body>> for GrpcServer<T> {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            if request.uri().path() != T::PATH {
                return Ok(tonic::Status::unimplemented(request.uri().path()).into_http());
            }
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            Ok(grpc.unary(this, request).await)
        })
    }
}

/// Serves `router` (a tonic server with its layer and services) on a free loopback port, in
/// the background: its address.
pub async fn serve_grpc<L, ResBody>(router: tonic::transport::server::Router<L>) -> SocketAddr
where
    L: tower::Layer<tonic::service::Routes> + Send + 'static,
    L::Service: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<ResBody>>
        + Clone
        + Send
        + 'static,
    <L::Service as tower::Service<http::Request<tonic::body::Body>>>::Future: Send,
    <L::Service as tower::Service<http::Request<tonic::body::Body>>>::Error:
        Into<Box<dyn std::error::Error + Send + Sync>> + Send,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResBody::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let incoming =
        tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = incoming.local_addr().unwrap();
    tokio::spawn(router.serve_with_incoming(incoming));
    addr
}

/// Calls the unary method at `path` of the gRPC server at `addr`, over a new connection.
pub async fn call_unary<Request, Reply>(
    addr: SocketAddr,
    path: &'static str,
    request: tonic::Request<Request>,
) -> Result<Reply, tonic::Status>
where
    Request: prost::Message + Send + Sync + 'static,
    Reply: prost::Message + Default + Send + Sync + 'static,
{
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    grpc.unary(
        request,
        http::uri::PathAndQuery::from_static(path),
        tonic_prost::ProstCodec::default(),
    )
    .await
    .map(tonic::Response::into_inner)
}
