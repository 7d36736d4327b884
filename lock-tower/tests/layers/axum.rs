//! `LockLayer` in axum 0.8 against a real `redis-server` on loopback: mutual exclusion across
//! two app instances, rejections (423, 503, 400), routing (404, pass-through), client
//! disconnects and hold-until-body-end.

#![cfg(feature = "axum")]

use crate::common;

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Extension, Router};
use bytes::Bytes;
use common::{ChannelBody, RELEASED_WITHIN, freed_within, is_free, send};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use lock_tests::RedisServer;
use lock_tower::name::{self, UriPattern};
use lock_tower::{HeldLock, LockLayer, LockOptions, LockRejection, RejectionKind};
use tokio::sync::{Notify, mpsc};
use tower::ServiceExt;

/// How long a reply may take before it counts as lost.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(300);
/// Every test finishes within this, or fails.
const TEST_LIMIT: Duration = Duration::from_secs(60);

/// Measures, in the handler, how many requests run at once: per id and in total.
#[derive(Default)]
struct Probe {
    hold: Duration,
    per_id: Mutex<HashMap<String, Arc<AtomicUsize>>>,
    max_same_id: AtomicUsize,
    total: AtomicUsize,
    max_total: AtomicUsize,
    entered: Notify,
    finished: AtomicUsize,
    dropped: AtomicUsize,
}

impl Probe {
    fn new(hold: Duration) -> Arc<Probe> {
        Arc::new(Probe {
            hold,
            ..Probe::default()
        })
    }
}

/// Counts a handler in; counts it out on drop (completion or cancellation).
struct Inside {
    probe: Arc<Probe>,
    same: Arc<AtomicUsize>,
    done: bool,
}

