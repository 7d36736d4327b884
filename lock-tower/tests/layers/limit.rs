//! `KeyedConcurrencyLimitLayer` in axum 0.8 against a real `redis-server` on loopback: at most
//! N handlers per key across two app instances, 429 with `Retry-After` for the excess, keys
//! with their own permits, permits given back by cancelled requests and at the end of a held
//! body, a capacity stored at run time, and 503 when Redis is down.

#![cfg(feature = "axum")]

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Extension, Router};
use bytes::Bytes;
use common::Gauge;
use common::{RELEASED_WITHIN, send};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use lock_tests::RedisServer;
use lock_tower::{
    HeldLock, KeyedConcurrencyLimitLayer, LockClient, LockRejection, RejectionKind, name,
};
use tower::ServiceExt;

/// How long a reply may take before it counts as lost.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(300);
/// Every test finishes within this, or fails.
const TEST_LIMIT: Duration = Duration::from_secs(60);

/// How many handlers run at once, per key and in all.
#[derive(Default)]
struct Jobs {
    per_key: Mutex<HashMap<String, Arc<Gauge>>>,
    total: Arc<Gauge>,
}

impl Jobs {
    fn key(&self, key: &str) -> Arc<Gauge> {
        self.per_key
            .lock()
            .unwrap()
            .entry(key.to_owned())
            .or_default()
            .clone()
    }
}

/// Runs for `ms` milliseconds under a permit of `jobs:<key>`.
async fn job(
    State(jobs): State<Arc<Jobs>>,
    Path((key, ms)): Path<(String, u64)>,
    Extension(held): Extension<HeldLock>,
) -> String {
    let _key = jobs.key(&key).enter();
    let _total = jobs.total.enter();
    tokio::time::sleep(Duration::from_millis(ms)).await;
    // With the grant, or on demand for a permit passed in memory from another request.
    let token = held
        .fencing_token()
        .await
        .expect("a held permit has a token");
    format!("{} {token}", held.name())
}

/// Answers the token issued with the permit's grant, `none` when there is none yet.
async fn issued(Extension(held): Extension<HeldLock>) -> String {
    tokio::time::sleep(Duration::from_millis(20)).await;
    held.issued_token()
        .map_or_else(|| "none".to_owned(), |token| token.to_string())
}

fn app(layer: KeyedConcurrencyLimitLayer<name::PathParams>, jobs: &Arc<Jobs>) -> Router {
    Router::new()
        .route("/jobs/{key}/{ms}", post(job))
        .route("/health", get(|| async { "ok" }))
        .route_layer(layer)
        .with_state(jobs.clone())
}

fn limit(locks: &LockClient, n: u32) -> KeyedConcurrencyLimitLayer<name::PathParams> {
    KeyedConcurrencyLimitLayer::new(locks.clone(), "jobs:<key>", n)
}

fn job_request(key: &str, ms: u64) -> Request<Body> {
    Request::post(format!("/jobs/{key}/{ms}"))
        .body(Body::empty())
        .unwrap()
}

/// Free permits of `jobs:<key>` (a semaphore of capacity `n`), as Redis says.
async fn available(locks: &LockClient, key: &str, n: u32) -> u32 {
    locks
        .semaphore(format!("jobs:{key}"), n)
        .available()
        .await
        .unwrap()
}

/// How long until all `n` permits of `jobs:<key>` are free (polling every 5 ms), or `None`
/// within `limit`.
async fn all_free_within(
    locks: &LockClient,
    key: &str,
    n: u32,
    limit: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if available(locks, key, n).await == n {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn six_requests_on_one_key_never_run_more_than_two_at_once_across_two_instances() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let jobs = Arc::new(Jobs::default());
        let a = app(
            limit(&common::client(&redis, RESPONSE_TIMEOUT).await, 2),
            &jobs,
        );
        let b = app(
            limit(&common::client(&redis, RESPONSE_TIMEOUT).await, 2),
            &jobs,
        );
        let started = Instant::now();
        let requests: Vec<_> = (0..6)
            .map(|i| {
                let app = if i % 2 == 0 { a.clone() } else { b.clone() };
                tokio::spawn(async move { send(&app, job_request("k", 150)).await })
            })
            .collect();
        let mut tokens = Vec::new();
        for request in requests {
            let (status, _, body) = request.await.unwrap();
            assert_eq!(status, StatusCode::OK, "{body}");
            let (name, token) = body.split_once(' ').unwrap();
            assert_eq!(name, "jobs:k");
            tokens.push(token.parse::<u64>().unwrap());
        }
        let gauge = jobs.key("k");
        assert_eq!(gauge.entered(), 6);
        assert_eq!(gauge.max(), 2, "not at most 2 (or never 2) at once");
        assert!(
            started.elapsed() >= Duration::from_millis(3 * 150),
            "six 150 ms jobs two at a time took {:?}",
            started.elapsed()
        );
        tokens.sort_unstable();
        tokens.dedup();
        assert_eq!(tokens.len(), 6, "every permit had its own fencing token");
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let freed = all_free_within(&locks, "k", 2, RELEASED_WITHIN).await;
        assert!(freed.is_some(), "permits were not given back");
    })
    .await;
}

