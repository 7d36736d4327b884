//! `LockLayer::read_write` in axum 0.8 against a real `redis-server` on loopback: reads of one
//! name run together while a write waits for them (or is rejected with 423), the classifier
//! overrides the method, and Redis down is 503.

#![cfg(feature = "axum")]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Extension, Router};
use common::Gauge;
use common::send;
use http::request::Parts;
use http::{Request, StatusCode};
use lock_tests::RedisServer;
use lock_tower::{Access, HeldLock, LockLayer, LockRejection, RejectionKind, name};
use tower::ServiceExt;

/// How long a reply may take before it counts as lost.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(300);
/// Every test finishes within this, or fails.
const TEST_LIMIT: Duration = Duration::from_secs(60);

/// What the handlers saw.
#[derive(Default)]
struct Docs {
    readers: Arc<Gauge>,
    writers: Arc<Gauge>,
    /// The most readers inside when a writer entered, and writers when a reader entered.
    overlap: AtomicUsize,
    /// Readers that had left when the last writer entered.
    readers_left_before_write: AtomicUsize,
    /// Whether a reader waits for a second one.
    solo: bool,
}

/// A reader: waits (up to 2 s, unless `solo`) until a second reader is inside too, then reads
/// for 200 ms.
async fn read(State(docs): State<Arc<Docs>>, Extension(held): Extension<HeldLock>) -> String {
    let _inside = docs.readers.enter();
    docs.overlap.fetch_max(docs.writers.now(), Ordering::SeqCst);
    if !docs.solo {
        common::eventually(Duration::from_secs(2), || docs.readers.now() >= 2).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    format!("{:?} {}", held.access(), issued(&held))
}

async fn write(State(docs): State<Arc<Docs>>, Extension(held): Extension<HeldLock>) -> String {
    let _inside = docs.writers.enter();
    docs.overlap.fetch_max(docs.readers.now(), Ordering::SeqCst);
    docs.readers_left_before_write
        .store(docs.readers.left(), Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(50)).await;
    format!("{:?} {}", held.access(), issued(&held))
}

/// The token of a read/write layer's hold: issued with the grant, either side.
fn issued(held: &HeldLock) -> u64 {
    held.issued_token()
        .expect("a read/write layer's token comes with the grant")
}

fn app(layer: LockLayer<name::PathParams>, docs: &Arc<Docs>) -> Router {
    Router::new()
        .route("/docs/{id}", get(read).post(write))
        .route("/docs/{id}/quote", post(read))
        .route("/health", get(|| async { "ok" }))
        .layer(layer)
        .with_state(docs.clone())
}

fn get_doc(id: u32) -> Request<Body> {
    Request::get(format!("/docs/{id}"))
        .body(Body::empty())
        .unwrap()
}

fn post_doc(path: &str) -> Request<Body> {
    Request::post(path).body(Body::empty()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gets_run_together_while_a_post_is_rejected_or_waits_for_them() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let docs = Arc::new(Docs::default());
        // Two instances, each with its own client, waiting up to 5 s.
        let a = app(
            LockLayer::new(common::client(&redis, RESPONSE_TIMEOUT).await, "doc:<id>")
                .read_write()
                .wait(Duration::from_secs(5)),
            &docs,
        );
        let b_client = common::client(&redis, RESPONSE_TIMEOUT).await;
        let b = app(
            LockLayer::new(b_client.clone(), "doc:<id>")
                .read_write()
                .wait(Duration::from_secs(5)),
            &docs,
        );
        // A third that does not wait.
        let now = app(
            LockLayer::new(b_client, "doc:<id>")
                .read_write()
                .wait(Duration::ZERO),
            &docs,
        );

        let reads = [a.clone(), b.clone()]
            .map(|app| tokio::spawn(async move { send(&app, get_doc(1)).await }));
        assert!(
            common::eventually(Duration::from_secs(5), || docs.readers.now() == 2).await,
            "the two GETs of one document did not run together (max {})",
            docs.readers.max()
        );

        // A write while both reads are in: rejected at once with 423 …
        let response = now.clone().oneshot(post_doc("/docs/1")).await.unwrap();
        assert_eq!(response.status(), StatusCode::LOCKED);
        assert_eq!(response.headers()["retry-after"], "1");
        let rejection = response.extensions().get::<LockRejection>().unwrap();
        assert_eq!(rejection.kind(), RejectionKind::Busy);
        assert_eq!(docs.writers.entered(), 0, "the POST ran beside readers");

        // … or, with a wait, served once they are done.
        let (status, _, body) = send(&a, post_doc("/docs/1")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body.starts_with("Some(Write) "), "{body}");
        assert_eq!(
            docs.readers_left_before_write.load(Ordering::SeqCst),
            2,
            "the POST ran before both GETs were done"
        );
        assert_eq!(
            docs.overlap.load(Ordering::SeqCst),
            0,
            "a write overlapped a read"
        );

        let mut tokens = Vec::new();
        for read in reads {
            let (status, _, body) = read.await.unwrap();
            assert_eq!(status, StatusCode::OK, "{body}");
            let (access, token) = body.split_once(' ').unwrap();
            assert_eq!(access, "Some(Read)");
            tokens.push(token.parse::<u64>().unwrap());
        }
        let write_token: u64 = body.split_once(' ').unwrap().1.parse().unwrap();
        assert!(
            tokens.iter().all(|&t| t < write_token),
            "the writer's token {write_token} is not above the readers' {tokens:?}"
        );
        assert_eq!(docs.readers.max(), 2);

        // Another document is not affected by the first one's writers.
        let (status, _, _) = send(&now, post_doc("/docs/2")).await;
        assert_eq!(status, StatusCode::OK);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_classifier_makes_a_post_read_and_a_get_write() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let docs = Arc::new(Docs::default());
        let classify = |request: &Parts| {
            if request.uri.path().ends_with("/quote") {
                Access::Read
            } else {
                Access::of_request(request)
            }
        };
        let layer = LockLayer::new(common::client(&redis, RESPONSE_TIMEOUT).await, "doc:<id>")
            .access(classify)
            .wait(Duration::from_secs(5));
        assert!(layer.is_read_write());
        let app = app(layer, &docs);
        let quotes = (0..2).map(|_| {
            let app = app.clone();
            tokio::spawn(async move { send(&app, post_doc("/docs/7/quote")).await })
        });
        for quote in quotes.collect::<Vec<_>>() {
            let (status, _, body) = quote.await.unwrap();
            assert_eq!(status, StatusCode::OK, "{body}");
            assert!(body.starts_with("Some(Read) "), "{body}");
        }
        assert_eq!(docs.readers.max(), 2, "the two quotes did not run together");

        // Everything else still goes by method; `/docs/7` POST writes.
        let (status, _, body) = send(&app, post_doc("/docs/7")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.starts_with("Some(Write) "), "{body}");

        // A classifier that makes every request write: two GETs never overlap.
        let docs = Arc::new(Docs {
            solo: true,
            ..Docs::default()
        });
        let all_write = app_with_reads_as_writes(&redis, &docs).await;
        let gets: Vec<_> = (0..2)
            .map(|_| {
                let app = all_write.clone();
                tokio::spawn(async move { send(&app, get_doc(3)).await })
            })
            .collect();
        for get in gets {
            let (status, _, body) = get.await.unwrap();
            assert_eq!(status, StatusCode::OK, "{body}");
            assert!(body.starts_with("Some(Write) "), "{body}");
        }
        assert_eq!(docs.readers.max(), 1, "two writes overlapped");
    })
    .await;
}