impl Inside {
    fn enter(probe: &Arc<Probe>, id: &str) -> Inside {
        let same = probe
            .per_id
            .lock()
            .unwrap()
            .entry(id.to_owned())
            .or_default()
            .clone();
        let now = same.fetch_add(1, Ordering::SeqCst) + 1;
        probe.max_same_id.fetch_max(now, Ordering::SeqCst);
        let total = probe.total.fetch_add(1, Ordering::SeqCst) + 1;
        probe.max_total.fetch_max(total, Ordering::SeqCst);
        probe.entered.notify_waiters();
        Inside {
            probe: probe.clone(),
            same,
            done: false,
        }
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        self.same.fetch_sub(1, Ordering::SeqCst);
        self.probe.total.fetch_sub(1, Ordering::SeqCst);
        if self.done {
            self.probe.finished.fetch_add(1, Ordering::SeqCst);
        } else {
            self.probe.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

async fn reserve(
    State(probe): State<Arc<Probe>>,
    Path(id): Path<String>,
    Extension(held): Extension<HeldLock>,
) -> String {
    let mut inside = Inside::enter(&probe, &id);
    tokio::time::sleep(probe.hold).await;
    inside.done = true;
    // On demand: the first ask is a round trip, checked against the holder.
    let token = held
        .fencing_token()
        .await
        .expect("asked while the request holds");
    format!("{} {token}", held.name())
}

async fn health() -> &'static str {
    "ok"
}

fn app(layer: LockLayer<name::PathParams>, probe: Arc<Probe>) -> Router {
    Router::new()
        .route("/stock/{id}/reserve", post(reserve))
        .route("/health", get(health))
        .layer(layer)
        .with_state(probe)
}

fn post_to(uri: &str) -> Request<Body> {
    Request::post(uri).body(Body::empty()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_id_requests_never_overlap_across_two_app_instances() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let probe = Probe::new(Duration::from_millis(15));
        let a = app(
            LockLayer::new(common::client(&redis, RESPONSE_TIMEOUT).await, "stock:<id>"),
            probe.clone(),
        );
        let b = app(
            LockLayer::new(common::client(&redis, RESPONSE_TIMEOUT).await, "stock:<id>"),
            probe.clone(),
        );
        let mut tasks = Vec::new();
        for i in 0..24 {
            let app = if i % 2 == 0 { a.clone() } else { b.clone() };
            tasks.push(tokio::spawn(async move {
                send(&app, post_to("/stock/42/reserve")).await
            }));
        }
        let mut tokens = Vec::new();
        for t in tasks {
            let (status, _, body) = t.await.unwrap();
            assert_eq!(status, StatusCode::OK, "{body}");
            let (name, token) = body.split_once(' ').unwrap();
            assert_eq!(name, "stock:42");
            tokens.push(token.parse::<u64>().unwrap());
        }
        assert_eq!(probe.finished.load(Ordering::SeqCst), 24);
        assert_eq!(
            probe.max_same_id.load(Ordering::SeqCst),
            1,
            "two requests for one id ran in the handler at once"
        );
        tokens.sort_unstable();
        tokens.dedup();
        assert_eq!(tokens.len(), 24, "every request had its own fencing token");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn different_ids_run_in_parallel() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let probe = Probe::new(Duration::from_millis(300));
        let app = app(
            LockLayer::new(common::client(&redis, RESPONSE_TIMEOUT).await, "stock:<id>"),
            probe.clone(),
        );
        let mut tasks = Vec::new();
        for id in 0..6 {
            let app = app.clone();
            tasks.push(tokio::spawn(async move {
                send(&app, post_to(&format!("/stock/{id}/reserve"))).await
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap().0, StatusCode::OK);
        }
        assert!(
            probe.max_total.load(Ordering::SeqCst) >= 3,
            "different ids did not overlap (ran serialised): max {}",
            probe.max_total.load(Ordering::SeqCst)
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_lock_is_423_with_retry_after_from_the_holders_ttl() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let probe = Probe::new(Duration::ZERO);
        let layer = LockLayer::new(locks.clone(), "stock:<id>")
            .wait(Duration::from_millis(100))
            .retry_after(Duration::from_secs(10));
        let app = app(layer, probe.clone());

        let holder = locks
            .lock("stock:7")
            .acquire_with(LockOptions::new().lease(Duration::from_millis(4500)))
            .await
            .unwrap();
        let started = Instant::now();
        let response = app
            .clone()
            .oneshot(post_to("/stock/7/reserve"))
            .await
            .unwrap();
        assert!(
            started.elapsed() >= Duration::from_millis(100),
            "did not wait"
        );
        assert_eq!(response.status(), StatusCode::LOCKED);
        let retry: u64 = response.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            (4..=5).contains(&retry),
            "Retry-After {retry} is not the holder's TTL"
        );
        let rejection = response.extensions().get::<LockRejection>().unwrap();
        assert_eq!(rejection.kind(), RejectionKind::Busy);
        assert!(rejection.error().is_busy());
        assert_eq!(probe.max_total.load(Ordering::SeqCst), 0, "handler ran");

        // Configurable status.
        let conflict = LockLayer::new(locks.clone(), "stock:<id>")
            .wait(Duration::ZERO)
            .busy_status(StatusCode::CONFLICT);
        let (status, headers, _) =
            send(&app_with(conflict, &probe), post_to("/stock/7/reserve")).await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert!(headers.contains_key("retry-after"));

        // Free again: served.
        holder.release().await.unwrap();
        assert_eq!(
            send(&app, post_to("/stock/7/reserve")).await.0,
            StatusCode::OK
        );
    })
    .await;
}

/// A watchdog-renewed holder always has about 30 s of TTL left: the 423's `Retry-After` is the
/// layer's hint (default 1 s) instead, and never more than the hint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_of_a_watchdog_renewed_holder_is_the_layers_hint() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let probe = Probe::new(Duration::ZERO);
        let _holder = locks.lock("stock:8").acquire().await.unwrap();
        for (layer, expected) in [
            (LockLayer::new(locks.clone(), "stock:<id>"), "1"),
            (
                LockLayer::new(locks.clone(), "stock:<id>")
                    .retry_after(Duration::from_millis(7200)),
                "8",
            ),
        ] {
            let (status, headers, _) = send(
                &app_with(layer.wait(Duration::ZERO), &probe),
                post_to("/stock/8/reserve"),
            )
            .await;
            assert_eq!(status, StatusCode::LOCKED);
            assert_eq!(headers["retry-after"], expected);
        }
    })
    .await;
}

