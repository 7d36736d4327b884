//! The order of lock and transaction, on a real PostgreSQL and real locks: two purchases of the
//! last unit of stock, made deterministic with channels.
//!
//! - The transaction commits inside the locked body: exactly one sale.
//! - The lock is released before COMMIT: the second purchaser reads the old, still committed
//!   stock while the first one's decrement is not yet committed, and sells too: oversold.
//! - Released before COMMIT, but with `advance` first in each transaction: the second purchaser
//!   waits at `advance` until the first commits, then sees the stock is gone.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_fence::postgres::{advance, migrate};
use lock_runtime::{LockClient, LockGuard};
use lock_tests::{PostgresServer, RedisServer};
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgConnection, PgPool};
use tokio::sync::oneshot;

use common::{LIMIT, until_lock_waiters};

struct Shop {
    _pg: PostgresServer,
    _redis: RedisServer,
    pool: PgPool,
    locks: LockClient,
}

/// One unit of product 42 in stock, no sales yet.
async fn shop() -> Shop {
    let pg = PostgresServer::start();
    let redis = RedisServer::start();
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(LIMIT)
        .connect(&pg.url())
        .await
        .unwrap();
    migrate(&pool).await.unwrap();
    for sql in [
        "CREATE TABLE stock (sku TEXT PRIMARY KEY, qty INT NOT NULL)",
        "CREATE TABLE sales (sku TEXT NOT NULL, buyer TEXT NOT NULL)",
        "INSERT INTO stock VALUES ('42', 1)",
    ] {
        sqlx::query(sql).execute(&pool).await.unwrap();
    }
    let locks = lock_tests::client(&redis).await;
    Shop {
        _pg: pg,
        _redis: redis,
        pool,
        locks,
    }
}

/// Takes the lock of product 42; a purchase's first step.
async fn lock_stock(locks: &LockClient) -> LockGuard {
    locks.lock("stock:42").try_acquire(LIMIT).await.unwrap()
}

/// Reads the stock (inside the caller's transaction); the first half of a purchase.
async fn read_qty(tx: &mut PgConnection) -> i32 {
    sqlx::query_scalar("SELECT qty FROM stock WHERE sku = '42'")
        .fetch_one(tx)
        .await
        .unwrap()
}

/// Writes the decision made from `qty`: the stock left and a sale; the second half.
async fn sell(tx: &mut PgConnection, qty: i32, buyer: &str) {
    sqlx::query("UPDATE stock SET qty = $1 WHERE sku = '42'")
        .bind(qty - 1)
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("INSERT INTO sales VALUES ('42', $1)")
        .bind(buyer)
        .execute(&mut *tx)
        .await
        .unwrap();
}

async fn outcome(pool: &PgPool) -> (i32, i64) {
    let qty = sqlx::query_scalar("SELECT qty FROM stock WHERE sku = '42'")
        .fetch_one(pool)
        .await
        .unwrap();
    let sales = sqlx::query_scalar("SELECT count(*) FROM sales")
        .fetch_one(pool)
        .await
        .unwrap();
    (qty, sales)
}

/// Lock → begin → read → write → COMMIT → release, for both purchasers, the second one asking
/// for the lock while the first is inside its body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_inside_the_locked_body_sells_the_last_unit_once() {
    let shop = shop().await;
    let first_in_body = Arc::new(tokio::sync::Notify::new());
    let first_committed = Arc::new(AtomicBool::new(false));

    let first = tokio::spawn({
        let (pool, locks) = (shop.pool.clone(), shop.locks.clone());
        let (in_body, committed) = (first_in_body.clone(), first_committed.clone());
        async move {
            let guard = lock_stock(&locks).await;
            let mut tx = pool.begin().await.unwrap();
            let qty = read_qty(&mut tx).await;
            in_body.notify_one();
            // Give the second purchaser time to queue up for the lock.
            tokio::time::sleep(Duration::from_millis(100)).await;
            if qty > 0 {
                sell(&mut tx, qty, "first").await;
            }
            tx.commit().await.unwrap();
            committed.store(true, Ordering::SeqCst);
            guard.release().await.unwrap();
        }
    });
    first_in_body.notified().await;
    let guard = lock_stock(&shop.locks).await;
    assert!(
        first_committed.load(Ordering::SeqCst),
        "the lock was granted before the first purchase committed"
    );
    let mut tx = shop.pool.begin().await.unwrap();
    let qty = read_qty(&mut tx).await;
    if qty > 0 {
        sell(&mut tx, qty, "second").await;
    }
    tx.commit().await.unwrap();
    guard.release().await.unwrap();
    first.await.unwrap();

    assert_eq!(outcome(&shop.pool).await, (0, 1), "one sale, stock 0");
}

