//! `lock_fence::postgres` against a real PostgreSQL server (one per test, on a free loopback
//! port), with real locks from `lock-runtime` on a real `redis-server` where a lock is lost.

mod common;

use lock_fence::postgres::{add_token_column, advance, check_update, migrate, newest};
use lock_fence::{FenceError, FencedUpdate, TokenColumn, sql_token};
use lock_tests::{PostgresServer, RedisServer};
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Postgres, Transaction};
use tokio::task::JoinHandle;

use common::{
    LIMIT, acquire_short_lease, assert_invalid_identifiers, assert_stale, assert_stale_named,
    until_lease_ran_out, until_lock_waiters,
};

/// A fresh server with the fence table; drop the pool before the server (declare it after).
async fn database() -> (PostgresServer, PgPool) {
    let pg = PostgresServer::start();
    let pool = connect(&pg.url()).await;
    migrate(&pool).await.expect("migrate");
    (pg, pool)
}

async fn connect(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(LIMIT)
        .connect(url)
        .await
        .expect("connect to the test PostgreSQL")
}

/// One committed transaction that advances `name` to `token` and logs the write.
async fn fenced_write(pool: &PgPool, name: &str, token: u64) -> Result<(), FenceError> {
    let mut tx = pool.begin().await?;
    advance(&mut tx, name, token).await?;
    log_and_commit(tx, token).await
}

