//! `lock_fence::sqlite` against a real SQLite database file (WAL, busy timeout), with real
//! locks from `lock-runtime` on a real `redis-server` where a lock is lost.

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lock_fence::sqlite::{add_token_column, advance, check_update, migrate, newest};
use lock_fence::{FenceError, FencedUpdate, TokenColumn, sql_token};
use lock_tests::RedisServer;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{Connection, Sqlite, SqlitePool, Transaction};
use tokio::task::JoinHandle;

use common::{LIMIT, assert_invalid_identifiers, assert_stale, assert_stale_named};

/// A database file in a temp dir of its own, removed on drop.
struct Database {
    dir: PathBuf,
    pool: SqlitePool,
}

impl Drop for Database {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn database() -> Database {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "lock-fence-sqlite-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let pool = pool(&dir).await;
    migrate(&pool).await.unwrap();
    Database { dir, pool }
}

/// A pool on the database file in `dir`, as another process would open it.
async fn pool(dir: &std::path::Path) -> SqlitePool {
    let options = SqliteConnectOptions::new()
        .filename(dir.join("shop.db"))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(LIMIT);
    SqlitePoolOptions::new()
        .max_connections(4)
        .acquire_timeout(LIMIT)
        .connect_with(options)
        .await
        .unwrap()
}

async fn create_log(pool: &SqlitePool) {
    sqlx::query("CREATE TABLE writes (seq INTEGER PRIMARY KEY, token INTEGER NOT NULL)")
        .execute(pool)
        .await
        .unwrap();
}

async fn logged(pool: &SqlitePool) -> Vec<i64> {
    sqlx::query_scalar("SELECT token FROM writes ORDER BY seq")
        .fetch_all(pool)
        .await
        .unwrap()
}

/// One committed `BEGIN IMMEDIATE` transaction that advances `name` and logs the write.
async fn fenced_write(pool: &SqlitePool, name: &str, token: u64) -> Result<(), FenceError> {
    let mut conn = pool.acquire().await?;
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    advance(&mut tx, name, token).await?;
    log_and_commit(tx, token).await
}

/// Logs the write of `token` in `tx` and commits.
async fn log_and_commit(mut tx: Transaction<'_, Sqlite>, token: u64) -> Result<(), FenceError> {
    sqlx::query("INSERT INTO writes (token) VALUES (?1)")
        .bind(sql_token(token)?)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// A `BEGIN IMMEDIATE` transaction that has advanced "stock:42" to `first`, and a fenced
/// write of `second` spawned from another "process" (pool), which cannot get the write lock
/// meanwhile.
async fn write_queued_behind(
    db: &Database,
    first: u64,
    second: u64,
) -> (
    Transaction<'static, Sqlite>,
    JoinHandle<Result<(), FenceError>>,
) {
    let other_process = pool(&db.dir).await;
    let mut tx = db.pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
    advance(&mut tx, "stock:42", first).await.unwrap();
    let queued =
        tokio::spawn(async move { fenced_write(&other_process, "stock:42", second).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    (tx, queued)
}

async fn newest_of(pool: &SqlitePool, name: &str) -> Option<u64> {
    newest(&mut pool.acquire().await.unwrap(), name)
        .await
        .unwrap()
}

#[tokio::test]
async fn stale_token_is_refused_and_newest_or_equal_goes_through() {
    let db = database().await;
    create_log(&db.pool).await;

    fenced_write(&db.pool, "stock:42", 5).await.unwrap();
    fenced_write(&db.pool, "stock:42", 5).await.unwrap();
    assert_stale(fenced_write(&db.pool, "stock:42", 4).await, 4, 5);
    fenced_write(&db.pool, "stock:42", 6).await.unwrap();
    fenced_write(&db.pool, "stock:7", 1).await.unwrap();

    assert_eq!(logged(&db.pool).await, [5, 5, 6, 1]);
    assert_eq!(newest_of(&db.pool, "stock:42").await, Some(6));
    assert_eq!(newest_of(&db.pool, "stock:1").await, None);
}

/// Two "processes" (pools) on one file: the newer transaction holds the write lock and
/// commits first; the older one, queued behind it, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_transaction_committing_first_makes_the_older_one_stale() {
    let db = database().await;
    create_log(&db.pool).await;

    let (newer, older) = write_queued_behind(&db, 3, 2).await;
    // The older one cannot get the write lock while the newer one holds it.
    assert!(!older.is_finished());
    log_and_commit(newer, 3).await.unwrap();

    assert_stale(older.await.unwrap(), 2, 3);
    assert_eq!(logged(&db.pool).await, [3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_transaction_committing_first_lets_both_through_in_order() {
    let db = database().await;
    create_log(&db.pool).await;

    let (older, newer) = write_queued_behind(&db, 2, 3).await;
    log_and_commit(older, 2).await.unwrap();

    newer.await.unwrap().unwrap();
    assert_eq!(logged(&db.pool).await, [2, 3]);
    assert_eq!(newest_of(&db.pool, "stock:42").await, Some(3));
}

/// Holder A's lock is force-unlocked in the middle of its request; B takes the lock and
/// writes; A's late write is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_after_a_force_unlock_is_refused() {
    let db = database().await;
    create_log(&db.pool).await;
    let redis = RedisServer::start();
    let locks = lock_tests::client(&redis).await;
    let lock = locks.lock("stock:42");

    let a = lock.try_acquire(LIMIT).await.unwrap();
    let a_token = a.fencing_token().await.unwrap();
    // An operator (or a failover) takes the lock away while A works.
    assert!(lock.force_unlock().await.unwrap());
    let b = locks.lock("stock:42").try_acquire(LIMIT).await.unwrap();
    let b_token = b.fencing_token().await.unwrap();
    assert!(b_token > a_token);
    fenced_write(&db.pool, "stock:42", b_token).await.unwrap();

    assert_stale(
        fenced_write(&db.pool, "stock:42", a_token).await,
        a_token,
        b_token,
    );
    b.release().await.unwrap();
    drop(a);
    assert_eq!(logged(&db.pool).await, [b_token as i64]);
}

#[tokio::test]
async fn tokens_beyond_bigint_are_refused() {
    let db = database().await;
    let mut conn = db.pool.acquire().await.unwrap();
    assert!(matches!(
        advance(&mut conn, "stock:42", u64::MAX).await,
        Err(FenceError::TokenOutOfRange { token: u64::MAX })
    ));
    assert_eq!(newest(&mut conn, "stock:42").await.unwrap(), None);
    advance(&mut conn, "stock:42", i64::MAX as u64)
        .await
        .unwrap();
    assert_eq!(
        newest(&mut conn, "stock:42").await.unwrap(),
        Some(i64::MAX as u64)
    );
}

async fn fenced_update(
    pool: &SqlitePool,
    column: &TokenColumn,
    sku: &str,
    qty: i64,
    token: u64,
) -> Result<FencedUpdate, FenceError> {
    let mut conn = pool.acquire().await?;
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    let done = sqlx::query(
        "UPDATE stock SET qty = ?1, lock_token = ?2 WHERE sku = ?3 AND lock_token <= ?2",
    )
    .bind(qty)
    .bind(sql_token(token)?)
    .bind(sku)
    .execute(&mut *tx)
    .await?;
    let outcome = check_update(&mut tx, column, sku, token, done.rows_affected()).await?;
    tx.commit().await?;
    Ok(outcome)
}

async fn qty_and_token(pool: &SqlitePool) -> (i64, i64) {
    sqlx::query_as("SELECT qty, lock_token FROM stock WHERE sku = '42'")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_column_refuses_stale_updates_and_tells_missing_rows_apart() {
    let db = database().await;
    sqlx::query("CREATE TABLE stock (sku TEXT PRIMARY KEY, qty INTEGER NOT NULL)")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO stock VALUES ('42', 10)")
        .execute(&db.pool)
        .await
        .unwrap();
    // Schema-qualified, idempotent, and safe from two "processes" at once.
    let column = TokenColumn::new("main.stock", "sku", "lock_token").unwrap();
    let other_process = pool(&db.dir).await;
    let (a, b) = tokio::join!(
        add_token_column(&db.pool, &column),
        add_token_column(&other_process, &column)
    );
    a.unwrap();
    b.unwrap();
    add_token_column(&db.pool, &column).await.unwrap();
    assert_eq!(qty_and_token(&db.pool).await, (10, 0));

    assert_eq!(
        fenced_update(&db.pool, &column, "42", 9, 5).await.unwrap(),
        FencedUpdate::Applied
    );
    assert_eq!(
        fenced_update(&db.pool, &column, "42", 8, 5).await.unwrap(),
        FencedUpdate::Applied
    );
    assert_stale_named(
        fenced_update(&db.pool, &column, "42", 1, 4).await,
        "main.stock[42]",
        4,
        5,
    );
    assert_eq!(
        fenced_update(&db.pool, &column, "nope", 1, 9)
            .await
            .unwrap(),
        FencedUpdate::NotMatched
    );
    assert!(matches!(
        fenced_update(&db.pool, &column, "42", 1, u64::MAX).await,
        Err(FenceError::TokenOutOfRange { .. })
    ));
    assert_eq!(qty_and_token(&db.pool).await, (8, 5));
}

#[tokio::test]
async fn hostile_identifiers_are_rejected_before_any_sql_runs() {
    let db = database().await;
    sqlx::query("CREATE TABLE x (sku TEXT PRIMARY KEY)")
        .execute(&db.pool)
        .await
        .unwrap();
    let long = "a".repeat(64);
    assert_invalid_identifiers(&[
        ("stock; DROP TABLE x", "sku", "lock_token"),
        ("x", "sku", "lock_token INT; DROP TABLE x; --"),
        ("x\"; DROP TABLE x; --", "sku", "lock_token"),
        ("x", "sku` OR 1", "lock_token"),
        ("x", "sku", ""),
        ("x", "sku", long.as_str()),
    ]);
    let still_there: i64 = sqlx::query_scalar("SELECT count(*) FROM x")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(still_there, 0);
}