async fn app_with_reads_as_writes(redis: &RedisServer, docs: &Arc<Docs>) -> Router {
    let layer = LockLayer::new(common::client(redis, RESPONSE_TIMEOUT).await, "doc:<id>")
        .access(|_: &Parts| Access::Write)
        .wait(Duration::from_secs(10));
    app(layer, docs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_is_503_in_read_write_mode() {
    common::bounded(TEST_LIMIT, async {
        let mut redis = RedisServer::start();
        let docs = Arc::new(Docs::default());
        let app = app(
            LockLayer::new(common::client(&redis, RESPONSE_TIMEOUT).await, "doc:<id>").read_write(),
            &docs,
        );
        assert_eq!(send(&app, post_doc("/docs/1")).await.0, StatusCode::OK);
        redis.stop();
        // The read side (the write side is taken like the mutex).
        let response = app.clone().oneshot(get_doc(1)).await.unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response.extensions().get::<LockRejection>().unwrap().kind(),
            RejectionKind::Unavailable
        );
        assert_eq!(docs.readers.entered(), 0, "a read ran without its lock");
        assert_eq!(docs.writers.entered(), 1, "a write ran without its lock");
        let (status, _, body) =
            send(&app, Request::get("/health").body(Body::empty()).unwrap()).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    })
    .await;
}
