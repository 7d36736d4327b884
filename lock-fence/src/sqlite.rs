//! SQLite through sqlx (feature `sqlite`): the [fence table](crate#the-fence-table) and the
//! [token column](crate#the-token-column).
//!
//! SQLite lets one writer at a time into a database file, so transactions that call
//! [`advance`] for a name are ordered by the database lock rather than a row lock: the one that
//! holds the write lock commits (or rolls back) before the next can write, and then finds the
//! newer token if there is one.
//!
//! Open the database in WAL mode with a busy timeout, and begin every fenced read-modify-write
//! with [`begin`]: it takes the write lock at once (`BEGIN IMMEDIATE`), so the transaction's
//! reads cannot be overtaken by another process's write before its own (with a plain, deferred
//! `BEGIN` the upgrade from reading to writing fails with `SQLITE_BUSY` instead of waiting), and
//! it cannot be cut in half when the request is dropped (see [`begin`] for why sqlx's own
//! `begin_with` can).
//!
//! ```no_run
//! use std::time::Duration;
//! use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool};
//!
//! # async fn demo(guard: lock_runtime::LockGuard) -> Result<(), Box<dyn std::error::Error>> {
//! let options = SqliteConnectOptions::new()
//!     .filename("shop.db")
//!     .create_if_missing(true)
//!     .journal_mode(SqliteJournalMode::Wal)
//!     .busy_timeout(Duration::from_secs(5));
//! let pool = SqlitePool::connect_with(options).await?;
//! lock_fence::sqlite::migrate(&pool).await?; // once, at start-up
//!
//! let token = guard.fencing_token().await?;
//! let mut tx = lock_fence::sqlite::begin(&pool).await?; // BEGIN IMMEDIATE, uncuttable
//! lock_fence::sqlite::advance(&mut tx, "stock:42", token).await?;
//! sqlx::query("UPDATE stock SET qty = qty - 1 WHERE sku = ?1 AND qty > 0")
//!     .bind("42")
//!     .execute(&mut *tx)
//!     .await?;
//! tx.commit().await?; // while the lock is still held
//! # Ok(()) }
//! ```

use std::fmt::Display;

use sqlx::{Encode, Sqlite, SqliteConnection, SqlitePool, Transaction, Type};

use crate::{FenceError, FencedUpdate, TokenColumn, sql};

const CREATE_FENCE_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS lock_fences (name TEXT PRIMARY KEY, token INTEGER NOT NULL)";

const ADVANCE: &str = "INSERT INTO lock_fences (name, token) VALUES (?1, ?2) \
     ON CONFLICT (name) DO UPDATE SET token = excluded.token \
     WHERE lock_fences.token <= excluded.token \
     RETURNING token";

const NEWEST: &str = "SELECT token FROM lock_fences WHERE name = ?1";

/// Creates the `lock_fences` table if it does not exist:
///
/// ```sql
/// CREATE TABLE IF NOT EXISTS lock_fences (name TEXT PRIMARY KEY, token INTEGER NOT NULL);
/// ```
///
/// Idempotent; SQLite serialises concurrent runs (give the pool a busy timeout).
pub async fn migrate(pool: &SqlitePool) -> Result<(), FenceError> {
    sqlx::query(CREATE_FENCE_TABLE).execute(pool).await?;
    Ok(())
}

/// Begins a `BEGIN IMMEDIATE` transaction on a connection from `pool`, in a way that dropping
/// the returned future cannot cut in half: the transaction to call [`advance`] in.
///
/// A fenced write is often dropped half-way, and that is normal: `LockGuard::run` drops it when
/// the lock is lost, a timeout or a disconnected client drops the request. sqlx 0.8's
/// `begin_with("BEGIN IMMEDIATE")` is not safe to drop: after SQLite has begun the transaction
/// it awaits once more (to check that the statement did begin one), and dropped there, no
/// `Transaction` exists to roll it back. The connection goes back to the pool inside a
/// transaction that no one will end, holding the database's write lock, and every other
/// process's `BEGIN IMMEDIATE` waits out its busy timeout (sqlx issue 3932).
///
/// This runs the begin in a Tokio task of its own and waits for it. If the future is dropped,
/// the task still completes, and the transaction it began, which no one receives, is dropped
/// with the task's output: rolled back, and its connection returned to the pool. Once you
/// have the `Transaction`, dropping it (or a future that owns it, at any await point of a
/// statement or of the commit) rolls it back, as sqlx documents.
///
/// ```no_run
/// # async fn demo(pool: sqlx::SqlitePool, token: u64) -> Result<(), lock_fence::FenceError> {
/// let mut tx = lock_fence::sqlite::begin(&pool).await?;
/// lock_fence::sqlite::advance(&mut tx, "stock:42", token).await?;
/// // … reads and writes on `&mut *tx` …
/// tx.commit().await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`FenceError::Database`]: no connection within the pool's acquire timeout, or the write
/// lock not free within the busy timeout.
///
/// # Panics
/// Outside a Tokio runtime (sqlx needs one too).
pub async fn begin(pool: &SqlitePool) -> Result<Transaction<'static, Sqlite>, FenceError> {
    let pool = pool.clone();
    sql::begin_uncut(async move { pool.begin_with("BEGIN IMMEDIATE").await }).await
}

