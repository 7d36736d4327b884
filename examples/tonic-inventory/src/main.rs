//! The inventory service over gRPC (tonic 0.14), locked per product on the `x-product-id`
//! metadata with `Server::builder().layer(LockLayer…)`.
//!
//! Run with `cargo run -p example-tonic-inventory` (starts its own redis-server on a free
//! loopback port unless `REDIS_URL` is set).
//!
//! No protoc: the messages are `prost` derives and the service is the few lines tonic-build
//! would generate, written by hand.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use lock_tower::name::Headers;
use lock_tower::{HeldLock, LockClient, LockLayer};
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use tonic::codegen::http;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Request, Response, Status};
use tonic_prost::ProstCodec;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

const PURCHASE: &str = "/inventory.Inventory/Purchase";
const PRODUCTS: [&str; 2] = ["p1", "p2"];
const STOCK: i64 = 50;
const CALLS: usize = 400;

/// `message PurchaseRequest { uint32 quantity = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct PurchaseRequest {
    /// Units to buy.
    #[prost(uint32, tag = "1")]
    pub quantity: u32,
}

/// `message PurchaseReply { int64 stock_left = 1; uint64 fencing_token = 2; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct PurchaseReply {
    /// Units left after this purchase.
    #[prost(int64, tag = "1")]
    pub stock_left: i64,
    /// The fencing token the save was made with.
    #[prost(uint64, tag = "2")]
    pub fencing_token: u64,
}

/// Saves the stock if the fencing token is not older than the last accepted one.
const FENCED_SAVE: &str = r"
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) < last then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], ARGV[1])
return 1
";

/// The `inventory.Inventory` service: what tonic-build would generate as `InventoryServer`.
#[derive(Clone)]
struct InventoryServer {
    redis: ConnectionManager,
    save: Arc<redis::Script>,
}

impl tonic::server::NamedService for InventoryServer {
    const NAME: &'static str = "inventory.Inventory";
}

impl InventoryServer {
    async fn purchase(
        &self,
        request: Request<PurchaseRequest>,
    ) -> Result<Response<PurchaseReply>, Status> {
        // The layer put the lock it holds for this call into the extensions.
        let Some(lock) = request.extensions().get::<HeldLock>().cloned() else {
            return Err(Status::invalid_argument(
                "x-product-id metadata is required",
            ));
        };
        let id = request
            .metadata()
            .get("x-product-id")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| Status::invalid_argument("bad x-product-id"))?
            .to_owned();
        let quantity = i64::from(request.get_ref().quantity.max(1));
        // Came with the grant (the layer is `fenced()`); a call whose lock was lost gets none.
        let token = lock
            .fencing_token()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let unavailable = |e: redis::RedisError| Status::unavailable(e.to_string());
        let mut redis = self.redis.clone();
        let stock: Option<i64> = redis.get(stock_key(&id)).await.map_err(unavailable)?;
        let stock = stock.unwrap_or(0);
        if stock < quantity {
            return Err(Status::failed_precondition("out of stock"));
        }
        let saved: i64 = self
            .save
            .key(stock_key(&id))
            .key(format!("inventory:fence:{id}"))
            .arg(stock - quantity)
            .arg(token)
            .invoke_async(&mut redis)
            .await
            .map_err(unavailable)?;
        if saved == 0 {
            return Err(Status::aborted("stale fencing token"));
        }
        let _: i64 = redis
            .incr(format!("inventory:sold:{id}"), quantity)
            .await
            .map_err(unavailable)?;
        Ok(Response::new(PurchaseReply {
            stock_left: stock - quantity,
            fencing_token: token,
        }))
    }
}

impl tonic::server::UnaryService<PurchaseRequest> for InventoryServer {
    type Response = PurchaseReply;
    type Future = BoxFuture<Result<Response<PurchaseReply>, Status>>;

    fn call(&mut self, request: Request<PurchaseRequest>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.purchase(request).await })
    }
}

