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

/// Answers `<issued before asking> <token> <issued after asking>`, keeping its `HeldLock`.
async fn save(State(seen): State<Arc<Seen>>, Extension(held): Extension<HeldLock>) -> String {
    if let Some(redis) = &seen.redis {
        let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
        let value: String = redis::cmd("GET")
            .arg(format!("lock:{{{}}}", held.name()))
            .query_async(&mut conn)
            .await
            .unwrap();
        let owner = value.strip_suffix('!').unwrap_or(&value).to_owned();
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
