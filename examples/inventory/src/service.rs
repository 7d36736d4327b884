//! The service: `POST /stock/{id}/purchase` (one product, under `LockLayer`) and
//! `POST /checkout` (a cart of several products, under `MultiLockLayer`), every save fenced by
//! the lock's token. A purchase's answer tells where its time went in a `Server-Timing` header
//! (`lock;dur=…, store;dur=…`, milliseconds), which the load driver adds up.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use axum::extract::{Path, Request, State};
use axum::http::HeaderName;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use lock_tower::name::{DEFAULT_MAX_NAME_VALUE_LEN, JsonNames, NameTemplate};
use lock_tower::{HeldLock, HeldLocks, LockClient, LockLayer, MultiLockLayer};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;

use crate::BoxError;
use crate::store::{Store, StoreError};

/// How long a request waits for its lock (a cart: for all of its locks) before it is answered
/// 423.
const WAIT: Duration = Duration::from_secs(10);

/// The "business logic" between load and save; it widens the race window the lock closes.
const THINK: Duration = Duration::from_millis(1);

/// Connections per service instance: enough for the unlocked load, where every request is in
/// the store at once; with the lock at most one request per product is.
const CONNECTIONS: u32 = 16;

/// A cart's limits: anything bigger is answered 400.
const MAX_CART_ITEMS: usize = 16;
const MAX_ITEM_QTY: i64 = 100;

/// The lock names of the products: `stock:<id>` for a purchase (`LockLayer`, the `{id}` path
/// param), `stock:<items[].sku>` for a cart (`MultiLockLayer`). The same name for one product,
/// so a cart and a purchase of it exclude each other and share one token sequence.
const PURCHASE_LOCK: &str = "stock:<id>";
const CART_LOCKS: &str = "stock:<items[].sku>";

/// The lock, and fencing, name of a product, escaped exactly as the layers escape it (`stock:3`;
/// a sku such as `a:b` becomes `stock:a%3Ab`); `None` for a sku no layer accepts (empty, or
/// longer than the layers' bound).
pub(crate) fn lock_name(sku: &str) -> Option<String> {
    static TEMPLATE: LazyLock<NameTemplate> = LazyLock::new(|| NameTemplate::new("stock:<sku>"));
    TEMPLATE
        .render(DEFAULT_MAX_NAME_VALUE_LEN, |_| {
            Some(Cow::Borrowed(sku.as_bytes()))
        })
        .ok()
        .flatten()
}

/// The body of `POST /checkout`: `{"items":[{"sku":"3","qty":1},{"sku":"1","qty":2}]}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Cart {
    pub(crate) items: Vec<CartItem>,
}

/// One line of a [`Cart`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CartItem {
    pub(crate) sku: String,
    pub(crate) qty: i64,
}

type Reply = (StatusCode, String);

/// When a request reached the service, before any lock layer: what the purchase handler
/// measures its lock wait from.
#[derive(Debug, Clone, Copy)]
struct Arrived(Instant);

/// Stamps a request with the instant it reached the service (the outermost layer).
async fn stamp_arrival(mut request: Request) -> Request {
    request.extensions_mut().insert(Arrived(Instant::now()));
    request
}

/// Where a purchase's time went in the service, sent back as
/// `Server-Timing: lock;dur=<ms>, store;dur=<ms>`: `lock` from the request's arrival to the
/// handler (the lock layer's wait and its acquire; a few µs of routing when unlocked), `store`
/// in the store (the load, and the save's transaction from its `BEGIN` to its `COMMIT`,
/// including the wait for a connection and for SQLite's writer).
fn server_timing(lock: Duration, store: Duration) -> [(HeaderName, String); 1] {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    [(
        HeaderName::from_static("server-timing"),
        format!("lock;dur={:.3}, store;dur={:.3}", ms(lock), ms(store)),
    )]
}

/// The handlers' state: the store, and whether the routes are locked (then a request without
/// its lock extension is a wiring bug, answered 500 rather than sold unfenced).
#[derive(Debug, Clone)]
struct App {
    store: Store,
    locked: bool,
}