/// Logs the write of `token` in `tx` and commits.
async fn log_and_commit(mut tx: Transaction<'_, Postgres>, token: u64) -> Result<(), FenceError> {
    sqlx::query("INSERT INTO writes (token) VALUES ($1)")
        .bind(sql_token(token)?)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// A transaction that has advanced "stock:42" to `first`, and a fenced write of `second`
/// spawned and waiting behind it at `advance`.
async fn write_queued_behind(
    pool: &PgPool,
    first: u64,
    second: u64,
) -> (
    Transaction<'static, Postgres>,
    JoinHandle<Result<(), FenceError>>,
) {
    let mut tx = pool.begin().await.unwrap();
    advance(&mut tx, "stock:42", first).await.unwrap();
    let queued = tokio::spawn({
        let pool = pool.clone();
        async move { fenced_write(&pool, "stock:42", second).await }
    });
    until_lock_waiters(pool, 1).await;
    (tx, queued)
}

async fn create_log(pool: &PgPool) {
    sqlx::query("CREATE TABLE writes (seq BIGSERIAL PRIMARY KEY, token BIGINT NOT NULL)")
        .execute(pool)
        .await
        .unwrap();
}

async fn logged(pool: &PgPool) -> Vec<i64> {
    sqlx::query_scalar("SELECT token FROM writes ORDER BY seq")
        .fetch_all(pool)
        .await
        .unwrap()
}

async fn newest_of(pool: &PgPool, name: &str) -> Option<u64> {
    newest(&mut pool.acquire().await.unwrap(), name)
        .await
        .unwrap()
}

#[tokio::test]
async fn stale_token_is_refused_and_newest_or_equal_goes_through() {
    let (_pg, pool) = database().await;
    create_log(&pool).await;

    fenced_write(&pool, "stock:42", 5).await.unwrap();
    // The same holder writing twice.
    fenced_write(&pool, "stock:42", 5).await.unwrap();
    let refused = fenced_write(&pool, "stock:42", 4).await;
    assert!(refused.as_ref().unwrap_err().is_stale());
    assert_stale(refused, 4, 5);
    fenced_write(&pool, "stock:42", 6).await.unwrap();
    // Another name has its own sequence.
    fenced_write(&pool, "stock:7", 1).await.unwrap();

    // The refused transaction's write was rolled back with it.
    assert_eq!(logged(&pool).await, [5, 5, 6, 1]);
    assert_eq!(newest_of(&pool, "stock:42").await, Some(6));
    assert_eq!(newest_of(&pool, "stock:7").await, Some(1));
    assert_eq!(newest_of(&pool, "stock:1").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_transaction_committing_first_makes_the_older_one_stale() {
    let (_pg, pool) = database().await;
    create_log(&pool).await;
    fenced_write(&pool, "stock:42", 1).await.unwrap();

    // The older transaction waits at `advance` on the row lock the newer one holds.
    let (newer, older) = write_queued_behind(&pool, 3, 2).await;
    assert!(!older.is_finished());
    log_and_commit(newer, 3).await.unwrap();

    assert_stale(older.await.unwrap(), 2, 3);
    assert_eq!(logged(&pool).await, [1, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_transaction_committing_first_lets_both_through_in_order() {
    let (_pg, pool) = database().await;
    create_log(&pool).await;

    let (older, newer) = write_queued_behind(&pool, 2, 3).await;
    log_and_commit(older, 2).await.unwrap();

    newer.await.unwrap().unwrap();
    assert_eq!(logged(&pool).await, [2, 3]);
    assert_eq!(newest_of(&pool, "stock:42").await, Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_back_newer_transaction_does_not_block_the_older_one() {
    let (_pg, pool) = database().await;
    create_log(&pool).await;

    let (newer, older) = write_queued_behind(&pool, 3, 2).await;
    newer.rollback().await.unwrap();

    older.await.unwrap().unwrap();
    assert_eq!(logged(&pool).await, [2]);
    assert_eq!(newest_of(&pool, "stock:42").await, Some(2));
}

/// Holder A's explicit lease runs out in the middle of its request; B takes the lock and
/// writes; A's late write is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_after_the_lease_ran_out_is_refused() {
    let (_pg, pool) = database().await;
    create_log(&pool).await;
    let redis = RedisServer::start();
    let locks = lock_tests::client(&redis).await;
    let lock = locks.lock("stock:42");

    let a = acquire_short_lease(&lock).await;
    let a_token = a.fencing_token().await.unwrap();
    // … A stalls (a GC pause, a slow call) until its lease is gone.
    until_lease_ran_out(&a).await;

    let b = lock.try_acquire(LIMIT).await.unwrap();
    let b_token = b.fencing_token().await.unwrap();
    assert!(b_token > a_token);
    fenced_write(&pool, "stock:42", b_token).await.unwrap();

    // A wakes up and finishes its request.
    let late = fenced_write(&pool, "stock:42", a_token).await;
    assert_stale(late, a_token, b_token);
    b.release().await.unwrap();
    assert_eq!(logged(&pool).await, [b_token as i64]);
}

#[tokio::test]
async fn tokens_beyond_bigint_are_refused() {
    let (_pg, pool) = database().await;
    let mut conn = pool.acquire().await.unwrap();
    for token in [i64::MAX as u64 + 1, u64::MAX] {
        assert!(matches!(
            advance(&mut conn, "stock:42", token).await,
            Err(FenceError::TokenOutOfRange { token: t }) if t == token
        ));
    }
    assert_eq!(newest(&mut conn, "stock:42").await.unwrap(), None);
    // The largest BIGINT is fine.
    advance(&mut conn, "stock:42", i64::MAX as u64)
        .await
        .unwrap();
    assert_eq!(
        newest(&mut conn, "stock:42").await.unwrap(),
        Some(i64::MAX as u64)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_are_idempotent_and_safe_to_run_concurrently() {
    let pg = PostgresServer::start();
    let pool = connect(&pg.create_database("fresh")).await;
    sqlx::query("CREATE TABLE stock (sku TEXT PRIMARY KEY, qty INT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    let column = TokenColumn::new("stock", "sku", "lock_token").unwrap();
    let runs: Vec<_> = (0..8)
        .map(|_| {
            let (pool, column) = (pool.clone(), column.clone());
            tokio::spawn(async move {
                migrate(&pool).await?;
                add_token_column(&pool, &column).await
            })
        })
        .collect();
    for run in runs {
        run.await.unwrap().unwrap();
    }
    migrate(&pool).await.unwrap();
    add_token_column(&pool, &column).await.unwrap();
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns \
         WHERE table_name = 'stock' ORDER BY ordinal_position",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(columns, ["sku", "qty", "lock_token"]);
    let mut conn = pool.acquire().await.unwrap();
    advance(&mut conn, "x", 1).await.unwrap();
}

async fn stock_with_token_column(pool: &PgPool, table: &str) -> TokenColumn {
    sqlx::query(&format!(
        "CREATE TABLE \"{table}\" (sku TEXT PRIMARY KEY, qty INT NOT NULL)"
    ))
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO \"{table}\" (sku, qty) VALUES ('42', 10)"
    ))
    .execute(pool)
    .await
    .unwrap();
    let column = TokenColumn::new(table, "sku", "lock_token").unwrap();
    add_token_column(pool, &column).await.unwrap();
    column
}

/// The documented statement, and what `check_update` makes of its result.
async fn fenced_update(
    pool: &PgPool,
    column: &TokenColumn,
    sku: &str,
    qty: i32,
    token: u64,
) -> Result<FencedUpdate, FenceError> {
    let mut tx = pool.begin().await?;
    let done = sqlx::query(&format!(
        "UPDATE \"{}\" SET qty = $1, lock_token = $2 WHERE sku = $3 AND lock_token <= $2",
        column.table()
    ))
    .bind(qty)
    .bind(sql_token(token)?)
    .bind(sku)
    .execute(&mut *tx)
    .await?;
    let outcome = check_update(&mut tx, column, sku, token, done.rows_affected()).await?;
    tx.commit().await?;
    Ok(outcome)
}

async fn qty_and_token(pool: &PgPool) -> (i32, i64) {
    sqlx::query_as("SELECT qty, lock_token FROM stock WHERE sku = '42'")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn token_column_refuses_stale_updates_and_tells_missing_rows_apart() {
    let (_pg, pool) = database().await;
    let column = stock_with_token_column(&pool, "stock").await;
    // Existing rows start at token 0.
    assert_eq!(qty_and_token(&pool).await, (10, 0));

    assert_eq!(
        fenced_update(&pool, &column, "42", 9, 5).await.unwrap(),
        FencedUpdate::Applied
    );
    assert_eq!(
        fenced_update(&pool, &column, "42", 8, 5).await.unwrap(),
        FencedUpdate::Applied
    );
    assert_stale_named(
        fenced_update(&pool, &column, "42", 1, 4).await,
        "stock[42]",
        4,
        5,
    );
    assert_eq!(qty_and_token(&pool).await, (8, 5));

    assert_eq!(
        fenced_update(&pool, &column, "no-such-sku", 1, 9)
            .await
            .unwrap(),
        FencedUpdate::NotMatched
    );
    assert!(matches!(
        fenced_update(&pool, &column, "42", 1, u64::MAX).await,
        Err(FenceError::TokenOutOfRange { .. })
    ));

    // A 0-row result with a token that is not stale: the rest of the WHERE did not match.
    let mut conn = pool.acquire().await.unwrap();
    let done = sqlx::query(
        "UPDATE stock SET qty = 0, lock_token = $1 WHERE sku = '42' AND lock_token <= $1 AND qty > 100",
    )
    .bind(6_i64)
    .execute(&mut *conn)
    .await
    .unwrap();
    assert_eq!(
        check_update(&mut conn, &column, "42", 6, done.rows_affected())
            .await
            .unwrap(),
        FencedUpdate::NotMatched
    );
    assert_eq!(qty_and_token(&pool).await, (8, 5));
}

#[tokio::test]
async fn token_column_on_a_reserved_word_and_a_schema_qualified_table() {
    let (_pg, pool) = database().await;
    // Quoting makes a table named `order` work.
    let order = stock_with_token_column(&pool, "order").await;
    assert_eq!(
        fenced_update(&pool, &order, "42", 1, 1).await.unwrap(),
        FencedUpdate::Applied
    );
    sqlx::query("CREATE SCHEMA inventory")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("CREATE TABLE inventory.stock (sku TEXT PRIMARY KEY)")
        .execute(&pool)
        .await
        .unwrap();
    let qualified = TokenColumn::new("inventory.stock", "sku", "lock_token").unwrap();
    add_token_column(&pool, &qualified).await.unwrap();
    let present: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.columns \
         WHERE table_schema = 'inventory' AND table_name = 'stock' AND column_name = 'lock_token'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(present, 1);
}

#[tokio::test]
async fn hostile_identifiers_are_rejected_before_any_sql_runs() {
    let (_pg, pool) = database().await;
    sqlx::query("CREATE TABLE x (sku TEXT PRIMARY KEY)")
        .execute(&pool)
        .await
        .unwrap();
    let long = "a".repeat(64);
    assert_invalid_identifiers(&[
        ("stock; DROP TABLE x", "sku", "lock_token"),
        ("x", "sku", "lock_token INT; DROP TABLE x; --"),
        ("x\"; DROP TABLE x; --", "sku", "lock_token"),
        ("x", "sku' OR '1'='1", "lock_token"),
        ("", "sku", "lock_token"),
        ("x", "", "lock_token"),
        ("x", "sku", long.as_str()),
        ("public.x.y", "sku", "lock_token"),
    ]);
    let still_there: i64 = sqlx::query_scalar("SELECT count(*) FROM x")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(still_there, 0);
}

// Requests dropped half-way (`LockGuard::run` on a lost lock, a timeout, a client gone).

/// A pool of one connection: acquiring it waits for whatever a dropped request left on it (a
/// begin in its own task, a queued rollback, the pool's check on release).
async fn one_connection(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(LIMIT)
        .connect(url)
        .await
        .unwrap()
}

/// Asserts that no session of the database is `idle in transaction`.
async fn assert_no_transaction_open(pool: &PgPool, cut: &str) {
    let open: Vec<String> = sqlx::query_scalar(
        "SELECT coalesce(query, '') FROM pg_stat_activity \
         WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(
        open.is_empty(),
        "{cut}: sessions left idle in transaction, last statements {open:?}"
    );
}

/// The workload's read-modify-write of `name`'s counter, fenced with `token`: begin, advance,
/// read, write, commit.
async fn fenced_section(pool: &PgPool, name: &str, token: u64) -> Result<(), FenceError> {
    let mut tx = lock_fence::postgres::begin(pool).await?;
    advance(&mut tx, name, token).await?;
    let value: Option<i64> = sqlx::query_scalar("SELECT value FROM counters WHERE name = $1")
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO counters (name, value) VALUES ($1, $2) \
         ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
    )
    .bind(name)
    .bind(value.unwrap_or(0) + 1)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// sqlx's `Pool::begin` dropped after it sent `BEGIN` and before the answer (sqlx issue 4393)
/// returned the connection to the pool idle in transaction. `lock_fence::postgres::begin`
/// dropped at any await point leaves no session in a transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn begin_dropped_at_any_await_point_leaves_no_transaction_open() {
    let (pg, pool) = database().await;
    let cut = one_connection(&pg.url()).await;
    common::begin_cut_at_every_await_point(
        || lock_fence::postgres::begin(&cut),
        async |dropped: String| {
            let _held = cut.acquire().await.unwrap();
            assert_no_transaction_open(&pool, &dropped).await;
        },
    )
    .await;
}

/// Whole fenced sections (begin, advance, read, write, commit) from several tasks sharing one
/// pool, all dropped at their n-th await point, for n = 0, 1, 2, … until every one completes:
/// afterwards no session is in a transaction, and the counter counts the sections that
/// committed (and maybe some dropped in their commit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_sections_dropped_at_any_await_point_leave_no_transaction_open() {
    const TASKS: u32 = 3;
    let (pg, pool) = database().await;
    sqlx::query("CREATE TABLE counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    let shared = PgPoolOptions::new()
        .max_connections(TASKS)
        .acquire_timeout(LIMIT)
        .connect(&pg.url())
        .await
        .unwrap();
    // Sections that said they committed, and sections dropped (maybe in their commit).
    let (committed, dropped) = common::sections_cut_at_every_await_point(
        TASKS,
        |token| {
            let pool = shared.clone();
            async move { fenced_section(&pool, "stock:42", token).await }
        },
        async |cut: String| {
            // Every connection back in the pool: whatever a dropped section left running on
            // them has finished.
            let mut held = Vec::new();
            for _ in 0..TASKS {
                held.push(shared.acquire().await.unwrap());
            }
            assert_no_transaction_open(&pool, &cut).await;
        },
    )
    .await;
    let value: i64 = sqlx::query_scalar("SELECT value FROM counters WHERE name = 'stock:42'")
        .fetch_one(&pool)
        .await
        .unwrap();
    // A section dropped in its commit may have committed without hearing it.
    assert!(
        (committed..=committed + dropped).contains(&value),
        "counter {value}: {committed} sections committed, {dropped} dropped"
    );
}