fn app_with(layer: LockLayer<name::PathParams>, probe: &Arc<Probe>) -> Router {
    app(layer, probe.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_is_503_and_requests_without_the_param_pass_through() {
    common::bounded(TEST_LIMIT, async {
        let mut redis = RedisServer::start();
        let probe = Probe::new(Duration::ZERO);
        let app = app(
            LockLayer::new(common::client(&redis, RESPONSE_TIMEOUT).await, "stock:<id>"),
            probe.clone(),
        );
        assert_eq!(
            send(&app, post_to("/stock/1/reserve")).await.0,
            StatusCode::OK
        );

        redis.stop();
        let started = Instant::now();
        let response = app
            .clone()
            .oneshot(post_to("/stock/1/reserve"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response.extensions().get::<LockRejection>().unwrap().kind(),
            RejectionKind::Unavailable
        );
        assert!(started.elapsed() < Duration::from_secs(15));
        assert_eq!(
            probe.finished.load(Ordering::SeqCst),
            1,
            "handler ran without the lock"
        );

        // `/health` has no `{id}`: it never touches Redis, so it still works.
        let (status, _, body) =
            send(&app, Request::get("/health").body(Body::empty()).unwrap()).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_stay_404_with_route_layer() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        // A key for *every* path, so only `route_layer` keeps the lock off unknown routes.
        let layer = LockLayer::new(locks.clone(), UriPattern::new("/{*path}", "any:<path>"))
            .wait(Duration::ZERO);
        let app: Router = Router::new()
            .route("/stock/{id}/reserve", post(|| async { "reserved" }))
            .route_layer(layer);
        let _holder = locks.lock("any:nope").acquire().await.unwrap();
        let _holder2 = locks
            .lock("any:stock%2F1%2Freserve")
            .acquire()
            .await
            .unwrap();

        assert_eq!(send(&app, post_to("/nope")).await.0, StatusCode::NOT_FOUND);
        // The same layer does apply to matched routes.
        assert_eq!(
            send(&app, post_to("/stock/1/reserve")).await.0,
            StatusCode::LOCKED
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_long_and_non_utf8_ids_are_400_and_injected_ids_are_escaped() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let probe = Probe::new(Duration::ZERO);
        let layer = LockLayer::new(common::client(&redis, RESPONSE_TIMEOUT).await, "stock:<id>")
            .max_name_value_len(16);
        let app = app(layer, probe.clone());

        let long = "x".repeat(17);
        let (status, _, body) = send(&app, post_to(&format!("/stock/{long}/reserve"))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let response = app
            .clone()
            .oneshot(post_to("/stock/%FF/reserve"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            response.extensions().get::<LockRejection>().unwrap().kind(),
            RejectionKind::InvalidName
        );
        let (status, _, _) =
            send(&app, post_to(&format!("/stock/{}/reserve", "x".repeat(16)))).await;
        assert_eq!(status, StatusCode::OK, "16 bytes is within the limit");

        // `:` and braces cannot alias another key or pick a hash tag; control bytes are escaped.
        for (raw, name) in [
            ("1:x", "stock:1%3Ax"),
            ("%7Bslot%7D", "stock:%7Bslot%7D"),
            ("a%0Ab", "stock:a%0Ab"),
            ("a%25b", "stock:a%25b"),
        ] {
            let (status, _, body) = send(&app, post_to(&format!("/stock/{raw}/reserve"))).await;
            assert_eq!(status, StatusCode::OK, "{raw}: {body}");
            assert_eq!(body.split_once(' ').unwrap().0, name, "{raw}");
        }
        let fences = redis.keys("lock:*:fence");
        assert!(
            fences.contains(&"lock:{stock:1%3Ax}:fence".to_owned()),
            "{fences:?}"
        );
        assert!(fences.iter().all(|k| !k.contains("{slot}")), "{fences:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_request_future_frees_the_lock_at_once() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let probe = Probe::new(Duration::from_secs(3600));
        let app = app(LockLayer::new(locks.clone(), "stock:<id>"), probe.clone());

        let entered = probe.entered.notified();
        let request = tokio::spawn({
            let app = app.clone();
            async move { send(&app, post_to("/stock/9/reserve")).await }
        });
        entered.await;
        assert!(
            !is_free(&locks, "stock:9").await,
            "the handler runs without the lock"
        );
        request.abort();
        let freed = freed_within(&locks, "stock:9", RELEASED_WITHIN).await;
        assert!(freed.is_some(), "freed after {freed:?}");
        assert_eq!(probe.dropped.load(Ordering::SeqCst), 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_over_tcp_frees_the_lock_at_once() {
    use tokio::io::AsyncWriteExt;

    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let probe = Probe::new(Duration::from_secs(3600));
        let app = app(LockLayer::new(locks.clone(), "stock:<id>"), probe.clone());
        let addr = common::serve(app).await;

        let entered = probe.entered.notified();
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"POST /stock/5/reserve HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        entered.await;
        assert!(!is_free(&locks, "stock:5").await);
        drop(tcp);
        let freed = freed_within(&locks, "stock:5", RELEASED_WITHIN).await;
        assert!(freed.is_some(), "freed after {freed:?}");
        assert_eq!(
            probe.dropped.load(Ordering::SeqCst),
            1,
            "the handler was not dropped"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_lost_mid_handler_drops_the_handler_and_answers_503() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let probe = Probe::new(Duration::from_secs(5));
        let layer = LockLayer::new(common::client(&redis, RESPONSE_TIMEOUT).await, "stock:<id>")
            .lease(Duration::from_millis(300));
        let app = app(layer, probe.clone());
        let started = Instant::now();
        let response = app
            .clone()
            .oneshot(post_to("/stock/3/reserve"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response.extensions().get::<LockRejection>().unwrap().kind(),
            RejectionKind::Lost
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(probe.dropped.load(Ordering::SeqCst), 1);
        assert_eq!(probe.finished.load(Ordering::SeqCst), 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_until_body_end_keeps_the_lock_while_the_body_streams() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let (senders, streaming) = common::streaming_handler();
        for hold in [true, false] {
            let mut layer = LockLayer::new(locks.clone(), "report:<id>");
            if hold {
                layer = layer.hold_until_body_end();
            }
            let app: Router = Router::new()
                .route("/report/{id}", get(streaming.clone()))
                .layer(layer);
            let response = app
                .oneshot(Request::get("/report/1").body(Body::empty()).unwrap())
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            let tx = senders.lock().unwrap().pop().unwrap();
            let mut body = response.into_body();
            if !hold {
                // Default: released once the head is ready, while the body still streams.
                let freed = freed_within(&locks, "report:1", RELEASED_WITHIN).await;
                assert!(freed.is_some(), "the lock outlived the handler");
                continue;
            }
            tx.send(Bytes::from_static(b"part 1")).await.unwrap();
            let frame = body.frame().await.unwrap().unwrap();
            assert_eq!(frame.into_data().unwrap(), "part 1");
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(
                !is_free(&locks, "report:1").await,
                "released before the body ended"
            );
            drop(tx);
            assert!(body.frame().await.is_none());
            let freed = freed_within(&locks, "report:1", RELEASED_WITHIN).await;
            assert!(freed.is_some(), "{freed:?}");
        }
    })
    .await;
}

/// A custom rejection reads the retry hint the layer was given (`retry_after`, here 10 s),
/// not the default 1 s (and not the holder's lease: a watchdog keeps it near 30 s), as the
/// default rejection's `Retry-After` does; for a lock and for a keyed limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_rejection_gets_the_layers_retry_hint() {
    use axum::response::{IntoResponse, Response};
    use lock_tower::KeyedConcurrencyLimitLayer;
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let hint = |rejection: LockRejection| -> Response {
            let hint = rejection.retry_after().map(|d| d.as_secs()).unwrap_or(0);
            (StatusCode::CONFLICT, hint.to_string()).into_response()
        };
        let locked = LockLayer::new(locks.clone(), "stock:<id>")
            .wait(Duration::ZERO)
            .retry_after(Duration::from_secs(10))
            .with_rejection_response(hint);
        let limited = KeyedConcurrencyLimitLayer::new(locks.clone(), "jobs:<id>", 1)
            .wait(Duration::ZERO)
            .retry_after(Duration::from_secs(10))
            .with_rejection_response(hint);
        let app: Router = Router::new()
            .route("/stock/{id}/reserve", post(|| async { "ok" }))
            .route_layer(locked);
        let jobs: Router = Router::new()
            .route("/jobs/{id}", post(|| async { "ok" }))
            .route_layer(limited);
        let _holder = locks.lock("stock:1").acquire().await.unwrap();
        let _permit = locks.semaphore("jobs:1", 1).acquire().await.unwrap();
        for (app, uri) in [(app, "/stock/1/reserve"), (jobs, "/jobs/1")] {
            let response = app.oneshot(post_to(uri)).await.unwrap();
            assert_eq!(response.status(), StatusCode::CONFLICT, "{uri}");
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, "10", "{uri}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_rejection_response_gets_the_error_and_keeps_it_in_extensions() {
    use axum::response::{IntoResponse, Response};
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let seen = Arc::new(AtomicBool::new(false));
        let layer = LockLayer::new(locks.clone(), "stock:<id>")
            .wait(Duration::ZERO)
            .with_rejection_response({
                let seen = seen.clone();
                move |rejection: LockRejection| -> Response {
                    seen.store(rejection.kind() == RejectionKind::Busy, Ordering::SeqCst);
                    (StatusCode::TOO_MANY_REQUESTS, "come back later").into_response()
                }
            });
        let app: Router = Router::new()
            .route("/stock/{id}/reserve", post(|| async { "ok" }))
            .route_layer(layer);
        let _holder = locks.lock("stock:1").acquire().await.unwrap();
        let response = app.oneshot(post_to("/stock/1/reserve")).await.unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(seen.load(Ordering::SeqCst));
        assert!(
            response
                .extensions()
                .get::<LockRejection>()
                .unwrap()
                .error()
                .is_busy()
        );
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "come back later");
    })
    .await;
}

/// H3 A: with `hold_until_body_end`, once the lease has run out (and a rival holds the lock),
/// the body's next frame is an error, not more data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_body_ends_with_an_error_once_the_lock_is_lost() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let rival = common::client(&redis, RESPONSE_TIMEOUT).await;
        let (senders, streaming) = common::streaming_handler();
        let layer = LockLayer::new(locks.clone(), "report:<id>")
            .lease(Duration::from_millis(300))
            .hold_until_body_end();
        let app: Router = Router::new()
            .route("/report/{id}", get(streaming))
            .layer(layer);
        let response = app
            .oneshot(Request::get("/report/1").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let tx = senders.lock().unwrap().pop().unwrap();
        let mut body = response.into_body();
        tx.send(Bytes::from_static(b"part 1")).await.unwrap();
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "part 1");

        tokio::time::sleep(Duration::from_millis(400)).await; // the lease is over
        let _other = rival
            .lock("report:1")
            .try_acquire(Duration::ZERO)
            .await
            .expect("the rival gets the expired lock");
        // The inner body may still have data, but it must not be delivered.
        let _ = tx.send(Bytes::from_static(b"part 2")).await;
        let next = body.frame().await;
        assert!(
            matches!(next, Some(Err(_))),
            "body still streams under a lost lock: {next:?}"
        );
        assert!(
            body.frame().await.is_none(),
            "the body goes on after the error"
        );
    })
    .await;
}

/// H3 A while pending: the loss ends a body that is waiting for its next chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_body_notices_the_loss_while_the_inner_body_is_pending() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let (tx, rx) = mpsc::channel::<Bytes>(4);
        let rx = Arc::new(Mutex::new(Some(rx)));
        let layer = LockLayer::new(locks.clone(), "report:<id>")
            .lease(Duration::from_millis(300))
            .hold_until_body_end();
        let app: Router = Router::new()
            .route(
                "/report/{id}",
                get(move || {
                    let rx = rx.lock().unwrap().take().unwrap();
                    async move { Body::new(ChannelBody(rx)) }
                }),
            )
            .layer(layer);
        let response = app
            .oneshot(Request::get("/report/1").body(Body::empty()).unwrap())
            .await
            .unwrap();
        let started = Instant::now();
        let next = response.into_body().frame().await;
        assert!(matches!(next, Some(Err(_))), "{next:?}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        drop(tx);
    })
    .await;
}

/// A body that yields the output of one future as its only chunk.
struct FutureBody(Option<Pin<Box<dyn Future<Output = Bytes> + Send>>>);

impl http_body::Body for FutureBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        let Some(fut) = self.0.as_mut() else {
            return Poll::Ready(None);
        };
        let chunk = std::task::ready!(fut.as_mut().poll(cx));
        self.0 = None;
        Poll::Ready(Some(Ok(http_body::Frame::data(chunk))))
    }
}

/// H3 B: a streamed body that takes the same lock with the same client re-enters instead of
/// waiting for its own request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_body_that_takes_the_same_lock_reenters() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let layer = LockLayer::new(locks.clone(), "report:<id>").hold_until_body_end();
        let app: Router = Router::new()
            .route(
                "/report/{id}",
                get({
                    let locks = locks.clone();
                    move |Path(id): Path<String>| {
                        let locks = locks.clone();
                        async move {
                            Body::new(FutureBody(Some(Box::pin(async move {
                                match locks
                                    .lock(format!("report:{id}"))
                                    .try_acquire(Duration::from_secs(2))
                                    .await
                                {
                                    Ok(_guard) => Bytes::from_static(b"reentered"),
                                    Err(e) => Bytes::from(format!("failed: {e}")),
                                }
                            }))))
                        }
                    }
                }),
            )
            .layer(layer);
        let started = Instant::now();
        let (status, _, body) =
            send(&app, Request::get("/report/1").body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, "reentered");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        let freed = freed_within(&locks, "report:1", RELEASED_WITHIN).await;
        assert!(freed.is_some(), "the lock outlived the body");
    })
    .await;
}