impl tower_service::Service<http::Request<tonic::body::Body>> for InventoryServer {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            if request.uri().path() != PURCHASE {
                return Ok(Status::unimplemented(request.uri().path()).into_http());
            }
            let mut grpc = tonic::server::Grpc::new(ProstCodec::default());
            Ok(grpc.unary(this, request).await)
        })
    }
}

fn stock_key(id: &str) -> String {
    format!("inventory:stock:{id}")
}

/// One server instance with its own lock client.
async fn start_server(url: &str) -> Result<SocketAddr, BoxError> {
    let locks = LockClient::connect(url).await?;
    let store = InventoryServer {
        redis: ConnectionManager::new(redis::Client::open(url)?).await?,
        save: Arc::new(redis::Script::new(FENCED_SAVE)),
    };
    let layer = LockLayer::new(locks, Headers::new("stock:<x-product-id>"))
        .wait(Duration::from_secs(5))
        .fenced();
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse()?)?;
    let addr = incoming.local_addr()?;
    tokio::spawn(
        Server::builder()
            .layer(layer)
            .add_service(store)
            .serve_with_incoming(incoming),
    );
    Ok(addr)
}

async fn purchase(channel: Channel, product: &str) -> Result<PurchaseReply, Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let mut request = Request::new(PurchaseRequest { quantity: 1 });
    request.metadata_mut().insert(
        "x-product-id",
        product.parse().map_err(|_| Status::internal("bad id"))?,
    );
    grpc.unary(
        request,
        http::uri::PathAndQuery::from_static(PURCHASE),
        ProstCodec::default(),
    )
    .await
    .map(Response::into_inner)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let (_server, url) = lock_tests::local_redis();
    let mut redis = ConnectionManager::new(redis::Client::open(url.as_str())?).await?;
    for id in PRODUCTS {
        let () = redis.set(stock_key(id), STOCK).await?;
        let () = redis
            .del(&[
                format!("inventory:fence:{id}"),
                format!("inventory:sold:{id}"),
            ])
            .await?;
    }
    let addrs = [start_server(&url).await?, start_server(&url).await?];
    let mut channels = Vec::new();
    for addr in addrs {
        channels.push(
            Channel::from_shared(format!("http://{addr}"))?
                .connect()
                .await?,
        );
    }
    println!(
        "{CALLS} concurrent Purchase calls to 2 gRPC servers, products {PRODUCTS:?} x {STOCK} in stock, locked on x-product-id"
    );
    let started = Instant::now();
    let calls: Vec<_> = (0..CALLS)
        .map(|i| {
            let channel = channels[i % channels.len()].clone();
            tokio::spawn(async move { purchase(channel, PRODUCTS[i % PRODUCTS.len()]).await })
        })
        .collect();
    let (mut sold, mut out_of_stock, mut busy, mut other) = (0, 0, 0, 0);
    for call in calls {
        match call.await? {
            Ok(_) => sold += 1,
            Err(s) if s.code() == Code::FailedPrecondition => out_of_stock += 1,
            Err(s) if s.code() == Code::Aborted => busy += 1,
            Err(s) => {
                other += 1;
                eprintln!("{s:?}");
            }
        }
    }
    let mut oversold = 0;
    for id in PRODUCTS {
        let n: Option<i64> = redis.get(format!("inventory:sold:{id}")).await?;
        oversold += (n.unwrap_or(0) - STOCK).max(0);
    }
    println!("  sold            {sold:>6}");
    println!("  out of stock    {out_of_stock:>6}   (FAILED_PRECONDITION)");
    println!("  busy            {busy:>6}   (ABORTED from the lock layer)");
    println!("  other errors    {other:>6}");
    println!("  oversold        {oversold:>6}");
    println!(
        "  elapsed         {:>6.2} s",
        started.elapsed().as_secs_f64()
    );
    if oversold > 0 {
        std::process::exit(1);
    }
    Ok(())
}
