//! `MultiLockLayer` against a real `redis-server`, through real HTTP/1.1 on loopback (axum 0.8
//! served by hyper, a hyper client) and through tonic 0.14: a checkout locks every SKU of its
//! cart (names from the JSON body), carts sharing a SKU serialise on it, disjoint carts run in
//! parallel, opposite orders never deadlock; the handler gets the body byte for byte with a
//! fencing token per name; unreadable bodies are 400 / `INVALID_ARGUMENT`, oversized ones 413 /
//! `RESOURCE_EXHAUSTED`, busy carts 423 with `Retry-After`.

#![cfg(all(feature = "axum", feature = "json"))]

use crate::common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::routing::post;
use axum::{Extension, Router};
use bytes::Bytes;
use common::{
    BoxFuture, ChannelBody, Gauge, GrpcServer, Inside, RELEASED_WITHIN, UnaryMethod, freed_within,
    is_free, serve,
};
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use lock_tests::RedisServer;
use lock_tower::name::{BodyNames, JsonNames, escape, grpc_message, invalid_body};
use lock_tower::{HeldLocks, LockClient, MultiLockLayer};
use tokio::sync::mpsc;
use tonic::transport::Server;
use tonic::{Code, Status};

/// How long a reply may take before it counts as lost.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(300);
/// Every test finishes within this, or fails.
const TEST_LIMIT: Duration = Duration::from_secs(60);

/// Counts, per lock name, how many handlers hold it at once.
#[derive(Default)]
struct Shop {
    hold: Duration,
    per_name: Mutex<HashMap<String, Arc<Gauge>>>,
    all: Arc<Gauge>,
    calls: AtomicUsize,
    locks: Option<LockClient>,
}

impl Shop {
    fn new(hold: Duration) -> Arc<Shop> {
        Arc::new(Shop {
            hold,
            ..Shop::default()
        })
    }

