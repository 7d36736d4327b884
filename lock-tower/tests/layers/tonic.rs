//! `LockLayer` and `KeyedConcurrencyLimitLayer` in tonic 0.14's `Server::builder().layer(…)`
//! against a real `redis-server`: calls keyed on `x-product-id` metadata serialise (or run at
//! most N at a time), and rejections are gRPC statuses (`ABORTED`, `RESOURCE_EXHAUSTED`,
//! `UNAVAILABLE`, `INVALID_ARGUMENT`). The service is written by hand (no protoc).

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{BoxFuture, GrpcServer, UnaryMethod};
use lock_tests::RedisServer;
use lock_tower::name::Headers;
use lock_tower::{HeldLock, KeyedConcurrencyLimitLayer, LockClient, LockLayer, LockOptions};
use tonic::transport::Server;
use tonic::{Code, Status};

/// How long a reply may take before it counts as lost.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(300);
/// Every test finishes within this, or fails.
const TEST_LIMIT: Duration = Duration::from_secs(60);
const RESERVE: &str = "/inventory.Inventory/Reserve";

#[derive(Clone, PartialEq, prost::Message)]
struct ReserveRequest {
    #[prost(uint32, tag = "1")]
    quantity: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ReserveReply {
    #[prost(string, tag = "1")]
    lock: String,
    #[prost(uint64, tag = "2")]
    fencing_token: u64,
}

/// Counts how many calls run in the handler at once.
#[derive(Default)]
struct Probe {
    now: AtomicUsize,
    max: AtomicUsize,
    calls: AtomicUsize,
}

/// A hand-written unary gRPC service: holds each call for `hold`, replies with its lock.
#[derive(Clone)]
struct Inventory {
    probe: Arc<Probe>,
    hold: Duration,
}

impl UnaryMethod for Inventory {
    type Request = ReserveRequest;
    type Reply = ReserveReply;
    const SERVICE: &'static str = "inventory.Inventory";
    const PATH: &'static str = RESERVE;

