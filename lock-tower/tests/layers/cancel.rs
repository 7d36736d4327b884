//! Cancellation of the layers' futures against a real `redis-server`: a `LockService` response
//! future (of a `LockLayer`, one in read/write mode, or a `KeyedConcurrencyLimitLayer`) dropped
//! after k polls (k = 0, 1, 2, … until it completes), while it waits for a busy lock (or
//! permit) and while the handler runs, and a held response body dropped after j frames, never
//! leaves a lock behind: the lock key is gone from Redis within 2 s and the client tracks no
//! held lock.

use crate::common;

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use lock_runtime::LockGuard;
use lock_tests::RedisServer;
use lock_tower::name::UriPattern;
use lock_tower::{KeyedConcurrencyLimitLayer, LockClient, LockLayer, LockOptions, LockService};
use tower::{Layer, Service, ServiceExt};

/// How long a reply may take before it counts as lost.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);
/// Every test finishes within this, or fails.
const TEST_LIMIT: Duration = Duration::from_secs(120);
/// The most polls (or frames) before the future (or body) is dropped.
const MAX_STEPS: usize = 30;
/// The pause between two polls, so that Redis round trips make progress.
const BETWEEN_POLLS: Duration = Duration::from_millis(4);
const NAME: &str = "stock:1";

/// A body of `left` chunks, one every few milliseconds.
struct TickBody {
    left: usize,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl TickBody {
    fn new(chunks: usize) -> TickBody {
        TickBody {
            left: chunks,
            sleep: Box::pin(tokio::time::sleep(Duration::from_millis(3))),
        }
    }
}

impl http_body::Body for TickBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        std::task::ready!(self.sleep.as_mut().poll(cx));
        self.left -= 1;
        let next = tokio::time::Instant::now() + Duration::from_millis(3);
        self.sleep.as_mut().reset(next);
        Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(
            b"tick",
        )))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }
}

/// The inner service: a handler that takes `handler_time`, then answers with a `TickBody`.
fn handler(
    handler_time: Duration,
    chunks: usize,
) -> impl Service<
    Request<()>,
    Response = Response<TickBody>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<TickBody>, Infallible>> + Send + 'static,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |_: Request<()>| async move {
        tokio::time::sleep(handler_time).await;
        Ok::<_, Infallible>(Response::new(TickBody::new(chunks)))
    })
}

fn layer(locks: &LockClient) -> LockLayer<UriPattern> {
    LockLayer::new(locks.clone(), UriPattern::new("/stock/{id}", "stock:<id>"))
        .wait(Duration::from_secs(10))
}

fn request() -> Request<()> {
    Request::get("/stock/1").body(()).unwrap()
}

/// Lock keys (not the fencing counter, which outlives locks by design) left in Redis.
fn lock_keys(redis: &RedisServer) -> Vec<String> {
    redis
        .keys("*")
        .into_iter()
        .filter(|k| !k.ends_with(":fence") && !k.contains(":fence:"))
        .collect()
}