fn reply(status: StatusCode, text: &str) -> Reply {
    (status, text.to_owned())
}

/// What a failed store operation answers: 409 for a stale token, 500 for anything else.
fn store_failure(e: StoreError) -> Reply {
    if e.is_stale() {
        reply(StatusCode::CONFLICT, "stale fencing token")
    } else {
        (StatusCode::INTERNAL_SERVER_ERROR, format!("store: {e}"))
    }
}

/// One service instance: `POST /stock/{id}/purchase`, `POST /checkout`, `GET /health` and
/// `GET /metrics` (the locks' metrics in Prometheus' text format; groups `stock:<id>` and
/// `stock:<items[].sku>`, the layers' templates).
pub(crate) async fn serve(
    redis_url: &str,
    database_url: &str,
    port: u16,
    locked: bool,
) -> Result<(), BoxError> {
    // Everything the `metrics` facade records in this process (the locks' metrics), rendered
    // on `GET /metrics`; no listener of the exporter's own.
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    let store = Store::connect(database_url, CONNECTIONS, false).await?;
    let mut purchases = Router::new().route("/stock/{id}/purchase", post(purchase));
    let mut checkout = Router::new().route("/checkout", post(checkout));
    if locked {
        let locks = LockClient::connect(redis_url).await?;
        // `route_layer`: only matched routes are locked; the name is the `{id}` path param.
        // `fenced()`: every purchase writes the stock fenced by its token, so the token comes
        // with the grant instead of costing a round trip of its own.
        purchases = purchases.route_layer(
            LockLayer::new(locks.clone(), PURCHASE_LOCK)
                .wait(WAIT)
                .fenced(),
        );
        // One lock per product in the cart, taken together (whatever the order of the items).
        checkout =
            checkout.route_layer(MultiLockLayer::new(locks, JsonNames::new(CART_LOCKS)).wait(WAIT));
    }
    let app = purchases
        .merge(checkout)
        .route("/health", get(|| async { "ok" }))
        .route(
            "/metrics",
            get(move || std::future::ready(metrics.render())),
        )
        // Outside the lock layers: a purchase's lock wait is measured from here.
        .layer(axum::middleware::map_request(stamp_arrival))
        .with_state(App { store, locked });

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

/// Sells one unit (see [`sell_one`]), and answers with where the time went: the lock wait
/// and the store's time in a `Server-Timing` header.
async fn purchase(
    State(app): State<App>,
    Path(id): Path<String>,
    Extension(Arrived(arrived)): Extension<Arrived>,
    held: Option<Extension<HeldLock>>,
) -> ([(HeaderName, String); 1], Reply) {
    let lock_wait = arrived.elapsed();
    let mut in_store = Duration::ZERO;
    let reply = sell_one(app, id, held, &mut in_store).await;
    (server_timing(lock_wait, in_store), reply)
}

/// Runs `op`, adding the time it took to `total`.
async fn timed<T>(total: &mut Duration, op: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let out = op.await;
    *total += started.elapsed();
    out
}

/// Sells one unit like an ORM would: load the product, think, save the new stock (fenced by
/// the lock's token when locked) and record the sale in one transaction; the time spent in the
/// store is added to `in_store`.
///
/// Without the lock two requests load the same stock and both save `stock - 1`: one unit sold
/// twice. The save's transaction (read committed on PostgreSQL) does not prevent it; the
/// lock does, and the fence refuses a save from a holder whose lock was taken over.
async fn sell_one(
    App { store, locked }: App,
    id: String,
    held: Option<Extension<HeldLock>>,
    in_store: &mut Duration,
) -> Reply {
    if locked && held.is_none() {
        return reply(StatusCode::INTERNAL_SERVER_ERROR, "served without its lock");
    }
    let stock = match timed(in_store, store.load(&id)).await {
        Ok(Some(stock)) => stock,
        Ok(None) => return reply(StatusCode::NOT_FOUND, "no such product"),
        Err(e) => return store_failure(e),
    };
    tokio::time::sleep(THINK).await;
    if stock <= 0 {
        return reply(StatusCode::CONFLICT, "out of stock");
    }
    // The layer is `fenced()`: the token came with the grant, so this is no round trip. A
    // request whose lock was lost meanwhile gets no token, and writes nothing.
    let fence = match &held {
        Some(Extension(lock)) => match lock.fencing_token().await {
            Ok(token) => Some((lock.name(), token)),
            Err(e) => return reply(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
        },
        None => None,
    };
    let sale = async {
        let mut tx = store.begin().await?;
        if let Some((name, token)) = fence {
            tx.advance(name, token).await?;
        }
        tx.save_stock(&id, stock - 1).await?;
        tx.record_sale(&id, 1, "purchase").await?;
        tx.commit().await
    };
    // An error drops the transaction, which rolls it back.
    match timed(in_store, sale).await {
        Ok(()) => reply(StatusCode::OK, "sold"),
        Err(e) => store_failure(e),
    }
}

/// Sells a whole cart or nothing, in one transaction: read every item's stock, think, answer
/// 409 if any is short, else save each item's new stock, fenced by that product's lock.
async fn checkout(
    State(App { store, locked }): State<App>,
    held: Option<Extension<HeldLocks>>,
    Json(cart): Json<Cart>,
) -> Reply {
    if locked && held.is_none() {
        return reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "served without its locks",
        );
    }
    // Per product, in name order: rows (and fence rows) are then always written in one order,
    // so two unlocked carts cannot deadlock each other inside PostgreSQL.
    let mut wanted: BTreeMap<String, i64> = BTreeMap::new();
    if cart.items.is_empty() || cart.items.len() > MAX_CART_ITEMS {
        return reply(StatusCode::BAD_REQUEST, "a cart has 1 to 16 items");
    }
    for item in &cart.items {
        if !(1..=MAX_ITEM_QTY).contains(&item.qty) {
            return reply(StatusCode::BAD_REQUEST, "qty must be 1 to 100");
        }
        *wanted.entry(item.sku.clone()).or_default() += item.qty;
    }
    let mut tokens = BTreeMap::new();
    if let Some(Extension(locks)) = &held {
        for sku in wanted.keys() {
            // The layer locked exactly the cart's products; one it did not lock must not be
            // sold unfenced.
            let name = lock_name(sku);
            let token = name.as_deref().and_then(|n| locks.fencing_token(n));
            let (Some(name), Some(token)) = (name, token) else {
                return reply(
                    StatusCode::BAD_REQUEST,
                    "a product of the cart is not locked",
                );
            };
            tokens.insert(name, token);
        }
    }

    let sale = async {
        let mut tx = store.begin().await?;
        // Fence first (each product's token, in name order), then read: a holder whose lock
        // was taken over is refused before it has read anything.
        for (name, token) in &tokens {
            tx.advance(name, *token).await?;
        }
        // (sku, units wanted, units in stock)
        let mut lines = Vec::with_capacity(wanted.len());
        for (sku, qty) in &wanted {
            match tx.stock(sku).await? {
                Some(stock) => lines.push((sku, *qty, stock)),
                None => return Ok(reply(StatusCode::NOT_FOUND, "no such product")),
            }
        }
        tokio::time::sleep(THINK).await;
        if lines.iter().any(|(_, qty, stock)| stock < qty) {
            tx.rollback().await?;
            return Ok(reply(StatusCode::CONFLICT, "out of stock"));
        }
        for (sku, qty, stock) in lines {
            tx.save_stock(sku, stock - qty).await?;
            tx.record_sale(sku, qty, "cart").await?;
        }
        tx.commit().await?;
        Ok(reply(StatusCode::OK, "sold"))
    };
    // An error drops the transaction, which rolls it back.
    sale.await.unwrap_or_else(store_failure)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_products_lock_name_is_escaped_like_the_layers_escape_it() {
        assert_eq!(lock_name("3").as_deref(), Some("stock:3"));
        assert_eq!(lock_name("a:b").as_deref(), Some("stock:a%3Ab"));
        assert_eq!(lock_name(""), None);
        assert_eq!(lock_name(&"x".repeat(129)), None);
    }
}