    fn call(
        &self,
        request: tonic::Request<ReserveRequest>,
    ) -> BoxFuture<Result<tonic::Response<ReserveReply>, Status>> {
        let this = self.clone();
        Box::pin(async move {
            let held = request
                .extensions()
                .get::<HeldLock>()
                .cloned()
                .ok_or_else(|| Status::internal("not locked"))?;
            let n = this.probe.now.fetch_add(1, Ordering::SeqCst) + 1;
            this.probe.max.fetch_max(n, Ordering::SeqCst);
            tokio::time::sleep(this.hold).await;
            this.probe.now.fetch_sub(1, Ordering::SeqCst);
            this.probe.calls.fetch_add(1, Ordering::SeqCst);
            Ok(tonic::Response::new(ReserveReply {
                lock: held.name().to_owned(),
                fencing_token: held
                    .fencing_token()
                    .await
                    .map_err(|e| Status::unavailable(e.to_string()))?,
            }))
        })
    }
}

async fn serve(layer: LockLayer<Headers>, service: Inventory) -> SocketAddr {
    common::serve_grpc(
        Server::builder()
            .layer(layer)
            .add_service(GrpcServer(service)),
    )
    .await
}

async fn serve_limited(
    layer: KeyedConcurrencyLimitLayer<Headers>,
    service: Inventory,
) -> SocketAddr {
    common::serve_grpc(
        Server::builder()
            .layer(layer)
            .add_service(GrpcServer(service)),
    )
    .await
}

async fn reserve(addr: SocketAddr, product: Option<&str>) -> Result<ReserveReply, Status> {
    let metadata: Vec<(&str, &str)> = product.map(|p| ("x-product-id", p)).into_iter().collect();
    reserve_with(addr, &metadata).await
}

/// A call carrying these metadata entries.
async fn reserve_with(addr: SocketAddr, metadata: &[(&str, &str)]) -> Result<ReserveReply, Status> {
    let mut request = tonic::Request::new(ReserveRequest { quantity: 1 });
    for (key, value) in metadata {
        let key = tonic::metadata::MetadataKey::from_bytes(key.as_bytes()).unwrap();
        request.metadata_mut().insert(key, value.parse().unwrap());
    }
    common::call_unary(addr, RESERVE, request).await
}

fn layer(locks: LockClient) -> LockLayer<Headers> {
    LockLayer::new(locks, Headers::new("stock:<x-product-id>"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_with_the_same_metadata_key_serialise_across_two_servers() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let probe = Arc::new(Probe::default());
        let service = Inventory {
            probe: probe.clone(),
            hold: Duration::from_millis(15),
        };
        let a = serve(
            layer(common::client(&redis, RESPONSE_TIMEOUT).await),
            service.clone(),
        )
        .await;
        let b = serve(
            layer(common::client(&redis, RESPONSE_TIMEOUT).await),
            service,
        )
        .await;
        let calls: Vec<_> = (0..16)
            .map(|i| tokio::spawn(reserve(if i % 2 == 0 { a } else { b }, Some("42"))))
            .collect();
        let mut tokens = Vec::new();
        for call in calls {
            let reply = call.await.unwrap().unwrap();
            assert_eq!(reply.lock, "stock:42", "key from metadata");
            tokens.push(reply.fencing_token);
        }
        assert_eq!(probe.calls.load(Ordering::SeqCst), 16);
        assert_eq!(probe.max.load(Ordering::SeqCst), 1, "calls overlapped");
        tokens.sort_unstable();
        tokens.dedup();
        assert_eq!(tokens.len(), 16);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn different_keys_overlap_and_calls_without_the_key_pass_through() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let probe = Arc::new(Probe::default());
        let service = Inventory {
            probe: probe.clone(),
            hold: Duration::from_millis(300),
        };
        let addr = serve(
            layer(common::client(&redis, RESPONSE_TIMEOUT).await),
            service,
        )
        .await;
        let calls: Vec<_> = (0..4)
            .map(|i| tokio::spawn(async move { reserve(addr, Some(&i.to_string())).await }))
            .collect();
        for call in calls {
            call.await.unwrap().unwrap();
        }
        assert!(
            probe.max.load(Ordering::SeqCst) >= 2,
            "different keys did not overlap"
        );

        // No `x-product-id`: not locked, so the handler finds no `HeldLock`.
        let status = reserve(addr, None).await.unwrap_err();
        assert_eq!(status.code(), Code::Internal);
        assert_eq!(status.message(), "not locked");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_is_aborted_and_a_bad_key_is_invalid_argument() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let probe = Arc::new(Probe::default());
        let service = Inventory {
            probe: probe.clone(),
            hold: Duration::ZERO,
        };
        let addr = serve(
            layer(locks.clone())
                .wait(Duration::from_millis(100))
                .max_name_value_len(8),
            service,
        )
        .await;
        let _holder = locks
            .lock("stock:7")
            .acquire_with(LockOptions::new().lease(Duration::from_secs(5)))
            .await
            .unwrap();
        let status = reserve(addr, Some("7")).await.unwrap_err();
        assert_eq!(status.code(), Code::Aborted, "{status:?}");
        assert!(status.message().contains("stock:7"), "{}", status.message());
        // A retry hint a gRPC retry policy reads: the default 1 s, not the holder's 5 s lease.
        assert_eq!(
            status
                .metadata()
                .get("grpc-retry-pushback-ms")
                .map(|v| v.to_str().unwrap()),
            Some("1000"),
            "{status:?}"
        );

        let status = reserve(addr, Some("123456789")).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert_eq!(probe.calls.load(Ordering::SeqCst), 0);

        assert_eq!(reserve(addr, Some("8")).await.unwrap().lock, "stock:8");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_is_unavailable() {
    common::bounded(TEST_LIMIT, async {
        let mut redis = RedisServer::start();
        let probe = Arc::new(Probe::default());
        let service = Inventory {
            probe: probe.clone(),
            hold: Duration::ZERO,
        };
        let addr = serve(
            layer(common::client(&redis, RESPONSE_TIMEOUT).await),
            service,
        )
        .await;
        reserve(addr, Some("1")).await.unwrap();
        redis.stop();
        let started = Instant::now();
        let status = reserve(addr, Some("1")).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(started.elapsed() < Duration::from_secs(15));
        assert_eq!(probe.calls.load(Ordering::SeqCst), 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_name_rejects_calls_without_the_metadata_as_invalid_argument() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let probe = Arc::new(Probe::default());
        let service = Inventory {
            probe: probe.clone(),
            hold: Duration::ZERO,
        };
        let addr = serve(layer(locks.clone()).require_name(), service).await;
        let status = reserve(addr, None).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert_eq!(probe.calls.load(Ordering::SeqCst), 0, "served unlocked");
        assert_eq!(reserve(addr, Some("3")).await.unwrap().lock, "stock:3");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_keyed_concurrency_limit_is_resource_exhausted_when_full() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
        let probe = Arc::new(Probe::default());
        let service = Inventory {
            probe: probe.clone(),
            hold: Duration::from_millis(800),
        };
        let limit = |locks: LockClient| {
            KeyedConcurrencyLimitLayer::new(locks, Headers::new("calls:<x-product-id>"), 2)
                .wait(Duration::ZERO)
        };
        let a = serve_limited(limit(locks.clone()), service.clone()).await;
        let b = serve_limited(
            limit(common::client(&redis, RESPONSE_TIMEOUT).await),
            service,
        )
        .await;
        let calls: Vec<_> = (0..2)
            .map(|i| tokio::spawn(reserve(if i == 0 { a } else { b }, Some("42"))))
            .collect();
        assert!(
            common::eventually(Duration::from_secs(5), || probe.now.load(Ordering::SeqCst)
                == 2)
            .await,
            "two calls did not run together"
        );
        // Both permits of `calls:42` are taken, on two servers: a third call is turned away.
        let status = reserve(a, Some("42")).await.unwrap_err();
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(
            status.metadata().get("grpc-retry-pushback-ms").is_some(),
            "{status:?}"
        );
        assert!(
            status.message().contains("calls:42"),
            "{}",
            status.message()
        );
        // Another key has its own permits.
        assert_eq!(reserve(b, Some("7")).await.unwrap().lock, "calls:7");
        for call in calls {
            assert_eq!(call.await.unwrap().unwrap().lock, "calls:42");
        }
        // At most the two calls on `calls:42` and the one on `calls:7` ran together.
        let max = probe.max.load(Ordering::SeqCst);
        assert!((2..=3).contains(&max), "{max} calls at once");
        assert_eq!(probe.calls.load(Ordering::SeqCst), 3);
    })
    .await;
}

/// A call on `product` carrying `x-access` metadata (`read` or `write`).
async fn reserve_as(addr: SocketAddr, product: &str, access: &str) -> Result<ReserveReply, Status> {
    reserve_with(addr, &[("x-product-id", product), ("x-access", access)]).await
}

/// Every gRPC call is a POST, so the read/write mode takes a classifier: here by metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_write_mode_over_grpc_shares_reads_and_serialises_writes_across_two_servers() {
    common::bounded(TEST_LIMIT, async {
        let redis = RedisServer::start();
        let probe = Arc::new(Probe::default());
        let service = Inventory {
            probe: probe.clone(),
            hold: Duration::from_millis(150),
        };
        let classify = |parts: &http::request::Parts| match parts.headers.get("x-access") {
            Some(v) if v == "read" => lock_tower::Access::Read,
            _ => lock_tower::Access::Write,
        };
        let mut servers = Vec::new();
        for _ in 0..2 {
            let locks = common::client(&redis, RESPONSE_TIMEOUT).await;
            servers.push(serve(layer(locks).access(classify), service.clone()).await);
        }
        let reads: Vec<_> = (0..6)
            .map(|i| tokio::spawn(reserve_as(servers[i % 2], "42", "read")))
            .collect();
        for call in reads {
            assert_eq!(call.await.unwrap().unwrap().lock, "stock:42");
        }
        assert!(
            probe.max.load(Ordering::SeqCst) >= 2,
            "reads on one key did not overlap"
        );

        probe.max.store(0, Ordering::SeqCst);
        let writes: Vec<_> = (0..6)
            .map(|i| tokio::spawn(reserve_as(servers[i % 2], "42", "write")))
            .collect();
        let mut tokens = Vec::new();
        for call in writes {
            tokens.push(call.await.unwrap().unwrap().fencing_token);
        }
        assert_eq!(probe.max.load(Ordering::SeqCst), 1, "writes overlapped");
        tokens.sort_unstable();
        tokens.dedup();
        assert_eq!(tokens.len(), 6, "each write its own fencing token");
    })
    .await;
}
