//! The fencing token a `LockLayer` hands its handler: on demand by default (issued only when the
//! handler asks, only while the request holds, and never afterwards), with the grant under
//! `fenced()`; both kinds on one name never go backwards, and a hot name's requests in one
//! process take turns in memory only when the layer is not fenced.

#![cfg(feature = "axum")]

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::routing::post;
use axum::{Extension, Router};
use common::send;
use http::{Request, StatusCode};
use lock_runtime::LossReason;
use lock_tests::RedisServer;
use lock_tower::name::PathParams;
use lock_tower::{HeldLock, LockError, LockLayer};

const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);
const TEST_LIMIT: Duration = Duration::from_secs(60);

/// What the handler saw, and the `HeldLock` it kept past its response.
#[derive(Default)]
struct Seen {
    kept: Mutex<Option<HeldLock>>,
    /// When set, each request reads the lock's value in Redis (its holder's owner id).
    redis: Option<redis::Client>,
    owners: Mutex<Vec<String>>,
}

/// The owner id Redis holds the request's lock under (without the mark a waiter leaves).
async fn owner_in_redis(redis: &redis::Client, held: &HeldLock) -> String {
    let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
    let value: String = redis::cmd("GET")
        .arg(format!("lock:{{{}}}", held.name()))
        .query_async(&mut conn)
        .await
        .unwrap();
    value.strip_suffix('!').unwrap_or(&value).to_owned()
}

/// Answers `<issued before asking> <token> <issued after asking>`, keeping its `HeldLock`.
async fn save(State(seen): State<Arc<Seen>>, Extension(held): Extension<HeldLock>) -> String {
    if let Some(redis) = &seen.redis {
        let owner = owner_in_redis(redis, &held).await;
        seen.owners.lock().unwrap().push(owner);
    }
    let before = held.issued_token();
    let token = held
        .fencing_token()
        .await
        .expect("asked while the request holds");
    let after = held.issued_token();
    *seen.kept.lock().unwrap() = Some(held);
    format!("{before:?} {token} {after:?}")
}

fn app(layer: LockLayer<PathParams>, seen: &Arc<Seen>) -> Router {
    Router::new()
        .route("/stock/{id}/save", post(save))
        .route_layer(layer)
        .with_state(seen.clone())
}

/// One request: `(issued before asking, the token, issued after asking)`.
async fn save_once(app: &Router) -> (Option<u64>, u64, Option<u64>) {
    let request = Request::post("/stock/42/save").body(Body::empty()).unwrap();
    let (status, _, body) = send(app, request).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let issued = |part: &str| match part {
        "None" => None,
        some => Some(some["Some(".len()..some.len() - 1].parse::<u64>().unwrap()),
    };
    let parts: Vec<&str> = body.split(' ').collect();
    let [before, token, after] = parts[..] else {
        panic!("unexpected body {body:?}");
    };
    (issued(before), token.parse().unwrap(), issued(after))
}

#[tokio::test]
async fn a_layer_issues_the_token_when_the_handler_asks_and_a_fenced_one_with_the_grant() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let seen = Arc::new(Seen::default());
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let lazy = app(LockLayer::new(locks.clone(), "stock:<id>"), &seen);
        let fenced = app(LockLayer::new(locks, "stock:<id>").fenced(), &seen);

        let mut last = 0;
        for round in 0..4 {
            let (before, token, after) = save_once(&lazy).await;
            assert_eq!(
                before, None,
                "round {round}: on demand, no token before the ask"
            );
            assert_eq!(
                after,
                Some(token),
                "round {round}: the asked token is cached"
            );
            assert!(token > last, "round {round}: {token} after {last}");
            last = token;

            let (before, token, after) = save_once(&fenced).await;
            assert_eq!(
                before,
                Some(token),
                "round {round}: fenced, issued with the grant"
            );
            assert_eq!(after, Some(token));
            assert!(token > last, "round {round}: {token} after {last}");
            last = token;
        }
    })
    .await;
}

