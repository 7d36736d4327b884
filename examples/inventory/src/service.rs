//! The service: `POST /stock/{id}/purchase`, one request at a time per product through
//! `LockLayer`, every save fenced by the lock's token.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Extension, Router};
use lock_tower::{HeldLock, LockClient, LockLayer};
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use tokio::io::AsyncReadExt;

use crate::BoxError;

/// How long a purchase waits for its product's lock before it is answered 423.
const WAIT: Duration = Duration::from_secs(5);

/// The "business logic" between load and save; it widens the race window the lock closes.
const THINK: Duration = Duration::from_millis(1);

/// Saves a product's stock if the fencing token is not older than the last accepted one: the
/// only thing the store must support. KEYS: stock, fence; ARGV: new stock, token.
const FENCED_SAVE: &str = r"
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) < last then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], ARGV[1])
return 1
";

pub(crate) fn stock_key(id: &str) -> String {
    format!("inventory:stock:{id}")
}
pub(crate) fn fence_key(id: &str) -> String {
    format!("inventory:fence:{id}")
}
pub(crate) fn sold_key(id: &str) -> String {
    format!("inventory:sold:{id}")
}

#[derive(Clone)]
struct Store {
    redis: ConnectionManager,
    save: Arc<redis::Script>,
}

/// One service instance: `POST /stock/{id}/purchase` and `GET /health`.
pub(crate) async fn serve(url: &str, port: u16, locked: bool) -> Result<(), BoxError> {
    let store = Store {
        redis: ConnectionManager::new(redis::Client::open(url)?).await?,
        save: Arc::new(redis::Script::new(FENCED_SAVE)),
    };
    let mut purchases = Router::new().route("/stock/{id}/purchase", post(purchase));
    if locked {
        let locks = LockClient::connect(url).await?;
        // `route_layer`: only matched routes are locked; the key is the `{id}` path param.
        purchases = purchases.route_layer(LockLayer::new(locks, "stock:<id>").wait(WAIT));
    }
    let app = purchases
        .route("/health", get(|| async { "ok" }))
        .with_state(store);

    // Exit when the driver goes away (our stdin closes), even if it could not kill us.
    tokio::spawn(async {
        let mut buf = [0u8; 64];
        while tokio::io::stdin().read(&mut buf).await.is_ok_and(|n| n > 0) {}
        std::process::exit(0);
    });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    axum::serve(listener, app).await?;
    Ok(())
}

/// Sells one unit: load, think, save (fenced when locked), count.
async fn purchase(
    State(store): State<Store>,
    Path(id): Path<String>,
    held: Option<Extension<HeldLock>>,
) -> Result<(StatusCode, &'static str), (StatusCode, String)> {
    let fail = |e: redis::RedisError| (StatusCode::SERVICE_UNAVAILABLE, e.to_string());
    let mut redis = store.redis.clone();
    let stock: Option<i64> = redis.get(stock_key(&id)).await.map_err(fail)?;
    let stock = stock.unwrap_or(0);
    tokio::time::sleep(THINK).await;
    if stock <= 0 {
        return Ok((StatusCode::CONFLICT, "out of stock"));
    }
    match held {
        Some(Extension(lock)) => {
            let saved: i64 = store
                .save
                .key(stock_key(&id))
                .key(fence_key(&id))
                .arg(stock - 1)
                .arg(lock.fencing_token())
                .invoke_async(&mut redis)
                .await
                .map_err(fail)?;
            if saved == 0 {
                return Ok((StatusCode::CONFLICT, "stale fencing token"));
            }
        }
        None => {
            let () = redis.set(stock_key(&id), stock - 1).await.map_err(fail)?;
        }
    }
    let _: i64 = redis.incr(sold_key(&id), 1).await.map_err(fail)?;
    Ok((StatusCode::OK, "sold"))
}