/// Lock → begin → read → write → release → (the second purchaser locks, reads) → COMMIT:
/// the lock did not cover the commit, and the unit is sold twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_after_release_oversells() {
    let shop = shop().await;
    let (released_tx, released) = oneshot::channel();
    let (second_read_tx, second_read) = oneshot::channel::<()>();
    let (first_committed_tx, first_committed) = oneshot::channel();

    let first = tokio::spawn({
        let (pool, locks) = (shop.pool.clone(), shop.locks.clone());
        async move {
            let guard = lock_stock(&locks).await;
            let mut tx = pool.begin().await.unwrap();
            let qty = read_qty(&mut tx).await;
            assert_eq!(qty, 1);
            sell(&mut tx, qty, "first").await;
            // The mistake: the lock goes before the transaction commits (a `#[transactional]`
            // method wrapped around the locked one, a guard dropped at the end of a block
            // inside the transaction's scope, …).
            guard.release().await.unwrap();
            released_tx.send(()).unwrap();
            second_read.await.unwrap();
            tx.commit().await.unwrap();
            first_committed_tx.send(()).unwrap();
        }
    });
    released.await.unwrap();
    let guard = lock_stock(&shop.locks).await;
    let mut tx = shop.pool.begin().await.unwrap();
    let qty = read_qty(&mut tx).await;
    assert_eq!(
        qty, 1,
        "the first purchase is not committed yet: the old stock is read"
    );
    second_read_tx.send(()).unwrap();
    first_committed.await.unwrap();
    sell(&mut tx, qty, "second").await;
    tx.commit().await.unwrap();
    guard.release().await.unwrap();
    first.await.unwrap();

    let (qty, sales) = outcome(&shop.pool).await;
    assert_eq!(sales, 2, "oversold: two sales of one unit");
    assert_eq!(qty, 0, "and the stock does not show it");
}

/// The same wrong order, but each transaction starts with `advance`: the second purchaser
/// waits at `advance` for the first transaction's end, then reads the committed stock of 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advance_first_orders_even_a_commit_after_release() {
    let shop = shop().await;
    let (released_tx, released) = oneshot::channel();
    let (second_waits_tx, second_waits) = oneshot::channel::<()>();

    let first = tokio::spawn({
        let (pool, locks) = (shop.pool.clone(), shop.locks.clone());
        async move {
            let guard = lock_stock(&locks).await;
            let mut tx = pool.begin().await.unwrap();
            advance(&mut tx, "stock:42", guard.fencing_token().await.unwrap())
                .await
                .unwrap();
            let qty = read_qty(&mut tx).await;
            sell(&mut tx, qty, "first").await;
            guard.release().await.unwrap();
            released_tx.send(()).unwrap();
            second_waits.await.unwrap();
            tx.commit().await.unwrap();
        }
    });
    released.await.unwrap();
    let guard = lock_stock(&shop.locks).await;
    let second = tokio::spawn({
        let pool = shop.pool.clone();
        let token = guard.fencing_token().await.unwrap();
        async move {
            let mut tx = pool.begin().await.unwrap();
            advance(&mut tx, "stock:42", token).await.unwrap();
            let qty = read_qty(&mut tx).await;
            if qty > 0 {
                sell(&mut tx, qty, "second").await;
            }
            tx.commit().await.unwrap();
            qty
        }
    });
    // Let the first purchaser commit only once the second one waits at `advance`.
    until_lock_waiters(&shop.pool, 1).await;
    second_waits_tx.send(()).unwrap();
    first.await.unwrap();
    assert_eq!(
        second.await.unwrap(),
        0,
        "the second purchaser saw the committed sale"
    );
    guard.release().await.unwrap();

    assert_eq!(outcome(&shop.pool).await, (0, 1), "one sale, stock 0");
}