#[tokio::test]
async fn a_held_lock_kept_past_its_response_gets_no_token() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let seen = Arc::new(Seen::default());
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        for layer in [
            LockLayer::new(locks.clone(), "stock:<id>"),
            LockLayer::new(locks.clone(), "stock:<id>").fenced(),
        ] {
            let app = app(layer, &seen);
            let (_, token, _) = save_once(&app).await;
            assert!(token > 0);
            let kept = seen
                .kept
                .lock()
                .unwrap()
                .take()
                .expect("the handler kept it");
            // The response is sent: the hold is over, whatever the handler kept.
            match kept.fencing_token().await {
                Err(LockError::Lost { name, reason }) => {
                    assert_eq!(name, "stock:42");
                    assert_eq!(reason, LossReason::Released);
                }
                other => panic!("a token after the hold ended: {other:?}"),
            }
            assert_eq!(kept.issued_token(), None);
            // Dropped with the response future: released in the background, promptly.
            assert!(
                common::freed_within(&locks, "stock:42", common::RELEASED_WITHIN)
                    .await
                    .is_some()
            );
            assert_eq!(
                kept.fencing_token().await.map_err(|e| e.is_lost()),
                Err(true)
            );
        }
    })
    .await;
}

/// The steps of [`keep_asking`]'s two requests, which the test drives.
struct InFlight {
    /// Read directly (not through the proxy): the lock's owner id in Redis.
    redis: redis::Client,
    /// Told by each handler, once it holds, the owner id in Redis then.
    entered: tokio::sync::mpsc::UnboundedSender<String>,
    /// Awaited by the first handler before it leaves a token request in flight.
    go: Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
    /// Awaited by the first handler before it answers: the request has reached Redis.
    sent: Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
    /// The first request's token request, still in flight when its response is sent.
    side: Mutex<Option<tokio::task::JoinHandle<Result<u64, LockError>>>>,
}

/// The first request leaves a token request of its hold (a clone of its `HeldLock`) in flight
/// and answers; the second asks for its own token.
async fn keep_asking(
    State(flight): State<Arc<InFlight>>,
    Extension(held): Extension<HeldLock>,
) -> String {
    let owner = owner_in_redis(&flight.redis, &held).await;
    flight.entered.send(owner).unwrap();
    let go = flight.go.lock().unwrap().take();
    let Some(go) = go else {
        return format!("{:?}", held.fencing_token().await);
    };
    go.await.unwrap();
    let tokens = held.clone();
    *flight.side.lock().unwrap() = Some(tokio::spawn(async move { tokens.fencing_token().await }));
    let sent = flight.sent.lock().unwrap().take().unwrap();
    sent.await.unwrap();
    "first".to_owned()
}

