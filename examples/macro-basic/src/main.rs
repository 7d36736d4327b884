//! `#[distributed_lock]` on free functions and on a service struct.
//!
//! Run with `cargo run -p example-macro-basic` (starts its own redis-server on a free loopback
//! port unless `REDIS_URL` is set).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{LockClient, LockError, distributed_lock};

/// The application's error type: lock errors arrive here through `From<LockError>`.
#[derive(Debug)]
enum AppError {
    Lock(LockError),
    OutOfStock { sku: String, left: u32 },
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppError::Lock(e) => write!(f, "lock: {e}"),
            AppError::OutOfStock { sku, left } => write!(f, "{sku}: only {left} left"),
        }
    }
}

impl std::error::Error for AppError {}

/// Stock levels, standing in for a database row that several instances update.
#[derive(Debug, Default)]
struct Stock(Mutex<HashMap<String, u32>>);

impl Stock {
    fn get(&self, sku: &str) -> u32 {
        self.0.lock().unwrap().get(sku).copied().unwrap_or(0)
    }

    fn set(&self, sku: &str, qty: u32) {
        self.0.lock().unwrap().insert(sku.to_owned(), qty);
    }
}

/// Read, think, write: without the lock, concurrent calls would lose updates.
/// Uses the default client installed in `main`.
#[distributed_lock(name = "stock:<sku>", wait = "5s")]
async fn reserve(stock: &Stock, sku: &str, qty: u32) -> Result<u32, AppError> {
    let left = stock.get(sku);
    tokio::time::sleep(Duration::from_millis(10)).await; // a slow database round trip
    if left < qty {
        return Err(AppError::OutOfStock {
            sku: sku.to_owned(),
            left,
        });
    }
    stock.set(sku, left - qty);
    Ok(left - qty)
}

/// One run at a time, cluster-wide; a second caller gives up at once.
#[distributed_lock(name = "nightly-report", wait = "0s")]
async fn nightly_report(run: u32) -> Result<u32, AppError> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(run)
}

/// A service that carries its own lock client.
#[derive(Debug)]
struct Inventory {
    locks: LockClient,
    warehouse: String,
    stock: Stock,
}

impl Inventory {
    /// Locked per warehouse and product, with a fixed 10 s lease instead of watchdog renewal.
    #[distributed_lock(name = "shelf:<self.warehouse>:<sku>", client = self.locks, lease = "10s")]
    async fn restock(&self, sku: &str, qty: u32) -> Result<u32, AppError> {
        let now = self.stock.get(sku) + qty;
        self.stock.set(sku, now);
        Ok(now)
    }

    /// Takes the same lock as `restock` and calls it: the inner call re-enters.
    #[distributed_lock(name = "shelf:<self.warehouse>:<sku>", client = self.locks, wait = "1s")]
    async fn top_up(&self, sku: &str, target: u32) -> Result<u32, AppError> {
        let have = self.stock.get(sku);
        if have >= target {
            return Ok(have);
        }
        self.restock(sku, target - have).await
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (server, url) = lock_tests::local_redis();
    if server.is_some() {
        println!("started redis-server on {url}");
    }
    let locks = LockClient::connect(&url).await?;
    locks.install_default();

    // 1. Ten concurrent reservations of 3 units each from 100: exactly 70 must be left.
    let stock = Arc::new(Stock::default());
    stock.set("sku-42", 100);
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let stock = stock.clone();
            tokio::spawn(async move { reserve(&stock, "sku-42", 3).await })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    println!(
        "reserve: 10 × 3 units from 100 → {} left",
        stock.get("sku-42")
    );
    assert_eq!(stock.get("sku-42"), 70);
    match reserve(&stock, "sku-42", 500).await {
        Err(e @ AppError::OutOfStock { .. }) => println!("reserve: {e}"),
        other => println!("reserve: unexpected {other:?}"),
    }

    // 2. Two runs of the report at once: one runs, the other finds the lock busy.
    let (a, b) = tokio::join!(nightly_report(1), nightly_report(2));
    for outcome in [a, b] {
        match outcome {
            Ok(run) => println!("report: run {run} done"),
            Err(AppError::Lock(e)) if e.is_busy() => println!("report: busy ({e})"),
            Err(e) => return Err(e.into()),
        }
    }

    // 3. A service struct with `client = self.locks`, and a re-entrant call.
    let inventory = Inventory {
        locks: locks.clone(),
        warehouse: "berlin".into(),
        stock: Stock::default(),
    };
    println!(
        "restock: {} on the shelf",
        inventory.restock("sku-7", 5).await?
    );
    println!(
        "top_up: {} on the shelf (re-entered the shelf lock)",
        inventory.top_up("sku-7", 20).await?
    );
    Ok(())
}
