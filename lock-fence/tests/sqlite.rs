//! `lock_fence::sqlite` against a real SQLite database file (WAL, busy timeout), with real
//! locks from `lock-runtime` on a real `redis-server` where a lock is lost.

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lock_fence::sqlite::{add_token_column, advance, check_update, migrate, newest};
use lock_fence::{FenceError, FencedUpdate, TokenColumn, sql_token};
use lock_tests::RedisServer;
use sqlx::pool::PoolConnection;
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

// Requests dropped half-way (`LockGuard::run` on a lost lock, a timeout, a client gone).

/// A pool of `connections` on the database in `dir`, waiting `busy` for the write lock.
async fn pool_with(dir: &std::path::Path, connections: u32, busy: Duration) -> SqlitePool {
    let options = SqliteConnectOptions::new()
        .filename(dir.join("shop.db"))
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(busy);
    SqlitePoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(LIMIT)
        .connect_with(options)
        .await
        .unwrap()
}

/// Asserts that a connection of `other` gets the write lock at once (its busy timeout is 0):
/// no transaction is left open on the database.
async fn assert_write_lock_free(other: &SqlitePool, cut: &str) {
    let mut conn = other.acquire().await.unwrap();
    match conn.begin_with("BEGIN IMMEDIATE").await {
        Ok(tx) => tx.rollback().await.unwrap(),
        Err(e) => panic!("{cut}: the write lock is still held ({e})"),
    }
}

/// Waits until every connection of `pool` is back in it, and holds them: whatever a dropped
/// request left running on them (a begin in its own task, a rollback, the pool's check on
/// release) has finished, and nothing else uses them while the caller looks.
async fn all_connections(pool: &SqlitePool, connections: u32) -> Vec<PoolConnection<Sqlite>> {
    let mut held = Vec::new();
    for _ in 0..connections {
        held.push(pool.acquire().await.unwrap());
    }
    held
}

/// The workload's read-modify-write of `name`'s counter, fenced with `token`: begin, advance,
/// read, write, commit.
async fn fenced_section(pool: &SqlitePool, name: &str, token: u64) -> Result<(), FenceError> {
    let mut tx = lock_fence::sqlite::begin(pool).await?;
    advance(&mut tx, name, token).await?;
    let value: Option<i64> = sqlx::query_scalar("SELECT value FROM counters WHERE name = ?1")
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO counters (name, value) VALUES (?1, ?2) \
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
    )
    .bind(name)
    .bind(value.unwrap_or(0) + 1)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

async fn create_counters(pool: &SqlitePool) {
    sqlx::query("CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)")
        .execute(pool)
        .await
        .unwrap();
}

/// sqlx's `begin_with("BEGIN IMMEDIATE")` dropped after SQLite began the transaction but
/// before it checked it (sqlx issue 3932) left the connection in a transaction no one ends,
/// holding the write lock. `lock_fence::sqlite::begin` dropped at any await point leaves none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn begin_dropped_at_any_await_point_leaves_the_write_lock_free() {
    let db = database().await;
    // One connection: acquiring it waits for whatever the dropped begin left on it.
    let cut = pool_with(&db.dir, 1, LIMIT).await;
    let other = pool_with(&db.dir, 1, Duration::ZERO).await;
    common::begin_cut_at_every_await_point(
        || lock_fence::sqlite::begin(&cut),
        async |dropped: String| {
            let _held = all_connections(&cut, 1).await;
            assert_write_lock_free(&other, &dropped).await;
        },
    )
    .await;
}

/// Whole fenced sections (begin, advance, read, write, commit) from several tasks sharing one
/// pool, all dropped at their n-th await point, for n = 0, 1, 2, … until every one completes:
/// afterwards no transaction holds the write lock, and the counter counts the sections that
/// committed (and maybe some dropped in their commit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_sections_dropped_at_any_await_point_leave_the_write_lock_free() {
    const TASKS: u32 = 3;
    let db = database().await;
    create_counters(&db.pool).await;
    let shared = pool_with(&db.dir, TASKS, LIMIT).await;
    let other = pool_with(&db.dir, 1, Duration::ZERO).await;
    // Sections that said they committed, and sections dropped (maybe in their commit).
    let (committed, dropped) = common::sections_cut_at_every_await_point(
        TASKS,
        |token| {
            let pool = shared.clone();
            async move { fenced_section(&pool, "stock:42", token).await }
        },
        async |cut: String| {
            let _held = all_connections(&shared, TASKS).await;
            assert_write_lock_free(&other, &cut).await;
        },
    )
    .await;
    let value: i64 = sqlx::query_scalar("SELECT value FROM counters WHERE name = 'stock:42'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    // A section dropped in its commit may have committed without hearing it.
    assert!(
        (committed..=committed + dropped).contains(&value),
        "counter {value}: {committed} sections committed, {dropped} dropped"
    );
}

/// A section dropped while its `BEGIN IMMEDIATE` waits in SQLite's busy handler (another
/// connection holds the write lock), and one dropped between its last statement and its
/// commit: neither leaves the write lock held once the other transaction ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sections_dropped_while_waiting_for_the_write_lock_or_before_the_commit_leave_it_free() {
    let db = database().await;
    create_counters(&db.pool).await;
    let cut = pool_with(&db.dir, 1, LIMIT).await;
    let other = pool_with(&db.dir, 1, Duration::ZERO).await;
    for round in 0..20u64 {
        let mut holder = db.pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
        advance(&mut holder, "stock:42", round * 10).await.unwrap();
        let mut section = Box::pin(fenced_section(&cut, "stock:42", round * 10 + 1));
        // One poll starts the begin, which waits for the write lock; drop it while it waits
        // (a few rounds, so that the begin has reached the busy handler in most).
        let waited = tokio::time::timeout(Duration::from_millis(round * 5), section.as_mut());
        assert!(
            waited.await.is_err(),
            "round {round}: begun while the lock was held"
        );
        drop(section);
        holder.commit().await.unwrap();
        let held = all_connections(&cut, 1).await;
        assert_write_lock_free(
            &other,
            &format!("round {round}: dropped in the busy handler"),
        )
        .await;
        drop(held);
    }
    // Between the last statement and the commit.
    let mut tx = lock_fence::sqlite::begin(&cut).await.unwrap();
    advance(&mut tx, "stock:42", 1_000).await.unwrap();
    sqlx::query("INSERT INTO counters (name, value) VALUES ('stock:42', 1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    drop(tx);
    let held = all_connections(&cut, 1).await;
    assert_write_lock_free(&other, "dropped before the commit").await;
    drop(held);
}