/// A token request of a request's hold still in flight when its response ends and the hold
/// passes in memory to the next request for the same name: answered `Lost`, never with a token
/// Redis issued (to the same owner id) during the next request's hold. The request reaches
/// Redis and its reply is held back by a proxy until the next request holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_in_flight_when_a_held_lock_passes_in_memory_is_lost() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let upstream = format!("127.0.0.1:{}", redis.port()).parse().unwrap();
        let proxy = lock_tests::TcpProxy::start(upstream).await.unwrap();
        // Replies are held for as long as the test needs: no time-out meanwhile.
        let locks = lock_tower::LockClient::builder(&proxy.url())
            .response_timeout(Duration::from_secs(30))
            .build()
            .await
            .unwrap();
        let (entered, mut holders) = tokio::sync::mpsc::unbounded_channel();
        let (go, go_rx) = tokio::sync::oneshot::channel();
        let (sent, sent_rx) = tokio::sync::oneshot::channel();
        let flight = Arc::new(InFlight {
            redis: redis::Client::open(redis.url()).unwrap(),
            entered,
            go: Mutex::new(Some(go_rx)),
            sent: Mutex::new(Some(sent_rx)),
            side: Mutex::new(None),
        });
        let app = Router::new()
            .route("/stock/{id}/save", post(keep_asking))
            .route_layer(LockLayer::new(locks, "stock:<id>"))
            .with_state(flight.clone());
        let request = || Request::post("/stock/42/save").body(Body::empty()).unwrap();
        let first = tokio::spawn({
            let (app, request) = (app.clone(), request());
            async move { send(&app, request).await }
        });
        let first_owner = holders.recv().await.unwrap();
        let second = tokio::spawn({
            let (app, request) = (app.clone(), request());
            async move { send(&app, request).await }
        });
        assert!(
            common::eventually(Duration::from_secs(10), || redis
                .pubsub_channels("lock:*")
                .iter()
                .any(|c| c == "lock:{stock:42}:unlock"))
            .await
        );
        // The waiter queues in memory after its first attempt.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            redis
                .cmd(&["GET", "lock:{stock:42}:fence"])
                .text()
                .is_none()
        );
        // Requests pass, replies are held.
        proxy.set_black_hole_from(proxy.sources()[0], false, true);
        go.send(()).unwrap();
        assert!(
            common::eventually(Duration::from_secs(10), || redis
                .cmd(&["GET", "lock:{stock:42}:fence"])
                .text()
                .is_some())
            .await,
            "the token request reached Redis"
        );
        sent.send(()).unwrap();
        let (status, _, body) = first.await.unwrap();
        assert_eq!((status, body.as_str()), (StatusCode::OK, "first"));
        // The second request holds, with no reply from Redis: the hold passed in memory.
        let second_owner = holders.recv().await.unwrap();
        assert_eq!(second_owner, first_owner, "the hold passed in memory");
        proxy.set_black_hole_from(proxy.sources()[0], false, false);
        let side = flight.side.lock().unwrap().take().unwrap();
        match side.await.unwrap() {
            Err(LockError::Lost { name, reason }) => {
                assert_eq!(name, "stock:42");
                assert_eq!(reason, LossReason::Released);
            }
            other => panic!("the token request of a hold that passed on: {other:?}"),
        }
        let (status, _, body) = second.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        let token: u64 = body
            .strip_prefix("Ok(")
            .and_then(|b| b.strip_suffix(')'))
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("the second request's token: {body}"));
        assert!(token > 0);
    })
    .await;
}

/// Sixteen requests for one hot name, queued in one process at once: without `fenced()` the
/// lock passes between them in memory (Redis keeps the first holder's owner id while the
/// others take their turns), and every request that asks still gets its own token, each above
/// the one before; fenced, every turn goes through Redis to issue a fresh token (a new owner
/// id in Redis for every request).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hot_name_passes_between_requests_in_memory_unless_fenced() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        for fenced in [false, true] {
            let seen = Arc::new(Seen {
                redis: Some(redis::Client::open(redis.url()).unwrap()),
                ..Seen::default()
            });
            let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
            let mut layer = LockLayer::new(locks.clone(), "stock:<id>");
            if fenced {
                layer = layer.fenced();
            }
            let app = app(layer, &seen);
            let tasks: Vec<_> = (0..16)
                .map(|_| {
                    let app = app.clone();
                    tokio::spawn(async move { save_once(&app).await.1 })
                })
                .collect();
            let mut tokens = Vec::new();
            for task in tasks {
                tokens.push(task.await.unwrap());
            }
            tokens.sort_unstable();
            tokens.dedup();
            assert_eq!(tokens.len(), 16, "fenced {fenced}: one token per request");
            let mut owners = seen.owners.lock().unwrap().clone();
            assert_eq!(owners.len(), 16);
            owners.sort_unstable();
            owners.dedup();
            if fenced {
                assert_eq!(owners.len(), 16, "every fenced turn was granted by Redis");
            } else {
                assert!(
                    owners.len() < 16,
                    "queued requests took turns in memory: {} owners in Redis for 16 requests",
                    owners.len()
                );
                assert!(locks.stats().handoffs > 0);
            }
        }
    })
    .await;
}
