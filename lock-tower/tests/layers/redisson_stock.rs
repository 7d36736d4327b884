//! A Java service with Redisson and a Rust service with `LockLayer` sell the same stock, as
//! they would while an inventory system moves from Java to Rust one service at a time.
//!
//! The Rust service is an axum app served over HTTP whose purchase route takes
//! `LockLayer::new(locks, "stock:<id>")` on a client with `Layout::Redisson`: the one line that
//! differs from a Rust-only deployment. The Java services are two JVMs (the newest Redisson
//! 3.x and 4.x) whose threads take `redisson.getLock("stock:<id>")`. Both sides load the
//! stock, think, and save it minus one (a lost update without the lock), and demand exceeds
//! the stock: every unit must be sold exactly once, whoever sells it.

#![cfg(feature = "axum")]

use crate::common;

use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::post;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Empty;
use lock_runtime::Layout;
use lock_tests::redisson::REDISSON_VERSIONS;
use lock_tests::{RedisServer, Redisson};
use lock_tower::LockLayer;
use redis::AsyncCommands;

const PRODUCTS: u32 = 3;
const STOCK: u32 = 40;
/// Purchases each Java worker (one per product per JVM) tries.
const JAVA_TRIES: u32 = 15;
/// Purchases the Rust side tries per product (over several connections).
const RUST_TRIES: u32 = 30;
const RUST_CONNECTIONS: u32 = 3;

fn stock_key(id: u32) -> String {
    format!("stock_level:{id}")
}

fn sold_key(side: &str, id: u32) -> String {
    format!("sold:{side}:{id}")
}

/// The Rust service's handler, run under the lock of `stock:<id>`: load, think, save.
async fn purchase(
    State(mut store): State<redis::aio::MultiplexedConnection>,
    Path(id): Path<u32>,
) -> StatusCode {
    let left: Option<u32> = store.get(stock_key(id)).await.expect("load stock");
    let left = left.unwrap_or(0);
    if left == 0 {
        return StatusCode::CONFLICT;
    }
    tokio::time::sleep(Duration::from_micros(u64::from(id) * 300 + 200)).await;
    let () = store
        .set(stock_key(id), left - 1)
        .await
        .expect("save stock");
    let sold: Option<u32> = store.get(sold_key("rust", id)).await.expect("load sales");
    let () = store
        .set(sold_key("rust", id), sold.unwrap_or(0) + 1)
        .await
        .expect("save sales");
    let _: u64 = store
        .rpush(format!("ledger:{}", stock_key(id)), "rust")
        .await
        .expect("ledger");
    StatusCode::OK
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_rust_services_sell_the_same_stock_without_overselling() {
    common::bounded(Duration::from_secs(120), async {
        let redis = RedisServer::start();
        for id in 0..PRODUCTS {
            redis.cmd(&["SET", &stock_key(id), &STOCK.to_string()]);
        }
        let javas: Vec<Redisson> = REDISSON_VERSIONS
            .iter()
            .map(|v| Redisson::start(v, &redis.url(), Duration::from_secs(30)))
            .collect();

        // The Rust service, as a user writes it: the layout is the one Redisson-specific line.
        let locks = lock_runtime::LockClient::builder(&redis.url())
            .layout(Layout::Redisson)
            .build()
            .await
            .expect("lock client");
        let store = redis::Client::open(redis.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let app = Router::new()
            .route("/stock/{id}/purchase", post(purchase))
            .route_layer(LockLayer::new(locks, "stock:<id>").wait(Duration::from_secs(30)))
            .with_state(store);
        let addr = common::serve(app).await;

        // Everyone starts at once: one Java worker per product in each JVM, and the Rust
        // clients over HTTP.
        let mut java_sales = Vec::new();
        for (n, java) in javas.iter().enumerate() {
            for id in 0..PRODUCTS {
                let command = format!(
                    "sell j{n}p{id} stock:{id} {} {} {JAVA_TRIES}",
                    stock_key(id),
                    sold_key("java", id)
                );
                java_sales.push((id, java.send(&command)));
            }
        }
        let mut rust_clients = Vec::new();
        for id in 0..PRODUCTS {
            for _ in 0..RUST_CONNECTIONS {
                rust_clients.push(tokio::spawn(async move {
                    let mut conn = common::connect::<Empty<Bytes>>(addr).await;
                    let mut answers = Vec::new();
                    for _ in 0..RUST_TRIES / RUST_CONNECTIONS {
                        let request = Request::post(format!("/stock/{id}/purchase"))
                            .header("host", "shop")
                            .body(Empty::new())
                            .unwrap();
                        conn.ready().await.unwrap();
                        answers.push(conn.send_request(request).await.unwrap().status());
                    }
                    (id, answers)
                }));
            }
        }

        let mut java_units = [0u32; PRODUCTS as usize];
        for (id, ticket) in java_sales {
            let reply = ticket.reply().await;
            let units: u32 = reply
                .strip_prefix("ok ")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("Java sell: {reply}"));
            java_units[id as usize] += units;
        }
        let mut rust_units = [0u32; PRODUCTS as usize];
        for client in rust_clients {
            let (id, answers) = client.await.unwrap();
            for status in answers {
                assert!(
                    status == StatusCode::OK || status == StatusCode::CONFLICT,
                    "product {id}: the Rust service answered {status}"
                );
                rust_units[id as usize] += u32::from(status == StatusCode::OK);
            }
        }

        let read = |key: String| -> u32 {
            redis
                .cmd(&["GET", &key])
                .text()
                .map_or(0, |v| v.parse().unwrap())
        };
        for id in 0..PRODUCTS {
            let (java, rust) = (java_units[id as usize], rust_units[id as usize]);
            let ledger = redis.cmd(&["LRANGE", &format!("ledger:{}", stock_key(id)), "0", "-1"]);
            let ledger: Vec<&str> = ledger.items().iter().filter_map(|s| s.text()).collect();
            let turns = 1 + ledger.windows(2).filter(|w| w[0] != w[1]).count();
            eprintln!(
                "product {id}: Java sold {java}, Rust sold {rust} of {STOCK}, in {turns} turns: {}",
                ledger.iter().map(|s| &s[..1]).collect::<String>()
            );
            assert_eq!(ledger.len() as u32, STOCK, "product {id}: ledger");
            // Demand (2 × 15 from Java, 30 from Rust) exceeds the stock: it sells out.
            assert_eq!(read(stock_key(id)), 0, "product {id}: stock left");
            assert_eq!(java + rust, STOCK, "product {id}: units sold");
            // Every sale recorded once: the sides' own counts match what they reported.
            assert_eq!(
                read(sold_key("java", id)),
                java,
                "product {id}: Java's sales"
            );
            assert_eq!(
                read(sold_key("rust", id)),
                rust,
                "product {id}: Rust's sales"
            );
            // Neither side could sell it all (each asked for 30 of 40).
            assert!(java >= STOCK - RUST_TRIES && rust >= STOCK - 2 * JAVA_TRIES);
        }
        for java in &javas {
            assert_eq!(java.call("ping").await, "pong");
        }
    })
    .await;
}