/// Records `token` as the newest for the lock `name`, unless a newer one is recorded; call it
/// inside your transaction (begun with [`begin`]: `BEGIN IMMEDIATE`), before its reads and writes,
/// and commit while the lock is held:
///
/// ```sql
/// INSERT INTO lock_fences (name, token) VALUES (?1, ?2)
/// ON CONFLICT (name) DO UPDATE SET token = excluded.token
/// WHERE lock_fences.token <= excluded.token
/// RETURNING token;
/// ```
///
/// The same token again (the same holder, a second transaction) goes through.
///
/// # Errors
/// - [`FenceError::Stale`] with the newest token when a newer holder has written: roll back.
/// - [`FenceError::TokenOutOfRange`] above `i64::MAX`.
/// - [`FenceError::Database`], e.g. when [`migrate`] has not run, or the database stayed
///   locked for longer than the busy timeout.
pub async fn advance(
    conn: &mut SqliteConnection,
    name: &str,
    token: u64,
) -> Result<(), FenceError> {
    // Our transaction has written (or holds the write lock), so no one can change the row
    // before it ends: the token read after a refusal is the newest.
    sql::advance::<Sqlite>(conn, ADVANCE, NEWEST, name, token).await
}

/// The newest token recorded for the lock `name` in `lock_fences`, if any.
pub async fn newest(conn: &mut SqliteConnection, name: &str) -> Result<Option<u64>, FenceError> {
    sql::select_token::<Sqlite, _>(conn, NEWEST, name).await
}

/// Adds the token column to your table if it is not there yet (existing rows get token 0, so
/// any holder may write them). SQLite has no `ADD COLUMN IF NOT EXISTS`, so this looks first,
/// in one `BEGIN IMMEDIATE` transaction:
///
/// ```sql
/// SELECT count(*) FROM pragma_table_info('stock') WHERE name = 'lock_token';
/// -- if 0:
/// ALTER TABLE stock ADD COLUMN lock_token INTEGER NOT NULL DEFAULT 0;
/// ```
///
/// Idempotent and safe when several processes run it at once.
pub async fn add_token_column(pool: &SqlitePool, column: &TokenColumn) -> Result<(), FenceError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let (schema, table) = column.schema_and_table();
    let present: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pragma_table_info(?1, ?2) WHERE name = ?3 COLLATE NOCASE",
    )
    .bind(table)
    .bind(schema.unwrap_or("main"))
    .bind(column.column())
    .fetch_one(&mut *tx)
    .await?;
    if present == 0 {
        let alter = format!(
            "ALTER TABLE {} ADD COLUMN {} INTEGER NOT NULL DEFAULT 0",
            column.quoted_table(),
            column.quoted_column()
        );
        sqlx::query(&alter).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Tells what a fenced `UPDATE` of the row with `key` did, from its `rows_affected()`:
///
/// ```sql
/// UPDATE stock SET qty = ?1, lock_token = ?2 WHERE sku = ?3 AND lock_token <= ?2;
/// ```
///
/// One or more rows: [`FencedUpdate::Applied`]. None: reads the row's token (on the same
/// connection, so inside your transaction) and returns [`FenceError::Stale`] (named
/// `table[key]`) when it is newer than `token`, else [`FencedUpdate::NotMatched`] (no such row,
/// or the rest of your `WHERE` did not match).
///
/// # Errors
/// [`FenceError::Stale`], [`FenceError::TokenOutOfRange`], [`FenceError::Database`].
pub async fn check_update<'k, K>(
    conn: &mut SqliteConnection,
    column: &'k TokenColumn,
    key: K,
    token: u64,
    rows_affected: u64,
) -> Result<FencedUpdate, FenceError>
where
    K: Encode<'k, Sqlite> + Type<Sqlite> + Display + Send + 'k,
{
    sql::check_update::<Sqlite, K>(conn, column, false, key, token, rows_affected).await
}