    fn gauge(&self, name: &str) -> Arc<Gauge> {
        self.per_name
            .lock()
            .unwrap()
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// The most handlers that ever held `name` at once.
    fn max_on(&self, name: &str) -> usize {
        self.gauge(name).max()
    }
}

/// Echoes the body; the locks held (`name=token,…`, in lock order) and the request's content
/// type in response headers.
async fn checkout(
    State(shop): State<Arc<Shop>>,
    Extension(held): Extension<HeldLocks>,
    headers: HeaderMap,
    body: Bytes,
) -> (HeaderMap, Bytes) {
    shop.calls.fetch_add(1, Ordering::SeqCst);
    let _inside: Vec<Inside> = held
        .names()
        .map(|name| shop.gauge(name).enter())
        .chain([shop.all.enter()])
        .collect();
    if let Some(locks) = &shop.locks {
        // The handler runs in every lock's reentrancy scope: the same client re-enters.
        for name in held.names() {
            let again = locks.lock(name).try_acquire(Duration::ZERO).await.unwrap();
            assert!(again.is_reentrant(), "{name} was not re-entered");
        }
    }
    tokio::time::sleep(shop.hold).await;
    let mut out = HeaderMap::new();
    let locks: Vec<String> = held.iter().map(|(n, t)| format!("{n}={t}")).collect();
    out.insert("x-locks", locks.join(",").parse().unwrap());
    assert_eq!(held.len(), locks.len());
    for (name, token) in held.iter() {
        assert_eq!(held.fencing_token(name), Some(token));
    }
    if let Some(ct) = headers.get("content-type") {
        out.insert("x-seen-content-type", ct.clone());
    }
    if let Some(len) = headers.get("content-length") {
        out.insert("x-seen-content-length", len.clone());
    }
    (out, body)
}

fn layer(locks: LockClient) -> MultiLockLayer<JsonNames> {
    MultiLockLayer::new(locks, JsonNames::new("stock:<items[].sku>"))
}

fn app(layer: MultiLockLayer<JsonNames>, shop: Arc<Shop>) -> Router {
    Router::new()
        .route("/checkout", post(checkout))
        .route_layer(layer)
        .with_state(shop)
}

/// Serves `shop` behind a layer on a new client of `redis`, with the options `configure` sets.
async fn serve_shop(
    redis: &RedisServer,
    shop: &Arc<Shop>,
    configure: impl FnOnce(MultiLockLayer<JsonNames>) -> MultiLockLayer<JsonNames>,
) -> SocketAddr {
    let layer = configure(layer(common::client(redis, RESPONSE_TIMEOUT).await));
    serve(app(layer, shop.clone())).await
}

/// A response as the client saw it.
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    /// The `x-locks` header: each name with its token, in lock order.
    fn locks(&self) -> Vec<(String, u64)> {
        let Some(value) = self.headers.get("x-locks") else {
            return Vec::new();
        };
        value
            .to_str()
            .unwrap()
            .split(',')
            .map(|pair| {
                let (n, t) = pair.split_once('=').unwrap();
                (n.to_owned(), t.parse().unwrap())
            })
            .collect()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends `request` over a new HTTP/1.1 connection to `addr`.
async fn send<B>(addr: SocketAddr, request: Request<B>) -> Reply
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut sender = common::connect(addr).await;
    let response = sender.send_request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// `POST /checkout` with `body` as JSON.
async fn post_json(addr: SocketAddr, body: impl Into<Bytes>) -> Reply {
    let request = Request::post("/checkout")
        .header("host", "shop")
        .header("content-type", "application/json")
        .body(Full::new(body.into()))
        .unwrap();
    send(addr, request).await
}

/// A cart of these SKUs.
fn cart(skus: &[&str]) -> String {
    let items: Vec<String> = skus
        .iter()
        .map(|s| format!(r#"{{"sku": "{s}", "qty": 1}}"#))
        .collect();
    format!(r#"{{"items": [{}]}}"#, items.join(", "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn carts_sharing_a_sku_never_hold_it_at_once_across_two_instances() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let shop = Shop::new(Duration::from_millis(15));
        let a = serve_shop(&redis, &shop, |l| l).await;
        let b = serve_shop(&redis, &shop, |l| l).await;
        let carts: [&[&str]; 4] = [
            &["shared", "x1"],
            &["y1", "shared"],
            &["shared", "x1", "y1"],
            &["z1", "shared", "z1"],
        ];
        let tasks: Vec<_> = (0..24)
            .map(|i| {
                let addr = if i % 2 == 0 { a } else { b };
                let body = cart(carts[i % carts.len()]);
                tokio::spawn(async move { post_json(addr, body).await })
            })
            .collect();
        let mut tokens: HashMap<String, Vec<u64>> = HashMap::new();
        for task in tasks {
            let reply = task.await.unwrap();
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
            for (name, token) in reply.locks() {
                tokens.entry(name).or_default().push(token);
            }
        }
        assert_eq!(shop.calls.load(Ordering::SeqCst), 24);
        for name in ["stock:shared", "stock:x1", "stock:y1", "stock:z1"] {
            assert_eq!(shop.max_on(name), 1, "two carts held {name} at once");
        }
        let shared = tokens.remove("stock:shared").unwrap();
        let mut distinct = shared.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            24,
            "one fencing token per checkout: {shared:?}"
        );
        // `z1` twice in a cart is one lock.
        assert_eq!(tokens["stock:z1"].len(), 6);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn disjoint_carts_run_in_parallel() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let shop = Shop::new(Duration::from_millis(400));
        let addr = serve_shop(&redis, &shop, |l| l).await;
        let tasks: Vec<_> = (0..4)
            .map(|i| {
                let body = cart(&[&format!("p{i}"), &format!("q{i}")]);
                tokio::spawn(async move { post_json(addr, body).await })
            })
            .collect();
        for task in tasks {
            assert_eq!(task.await.unwrap().status, StatusCode::OK);
        }
        // The four handlers overlapped (each holds for 400 ms): the proof that disjoint carts
        // ran in parallel, however slow the machine.
        assert_eq!(shop.all.max(), 4, "disjoint carts waited for each other");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn carts_listing_skus_in_opposite_orders_never_deadlock() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let shop = Shop::new(Duration::from_millis(5));
        let a = serve_shop(&redis, &shop, |l| l.wait(Duration::from_secs(20))).await;
        let b = serve_shop(&redis, &shop, |l| l.wait(Duration::from_secs(20))).await;
        let started = Instant::now();
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let (addr, body) = if i % 2 == 0 {
                    (a, cart(&["a", "b", "c", "d"]))
                } else {
                    (b, cart(&["d", "c", "b", "a"]))
                };
                tokio::spawn(async move { post_json(addr, body).await })
            })
            .collect();
        for task in tasks {
            let reply = task.await.unwrap();
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
            let names: Vec<String> = reply.locks().into_iter().map(|(n, _)| n).collect();
            assert_eq!(
                names,
                ["stock:a", "stock:b", "stock:c", "stock:d"],
                "one order"
            );
        }
        assert_eq!(shop.max_on("stock:a"), 1);
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{:?}",
            started.elapsed()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_gets_the_body_byte_for_byte_and_a_fencing_token_per_name() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let shop = Arc::new(Shop {
            locks: Some(locks.clone()),
            ..Shop::default()
        });
        let under_route_layer = serve(app(layer(locks.clone()), shop.clone())).await;
        let under_layer = serve(
            Router::new()
                .route("/checkout", post(checkout))
                .layer(layer(locks.clone()))
                .with_state(shop.clone()),
        )
        .await;
        // Odd whitespace, escapes, non-ASCII, a duplicate, a hostile SKU, an integer SKU.
        let body = "{\"items\":[ {\"sku\":\"b\\u00e9\"},\n\t{\"sku\": \"a:1{x}\"}, {\"sku\":\"b\u{e9}\"}, {\"sku\": 42} ],\"note\":\"\u{1F6D2}\"}  ";
        for addr in [under_route_layer, under_layer] {
            let first = post_json(addr, body).await;
            assert_eq!(first.status, StatusCode::OK, "{}", first.text());
            assert_eq!(first.body, body.as_bytes(), "the body changed on the way");
            assert_eq!(first.headers["x-seen-content-type"], "application/json");
            assert_eq!(
                first.headers["x-seen-content-length"],
                body.len().to_string().as_str()
            );
            let mut names: Vec<String> = first.locks().into_iter().map(|(n, _)| n).collect();
            names.sort();
            assert_eq!(names, ["stock:42", "stock:a%3A1%7Bx%7D", "stock:b%C3%A9"]);

            let second = post_json(addr, body).await;
            for ((n1, t1), (n2, t2)) in first.locks().into_iter().zip(second.locks()) {
                assert_eq!(n1, n2, "the same lock order");
                assert!(t2 > t1, "{n1}: token {t2} after {t1}");
            }
        }
        for name in ["stock:42", "stock:a%3A1%7Bx%7D", "stock:b%C3%A9"] {
            let freed = freed_within(&locks, name, RELEASED_WITHIN).await;
            assert!(freed.is_some(), "{name} still held");
        }

        // A body streamed in chunks, without Content-Length, arrives whole too.
        let (tx, rx) = mpsc::channel(4);
        let request = Request::post("/checkout")
            .header("host", "shop")
            .body(ChannelBody(rx))
            .unwrap();
        let reply = tokio::spawn(send(under_route_layer, request));
        for part in [&body[..10], &body[10..30], &body[30..]] {
            tx.send(Bytes::copy_from_slice(part.as_bytes())).await.unwrap();
        }
        drop(tx);
        let reply = reply.await.unwrap();
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        assert_eq!(reply.body, body.as_bytes());
    })
    .await;
}