/// L10: with `require_key`, a request whose key cannot be built is 400, not served unlocked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_name_rejects_requests_without_a_key_with_400() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let probe = Probe::new(Duration::ZERO);
        let served = Arc::new(AtomicUsize::new(0));
        let app: Router = Router::new()
            .route("/stock/{id}/reserve", post(reserve))
            .route(
                "/stock",
                post({
                    let served = served.clone();
                    move || async move {
                        served.fetch_add(1, Ordering::SeqCst);
                        "unlocked"
                    }
                }),
            )
            .route_layer(LockLayer::new(locks.clone(), "stock:<id>").require_name())
            .with_state(probe.clone());
        let response = app.clone().oneshot(post_to("/stock")).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            response.extensions().get::<LockRejection>().unwrap().kind(),
            RejectionKind::InvalidName
        );
        assert_eq!(served.load(Ordering::SeqCst), 0, "served unlocked");
        assert_eq!(
            send(&app, post_to("/stock/1/reserve")).await.0,
            StatusCode::OK
        );
        // Unknown paths stay 404 under `route_layer`.
        assert_eq!(
            send(&app, post_to("/nowhere")).await.0,
            StatusCode::NOT_FOUND
        );
    })
    .await;
}

/// H3 A over HTTP/1.1: the response truncated by the loss does not look complete to the
/// client (no terminating zero-length chunk; hyper closes the connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_body_lost_mid_stream_is_not_a_complete_http_response() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let senders: Arc<Mutex<Vec<mpsc::Sender<Bytes>>>> = Arc::default();
        let streaming = {
            let senders = senders.clone();
            move || {
                let senders = senders.clone();
                async move {
                    let (tx, rx) = mpsc::channel(4);
                    tx.send(Bytes::from_static(b"part 1")).await.unwrap();
                    senders.lock().unwrap().push(tx);
                    Body::new(ChannelBody(rx))
                }
            }
        };
        let layer = LockLayer::new(locks.clone(), "report:<id>")
            .lease(Duration::from_millis(300))
            .hold_until_body_end();
        let app: Router = Router::new()
            .route("/report/{id}", get(streaming))
            .layer(layer);
        let addr = common::serve(app).await;

        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET /report/1 HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut received = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut received)).await;
        let text = String::from_utf8_lossy(&received);
        assert!(
            read.is_ok(),
            "the connection stayed open after the loss: {text:?}"
        );
        assert!(text.starts_with("HTTP/1.1 200"), "{text:?}");
        assert!(text.contains("part 1"), "{text:?}");
        assert!(
            !text.ends_with("0\r\n\r\n"),
            "the truncated body ended like a complete one: {text:?}"
        );
        drop(senders);
    })
    .await;
}

/// Records the messages of the events it sees (a minimal `tracing` subscriber).
struct Recorder(Arc<Mutex<Vec<(tracing::Level, String)>>>);

impl tracing::Subscriber for Recorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), message.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// L10: a request that passes the layer unlocked is logged at debug level.
#[tokio::test]
async fn a_request_passing_unlocked_is_logged_at_debug_level() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let events: Arc<Mutex<Vec<(tracing::Level, String)>>> = Arc::default();
        let _subscriber = tracing::subscriber::set_default(Recorder(events.clone()));
        let probe = Probe::new(Duration::ZERO);
        let app = app(LockLayer::new(locks.clone(), "stock:<id>"), probe);
        let (status, _, _) = send(&app, Request::get("/health").body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::OK);
        let events = events.lock().unwrap().clone();
        assert!(
            events
                .iter()
                .any(|(level, m)| *level == tracing::Level::DEBUG && m.contains("unlocked")),
            "{events:?}"
        );
    })
    .await;
}