/// Waits up to 2 s for no lock key in Redis and no lock tracked by `locks`.
async fn assert_clean(redis: &RedisServer, locks: &LockClient, what: &str) {
    let start = Instant::now();
    loop {
        let keys = lock_keys(redis);
        let held = locks.held_locks();
        if keys.is_empty() && held == 0 {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{what}: 2 s after the drop, keys {keys:?} and {held} held lock(s) remain"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls `fut` once with the task's waker.
async fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    poll_fn(|cx| Poll::Ready(Pin::new(&mut *fut).poll(cx))).await
}

/// What the layer under test takes (and its rival holds).
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `LockLayer`: a mutex against a mutex.
    Mutex,
    /// `LockLayer::read_write`: the GET's read side against a writer.
    Read,
    /// `KeyedConcurrencyLimitLayer` with a limit of 1: a permit against the only other one.
    Permit,
}

/// The layer of `kind` around `inner`.
fn service_of<S>(locks: &LockClient, kind: Kind, inner: S) -> LockService<S, UriPattern> {
    let names = || UriPattern::new("/stock/{id}", "stock:<id>");
    let wait = Duration::from_secs(10);
    match kind {
        Kind::Mutex => layer(locks).layer(inner),
        Kind::Read => LockLayer::new(locks.clone(), names())
            .read_write()
            .wait(wait)
            .layer(inner),
        Kind::Permit => KeyedConcurrencyLimitLayer::new(locks.clone(), names(), 1)
            .wait(wait)
            .layer(inner),
    }
}

/// The rival's hold that excludes the layer's request, for 5 s at most.
async fn rival_hold(rival: &LockClient, kind: Kind) -> LockGuard {
    let options = LockOptions::new().lease(Duration::from_secs(5));
    match kind {
        Kind::Mutex => rival.lock(NAME).acquire_with(options).await,
        Kind::Read => rival.rw_lock(NAME).write().acquire_with(options).await,
        Kind::Permit => rival.semaphore(NAME, 1).acquire_with(options).await,
    }
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_future_dropped_after_any_number_of_polls_leaves_no_lock() {
    dropped_after_any_number_of_polls_leaves_nothing(Kind::Mutex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_side_future_dropped_after_any_number_of_polls_leaves_no_hold() {
    dropped_after_any_number_of_polls_leaves_nothing(Kind::Read).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_future_dropped_after_any_number_of_polls_leaves_no_permit() {
    dropped_after_any_number_of_polls_leaves_nothing(Kind::Permit).await;
}

async fn dropped_after_any_number_of_polls_leaves_nothing(kind: Kind) {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let rival = common::client(&redis, RESPONSE_TIMEOUT).await;
        let mut service = service_of(&locks, kind, handler(Duration::from_millis(40), 1));
        let mut states = Vec::new();
        let mut completed = false;
        for k in 0..=MAX_STEPS {
            // A rival holds the lock for the first 40 ms: the future first waits, then the
            // handler runs for 40 ms, then it completes.
            let held = rival_hold(&rival, kind).await;
            assert!(!lock_keys(&redis).is_empty(), "lock keys are not seen");
            let release = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(40)).await;
                held.release().await.unwrap();
            });
            service.ready().await.unwrap();
            let mut fut = Box::pin(service.call(request()));
            let mut done = None;
            for _ in 0..k {
                if let Poll::Ready(out) = poll_once(&mut fut).await {
                    done = Some(out);
                    break;
                }
                tokio::time::sleep(BETWEEN_POLLS).await;
            }
            let state = format!("{fut:?}");
            drop(fut);
            release.await.unwrap();
            if let Some(out) = done {
                let response = out.unwrap();
                assert_eq!(response.status(), StatusCode::OK);
                drop(response);
                assert_clean(
                    &redis,
                    &locks,
                    &format!("{kind:?}: completed after {k} polls"),
                )
                .await;
                completed = true;
                break;
            }
            states.push(state.clone());
            assert_clean(
                &redis,
                &locks,
                &format!("{kind:?}: dropped after {k} polls: {state}"),
            )
            .await;
        }
        assert!(
            completed,
            "{kind:?}: never completed within {MAX_STEPS} polls"
        );
        assert!(
            states.iter().any(|s| s.contains("\"acquiring\"")),
            "{kind:?}: never dropped while waiting: {states:?}"
        );
        assert!(
            states.iter().any(|s| s.contains("\"calling\"")),
            "{kind:?}: never dropped while the handler ran: {states:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_body_dropped_mid_stream_leaves_no_lock() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let chunks = 8;
        let mut service = layer(&locks)
            .hold_until_body_end()
            .layer(handler(Duration::from_millis(5), chunks));
        let mut completed = false;
        for j in 0..=MAX_STEPS {
            service.ready().await.unwrap();
            let response = service.call(request()).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            let mut body = response.into_body();
            assert!(body.holds_lock());
            assert!(!lock_keys(&redis).is_empty(), "lock keys are not seen");
            let mut ended = false;
            for _ in 0..j {
                match body.frame().await {
                    Some(frame) => {
                        frame.unwrap();
                    }
                    None => {
                        ended = true;
                        break;
                    }
                }
            }
            drop(body);
            assert_clean(&redis, &locks, &format!("body dropped after {j} frames")).await;
            if ended {
                completed = true;
                break;
            }
        }
        assert!(completed, "the body never ended within {MAX_STEPS} frames");
    })
    .await;
}