/// A name the layer re-enters from an enclosing hold taken without a token (an unfenced
/// `LockLayer` around it) still comes with a real token in `HeldLocks`: the re-entered hold had
/// none yet, and `0` would compare as the smallest valid token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_reentered_from_an_unfenced_outer_layer_has_a_real_token() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let shop = Arc::new(Shop {
            locks: Some(locks.clone()),
            ..Shop::default()
        });
        let addr = serve(
            Router::new()
                .route("/checkout/{id}", post(checkout))
                .route_layer(layer(locks.clone()))
                .route_layer(lock_tower::LockLayer::new(locks.clone(), "stock:<id>"))
                .with_state(shop.clone()),
        )
        .await;
        let request = Request::post("/checkout/a")
            .header("host", "shop")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(cart(&["a", "b"]))))
            .unwrap();
        let reply = send(addr, request).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        let held = reply.locks();
        assert_eq!(held.len(), 2, "{held:?}");
        for (name, token) in held {
            assert!(token > 0, "{name}: token {token}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_carts_are_400_and_lock_nothing() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let shop = Shop::new(Duration::ZERO);
        let addr = serve(app(layer(locks.clone()).max_names(3), shop.clone())).await;
        let too_many = cart(&["a", "b", "c", "d"]);
        let long = "x".repeat(129);
        let too_long = cart(&[&long]);
        for (body, why) in [
            ("not json", "not JSON"),
            ("", "not JSON"),
            (r#"{"items": [{"sku": "a"}"#, "not JSON"),
            (r#"{"cart": []}"#, "missing"),
            (r#"{"items": [{"qty": 1}]}"#, "missing"),
            (r#"{"items": {"sku": "a"}}"#, "not a JSON array"),
            (r#"{"items": [{"sku": 1.5}]}"#, "string or integer"),
            (r#"{"items": [{"sku": {"id": 1}}]}"#, "string or integer"),
            (r#"{"items": [{"sku": null}]}"#, "string or integer"),
            (r#"{"items": [{"sku": ""}]}"#, "empty"),
            (r#"{"items": []}"#, "names no lock"),
            // A key twice in one object: a first-wins reader would see another cart.
            (r#"{"items": [{"sku": "a", "sku": "b"}]}"#, "duplicate key"),
            (
                r#"{"items": [{"sku": "a"}], "items": [{"sku": "b"}]}"#,
                "duplicate key",
            ),
            (
                r#"{"items": [{"sku": "a", "s\u006bu": "b"}]}"#,
                "duplicate key",
            ),
            (&too_many, "4 lock names"),
            (&too_long, "longer"),
        ] {
            let reply = post_json(addr, body.to_owned()).await;
            assert_eq!(
                reply.status,
                StatusCode::BAD_REQUEST,
                "{body}: {}",
                reply.text()
            );
            assert!(reply.text().contains(why), "{body}: {}", reply.text());
        }
        assert_eq!(shop.calls.load(Ordering::SeqCst), 0, "a handler ran");
        // Three distinct names (one twice) are within the limit.
        let reply = post_json(addr, cart(&["a", "b", "c", "a"])).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        assert_eq!(reply.locks().len(), 3);
        // Released in the background once the response is ready.
        for name in ["stock:a", "stock:b", "stock:c", "stock:d"] {
            let freed = freed_within(&locks, name, RELEASED_WITHIN).await;
            assert!(freed.is_some(), "{name} still held");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_content_length_is_413_before_the_body_is_sent() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let shop = Shop::new(Duration::ZERO);
        let addr = serve_shop(&redis, &shop, |l| l.max_body_bytes(1024)).await;

        // The head announces 1025 bytes and no byte of the body follows: only a layer that
        // answers from the head can reply.
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(
            b"POST /checkout HTTP/1.1\r\nhost: shop\r\ncontent-type: application/json\r\ncontent-length: 1025\r\n\r\n",
        )
        .await
        .unwrap();
        let mut head = vec![0; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut head))
            .await
            .expect("no answer without the body")
            .unwrap();
        let head = String::from_utf8_lossy(&head[..n]);
        assert!(head.starts_with("HTTP/1.1 413"), "{head:?}");

        // Exactly at the bound is fine.
        let (prefix, suffix) = (r#"{"items": [{"sku": "a"}], "pad": ""#, r#""}"#);
        let pad = " ".repeat(1024 - prefix.len() - suffix.len());
        let body = format!("{prefix}{pad}{suffix}");
        assert_eq!(body.len(), 1024);
        let fitting = post_json(addr, body).await;
        assert_eq!(fitting.status, StatusCode::OK, "{}", fitting.text());
        assert_eq!(shop.calls.load(Ordering::SeqCst), 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_without_content_length_is_413_once_it_passes_the_bound() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let shop = Shop::new(Duration::ZERO);
        let addr = serve_shop(&redis, &shop, |l| l.max_body_bytes(1024)).await;

        let (tx, rx) = mpsc::channel(1);
        let request = Request::post("/checkout")
            .header("host", "shop")
            .body(ChannelBody(rx))
            .unwrap();
        let reply = tokio::spawn(send(addr, request));
        // 3 × 400 bytes pass the bound in the third chunk; the sender stays open, so the answer
        // comes from the bound, not from the end of the body.
        for _ in 0..3 {
            tx.send(Bytes::from(vec![b' '; 400])).await.unwrap();
        }
        let reply = tokio::time::timeout(Duration::from_secs(5), reply)
            .await
            .expect("no answer while the body was still open")
            .unwrap();
        assert_eq!(
            reply.status,
            StatusCode::PAYLOAD_TOO_LARGE,
            "{}",
            reply.text()
        );
        assert!(reply.text().contains("1024 bytes"), "{}", reply.text());
        assert_eq!(shop.calls.load(Ordering::SeqCst), 0);
        drop(tx);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cart_with_a_busy_sku_is_423_with_retry_after_and_holds_nothing() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let shop = Shop::new(Duration::ZERO);
        let layer = layer(locks.clone()).wait(Duration::from_millis(200));
        let addr = serve(app(layer, shop.clone())).await;

        let other = common::client(&redis, RESPONSE_TIMEOUT).await;
        let held = other.lock("stock:b").acquire().await.unwrap();
        let started = Instant::now();
        let reply = post_json(addr, cart(&["a", "b", "c"])).await;
        assert_eq!(reply.status, StatusCode::LOCKED, "{}", reply.text());
        assert_eq!(reply.headers["retry-after"], "1");
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(shop.calls.load(Ordering::SeqCst), 0);
        // All or nothing: `stock:a` (taken before `stock:b`) was given back.
        assert!(is_free(&locks, "stock:a").await);
        assert!(is_free(&locks, "stock:c").await);

        held.release().await.unwrap();
        let reply = post_json(addr, cart(&["a", "b", "c"])).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_lost_mid_handler_drops_it_and_answers_503_and_redis_down_is_503() {
    common::bounded(TEST_LIMIT, async {
        let mut redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let shop = Shop::new(Duration::from_secs(5));
        let layer = layer(locks.clone()).lease(Duration::from_millis(300));
        let addr = serve(app(layer, shop.clone())).await;
        let started = Instant::now();
        let reply = post_json(addr, cart(&["a", "b"])).await;
        assert_eq!(
            reply.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            reply.text()
        );
        assert!(reply.text().contains("lost"), "{}", reply.text());
        // Before the handler's own 5 s were up: the loss ended it.
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(shop.calls.load(Ordering::SeqCst), 1);
        assert!(
            common::eventually(Duration::from_secs(1), || shop.all.now() == 0).await,
            "the handler was not dropped"
        );

        redis.stop();
        let reply = post_json(addr, cart(&["a", "b"])).await;
        assert_eq!(
            reply.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            reply.text()
        );
        assert_eq!(
            shop.calls.load(Ordering::SeqCst),
            1,
            "a handler ran unlocked"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_until_body_end_keeps_every_lock_until_the_response_body_ends() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let (senders, streaming) = common::streaming_handler();
        let app: Router = Router::new()
            .route("/checkout", post(streaming))
            .route_layer(layer(locks.clone()).hold_until_body_end());
        let mut sender = common::connect(serve(app).await).await;
        let request = Request::post("/checkout")
            .header("host", "shop")
            .body(Full::new(Bytes::from(cart(&["a", "b"]))))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(!is_free(&locks, "stock:a").await);
        assert!(!is_free(&locks, "stock:b").await);
        let tx = senders.lock().unwrap().pop().unwrap();
        tx.send(Bytes::from_static(b"done")).await.unwrap();
        drop(tx);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "done");
        for name in ["stock:a", "stock:b"] {
            let freed = freed_within(&locks, name, RELEASED_WITHIN).await;
            assert!(freed.is_some(), "{name} still held after the body ended");
        }
    })
    .await;
}

// --- tonic: names from a protobuf message with a closure source -------------------------------

const CHECKOUT: &str = "/shop.Shop/Checkout";

#[derive(Clone, PartialEq, prost::Message)]
struct CheckoutRequest {
    #[prost(string, repeated, tag = "1")]
    skus: Vec<String>,
}

/// Not a `CheckoutRequest`: field 1 as a varint, where a string belongs.
#[derive(Clone, PartialEq, prost::Message)]
struct NotACheckout {
    #[prost(uint64, tag = "1")]
    skus: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct CheckoutReply {
    #[prost(string, repeated, tag = "1")]
    locks: Vec<String>,
    #[prost(uint64, repeated, tag = "2")]
    fencing_tokens: Vec<u64>,
}

/// A hand-written unary gRPC service: counts its calls, replies with the locks it holds.
#[derive(Clone, Default)]
struct GrpcShop {
    calls: Arc<AtomicUsize>,
}

impl UnaryMethod for GrpcShop {
    type Request = CheckoutRequest;
    type Reply = CheckoutReply;
    const SERVICE: &'static str = "shop.Shop";
    const PATH: &'static str = CHECKOUT;

    fn call(
        &self,
        request: tonic::Request<CheckoutRequest>,
    ) -> BoxFuture<Result<tonic::Response<CheckoutReply>, Status>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let held = request
                .extensions()
                .get::<HeldLocks>()
                .cloned()
                .ok_or_else(|| Status::internal("not locked"))?;
            Ok(tonic::Response::new(CheckoutReply {
                locks: held.names().map(str::to_owned).collect(),
                fencing_tokens: held.iter().map(|(_, t)| t).collect(),
            }))
        })
    }
}

async fn call<M>(addr: SocketAddr, message: M) -> Result<CheckoutReply, Status>
where
    M: prost::Message + Send + Sync + 'static,
{
    common::call_unary(addr, CHECKOUT, tonic::Request::new(message)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_lock_the_skus_of_their_message_and_bad_messages_are_rejected() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let names = BodyNames::from_fn(|_: &http::request::Parts, body: &Bytes| {
            let request = <CheckoutRequest as prost::Message>::decode(grpc_message(body)?)
                .map_err(|_| invalid_body("not a CheckoutRequest"))?;
            Ok(request
                .skus
                .iter()
                .map(|sku| format!("stock:{}", escape(sku)))
                .collect())
        });
        let layer = MultiLockLayer::new(locks.clone(), names)
            .max_body_bytes(256)
            .wait(Duration::from_millis(200));
        let shop = GrpcShop::default();
        let addr = common::serve_grpc(
            Server::builder()
                .layer(layer)
                .add_service(GrpcServer(shop.clone())),
        )
        .await;

        let skus = |s: &[&str]| CheckoutRequest {
            skus: s.iter().map(|&s| s.to_owned()).collect(),
        };
        let reply = call(addr, skus(&["b", "a", "b"])).await.unwrap();
        assert_eq!(reply.locks, ["stock:a", "stock:b"]);
        assert_eq!(reply.fencing_tokens.len(), 2);
        let again = call(addr, skus(&["a"])).await.unwrap();
        assert!(again.fencing_tokens[0] > reply.fencing_tokens[0]);

        let undecodable = call(addr, NotACheckout { skus: 7 }).await.unwrap_err();
        assert_eq!(undecodable.code(), Code::InvalidArgument, "{undecodable:?}");
        assert!(undecodable.message().contains("not a CheckoutRequest"));
        let empty = call(addr, skus(&[])).await.unwrap_err();
        assert_eq!(empty.code(), Code::InvalidArgument, "{empty:?}");
        let big = "x".repeat(300);
        let too_large = call(addr, skus(&[&big])).await.unwrap_err();
        assert_eq!(too_large.code(), Code::ResourceExhausted, "{too_large:?}");

        let held = locks.lock("stock:b").acquire().await.unwrap();
        let busy = call(addr, skus(&["a", "b"])).await.unwrap_err();
        assert_eq!(busy.code(), Code::Aborted, "{busy:?}");
        held.release().await.unwrap();
        assert!(is_free(&locks, "stock:a").await, "all or nothing");

        assert_eq!(shop.calls.load(Ordering::SeqCst), 2, "a rejected call ran");
    })
    .await;
}