/// A fenced limit issues every permit's token with its grant, also to the requests of one
/// instance that would otherwise be passed a permit in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fenced_limit_issues_each_permits_token_with_its_grant() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let app = Router::new()
            .route("/issued/{key}", post(issued))
            .route_layer(
                KeyedConcurrencyLimitLayer::new(locks.clone(), "issued:<key>", 1).fenced(),
            );
        let requests: Vec<_> = (0..4)
            .map(|_| {
                let app = app.clone();
                tokio::spawn(async move {
                    let request = Request::post("/issued/k").body(Body::empty()).unwrap();
                    send(&app, request).await
                })
            })
            .collect();
        let mut tokens = Vec::new();
        for request in requests {
            let (status, _, body) = request.await.unwrap();
            assert_eq!(status, StatusCode::OK, "{body}");
            tokens.push(body.parse::<u64>().expect("a token with the grant"));
        }
        tokens.sort_unstable();
        tokens.dedup();
        assert_eq!(tokens.len(), 4, "every permit had its own fencing token");
        assert_eq!(locks.stats().handoffs, 0, "{:?}", locks.stats());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_wait_the_excess_gets_429_with_retry_after() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let jobs = Arc::new(Jobs::default());
        let app = app(limit(&locks, 2).wait(Duration::ZERO), &jobs);
        let requests: Vec<_> = (0..6)
            .map(|_| {
                let app = app.clone();
                tokio::spawn(async move { app.oneshot(job_request("k", 1500)).await.unwrap() })
            })
            .collect();
        let (mut ok, mut limited) = (0, 0);
        for request in requests {
            let response = request.await.unwrap();
            match response.status() {
                StatusCode::OK => ok += 1,
                StatusCode::TOO_MANY_REQUESTS => {
                    limited += 1;
                    assert_eq!(response.headers()["retry-after"], "1");
                    let rejection = response.extensions().get::<LockRejection>().unwrap();
                    assert_eq!(rejection.kind(), RejectionKind::Limited);
                    assert!(rejection.is_permit_limit());
                    assert!(rejection.error().is_busy());
                    let body = response.into_body().collect().await.unwrap().to_bytes();
                    assert!(
                        String::from_utf8_lossy(&body).contains("jobs:k"),
                        "{body:?}"
                    );
                }
                other => panic!("unexpected {other}"),
            }
        }
        assert_eq!((ok, limited), (2, 4));
        assert_eq!(jobs.key("k").max(), 2);
        assert_eq!(jobs.key("k").entered(), 2, "a rejected request ran");

        // Another status and a longer hint, while a permit is held elsewhere.
        let _permits = locks
            .semaphore("jobs:k", 2)
            .acquire_many(2, Default::default())
            .await
            .unwrap();
        let shed = app_with(
            limit(&locks, 2)
                .wait(Duration::ZERO)
                .limited_status(StatusCode::SERVICE_UNAVAILABLE)
                .retry_after(Duration::from_secs(5)),
            &jobs,
        );
        let (status, headers, _) = send(&shed, job_request("k", 0)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(headers["retry-after"], "5");
    })
    .await;
}

fn app_with(layer: KeyedConcurrencyLimitLayer<name::PathParams>, jobs: &Arc<Jobs>) -> Router {
    app(layer, jobs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn different_keys_have_their_own_permits() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let jobs = Arc::new(Jobs::default());
        let app = app(limit(&locks, 1).wait(Duration::ZERO), &jobs);
        let requests: Vec<_> = ["a", "b", "c"]
            .into_iter()
            .map(|key| {
                let app = app.clone();
                tokio::spawn(async move { send(&app, job_request(key, 600)).await })
            })
            .collect();
        assert!(
            common::eventually(Duration::from_secs(5), || jobs.total.now() == 3).await,
            "three keys with a limit of 1 did not run together (max {})",
            jobs.total.max()
        );
        // The key itself is full.
        let (status, headers, _) = send(&app, job_request("a", 0)).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert!(headers.contains_key("retry-after"));
        for request in requests {
            assert_eq!(request.await.unwrap().0, StatusCode::OK);
        }
        assert_eq!(jobs.key("a").entered(), 1, "the rejected request ran");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelled_requests_give_their_permit_back_at_once() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let jobs = Arc::new(Jobs::default());
        let app = app(limit(&locks, 1).wait(Duration::from_secs(10)), &jobs);

        // A request holding the only permit, its handler running for an hour.
        let holder = tokio::spawn({
            let app = app.clone();
            async move { send(&app, job_request("k", 3_600_000)).await }
        });
        assert!(common::eventually(Duration::from_secs(5), || jobs.key("k").now() == 1).await);
        assert_eq!(available(&locks, "k", 1).await, 0);

        // A request waiting for it, cancelled while it waits: nothing taken, nothing left.
        let waiter = tokio::spawn({
            let app = app.clone();
            async move { send(&app, job_request("k", 0)).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "the waiter did not wait");
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());

        // The holder's client hangs up: its handler is dropped and the permit comes back.
        holder.abort();
        let freed = all_free_within(&locks, "k", 1, RELEASED_WITHIN).await;
        assert!(freed.is_some(), "given back after {freed:?}");
        assert_eq!(jobs.key("k").now(), 0);
        assert_eq!(jobs.key("k").entered(), 1, "the cancelled waiter ran");

        // The next request gets it (the permit is free: no wait is involved).
        let (status, _, body) = send(&app, job_request("k", 0)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(locks.held_locks(), 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_is_503_and_requests_without_a_key_pass_through() {
    common::bounded(TEST_LIMIT, async {
        let mut redis = RedisServer::start();
        let jobs = Arc::new(Jobs::default());
        let app = app(
            limit(&common::client(&redis, RESPONSE_TIMEOUT).await, 2),
            &jobs,
        );
        assert_eq!(send(&app, job_request("k", 0)).await.0, StatusCode::OK);
        redis.stop();
        let started = Instant::now();
        let response = app.clone().oneshot(job_request("k", 0)).await.unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(!response.headers().contains_key("retry-after"));
        let rejection = response.extensions().get::<LockRejection>().unwrap();
        assert_eq!(rejection.kind(), RejectionKind::Unavailable);
        assert!(rejection.is_permit_limit());
        assert!(started.elapsed() < Duration::from_secs(15));
        assert_eq!(
            jobs.key("k").entered(),
            1,
            "a request ran without its permit"
        );
        let (status, _, body) =
            send(&app, Request::get("/health").body(Body::empty()).unwrap()).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_stored_in_redis_overrides_the_limit_and_zero_turns_requests_away() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let jobs = Arc::new(Jobs::default());
        let app = app(limit(&locks, 2).wait(Duration::ZERO), &jobs);
        let semaphore = locks.semaphore("jobs:k", 2);

        semaphore.set_capacity(0).await.unwrap();
        let response = app.clone().oneshot(job_request("k", 0)).await.unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(response.headers().contains_key("retry-after"));
        assert_eq!(
            response.extensions().get::<LockRejection>().unwrap().kind(),
            RejectionKind::Limited
        );

        // Raised to 3 for every instance: three run at once.
        semaphore.set_capacity(3).await.unwrap();
        let requests: Vec<_> = (0..3)
            .map(|_| {
                let app = app.clone();
                tokio::spawn(async move { send(&app, job_request("k", 500)).await.0 })
            })
            .collect();
        for request in requests {
            assert_eq!(request.await.unwrap(), StatusCode::OK);
        }
        assert_eq!(jobs.key("k").max(), 3);

        semaphore.reset_capacity().await.unwrap();
        // Permits are given back in the background once the responses are ready.
        let freed = all_free_within(&locks, "k", 2, RELEASED_WITHIN).await;
        assert!(freed.is_some(), "the permits were not given back");
        assert_eq!(send(&app, job_request("k", 0)).await.0, StatusCode::OK);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_of_zero_closes_the_route_without_a_panic() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let jobs = Arc::new(Jobs::default());
        // Even with a long wait: the request can never be served, so it is turned away at once.
        let app = app(limit(&locks, 0).wait(Duration::from_secs(10)), &jobs);
        let started = std::time::Instant::now();
        let (status, headers, _) = send(&app, job_request("k", 0)).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert!(headers.contains_key("retry-after"));
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(jobs.key("k").max(), 0);
        // An operator opens it for every instance.
        locks.semaphore("jobs:k", 0).set_capacity(1).await.unwrap();
        assert_eq!(send(&app, job_request("k", 0)).await.0, StatusCode::OK);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_until_body_end_keeps_the_permit_while_the_body_streams() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let (senders, export) = common::streaming_handler();
        let app: Router = Router::new()
            .route("/exports/{key}", get(export))
            .route_layer(
                KeyedConcurrencyLimitLayer::new(locks.clone(), "jobs:<key>", 1)
                    .wait(Duration::ZERO)
                    .hold_until_body_end(),
            );
        let get_export = || Request::get("/exports/k").body(Body::empty()).unwrap();
        let response = app.clone().oneshot(get_export()).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let tx = senders.lock().unwrap().pop().unwrap();
        let mut body = response.into_body();
        tx.send(Bytes::from_static(b"part 1")).await.unwrap();
        assert_eq!(
            body.frame().await.unwrap().unwrap().into_data().unwrap(),
            "part 1"
        );
        // Still streaming: the permit is taken.
        let (status, _, _) = send(&app, get_export()).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(available(&locks, "k", 1).await, 0);

        drop(tx);
        assert!(body.frame().await.is_none());
        let freed = all_free_within(&locks, "k", 1, RELEASED_WITHIN).await;
        assert!(freed.is_some(), "the permit outlived the body: {freed:?}");
        let response = app.oneshot(get_export()).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        drop(senders);
    })
    .await;
}
