//! PostgreSQL through sqlx (feature `postgres`): the [fence table](crate#the-fence-table) and
//! the [token column](crate#the-token-column).
//!
//! ```no_run
//! # async fn demo(pool: sqlx::PgPool, guard: lock_runtime::LockGuard) -> Result<(), Box<dyn std::error::Error>> {
//! lock_fence::postgres::migrate(&pool).await?; // once, at start-up
//!
//! let token = guard.fencing_token().await?;
//! // Not `pool.begin()`: a dropped request cannot leave this one half begun (see `begin`).
//! let mut tx = lock_fence::postgres::begin(&pool).await?;
//! // First thing in the transaction: refused if a newer holder of "stock:42" has written.
//! lock_fence::postgres::advance(&mut *tx, "stock:42", token).await?;
//! sqlx::query("UPDATE stock SET qty = qty - 1 WHERE sku = $1 AND qty > 0")
//!     .bind("42")
//!     .execute(&mut *tx)
//!     .await?;
//! tx.commit().await?; // while the lock is still held
//! guard.release().await.ok();
//! # Ok(()) }
//! ```
//!
//! # Why the row lock orders transactions by token
//!
//! [`advance`] is one upsert on the name's row in `lock_fences`. Inserting or updating that row
//! locks it until the transaction ends, so of all transactions that call `advance` for one name,
//! only one at a time gets past it; the others wait at `advance`. When the one in front
//! commits, the next re-reads the row (PostgreSQL re-checks the `WHERE` of a waiting
//! `ON CONFLICT DO UPDATE` against the newly committed version) and gets through only if its
//! token is not older than the committed one. A transaction that was refused rolls back; one
//! whose front-runner rolled back proceeds. So, per name, the transactions that commit do so
//! one after another in token order, and every write after `advance` in them is covered: a
//! holder that lost its lock cannot commit after its successor has written, and if it committed
//! before, its successor (whose reads come after `advance`) sees that commit.
//!
//! This holds at PostgreSQL's default isolation level, `READ COMMITTED`. Under
//! `REPEATABLE READ` or `SERIALIZABLE` a transaction that waited at `advance` fails with a
//! serialization error instead ([`FenceError::Database`]): also a refusal, but retry it with a
//! new lock, not the same token.

use std::fmt::Display;

use sqlx::{Encode, PgConnection, PgPool, Postgres, Transaction, Type};

use crate::{FenceError, FencedUpdate, TokenColumn, sql};

/// Serialises this crate's migrations across processes (`pg_advisory_xact_lock`): PostgreSQL's
/// `CREATE TABLE IF NOT EXISTS` alone can fail when two sessions run it at once.
/// The value is "lockfenc" in ASCII.
const MIGRATION_LOCK: i64 = 0x6c6f_636b_6665_6e63;

const CREATE_FENCE_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS lock_fences (name TEXT PRIMARY KEY, token BIGINT NOT NULL)";

const ADVANCE: &str = "INSERT INTO lock_fences (name, token) VALUES ($1, $2) \
     ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token \
     WHERE lock_fences.token <= EXCLUDED.token \
     RETURNING token";

const NEWEST: &str = "SELECT token FROM lock_fences WHERE name = $1";

/// Creates the `lock_fences` table if it does not exist:
///
/// ```sql
/// CREATE TABLE IF NOT EXISTS lock_fences (name TEXT PRIMARY KEY, token BIGINT NOT NULL);
/// ```
///
/// Idempotent, and safe when several processes run it at once (they take turns on a
/// transaction-scoped advisory lock).
pub async fn migrate(pool: &PgPool) -> Result<(), FenceError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await?;
    sqlx::query(CREATE_FENCE_TABLE).execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(())
}

/// Begins a transaction on a connection from `pool`, in a way that dropping the returned
/// future cannot cut in half: the transaction to call [`advance`] in.
///
/// A fenced write is often dropped half-way, and that is normal: `LockGuard::run` drops it when
/// the lock is lost, a timeout or a disconnected client drops the request. sqlx 0.8's
/// `Pool::begin` is not safe to drop: dropped after it sent `BEGIN` and before the answer came
/// back, it neither rolls back nor counts the transaction, so the connection goes back to the
/// pool `idle in transaction`, and the next user of that connection runs inside a transaction
/// it did not begin (sqlx issue 4393).
///
/// This runs the begin in a Tokio task of its own and waits for it. If the future is dropped,
/// the task still completes, and the transaction it began, which no one receives, is dropped
/// with the task's output: rolled back, and its connection returned to the pool. Once you
/// have the `Transaction`, dropping it (or a future that owns it, at any await point of a
/// statement or of the commit) rolls it back, as sqlx documents.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, token: u64) -> Result<(), lock_fence::FenceError> {
/// let mut tx = lock_fence::postgres::begin(&pool).await?;
/// lock_fence::postgres::advance(&mut tx, "stock:42", token).await?;
/// // … reads and writes on `&mut *tx` …
/// tx.commit().await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`FenceError::Database`]: no connection within the pool's acquire timeout, or the server's
/// error.
///
/// # Panics
/// Outside a Tokio runtime (sqlx needs one too).
pub async fn begin(pool: &PgPool) -> Result<Transaction<'static, Postgres>, FenceError> {
    let pool = pool.clone();
    sql::begin_uncut(async move { pool.begin().await }).await
}

/// Records `token` as the newest for the lock `name`, unless a newer one is recorded; call it
/// inside your transaction, before its reads and writes, and commit while the lock is held:
///
/// ```sql
/// INSERT INTO lock_fences (name, token) VALUES ($1, $2)
/// ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token
/// WHERE lock_fences.token <= EXCLUDED.token
/// RETURNING token;
/// ```
///
/// The same token again (the same holder, a second transaction) goes through. Until the
/// transaction ends, other transactions calling `advance` for `name` wait (see the
/// [module docs](self#why-the-row-lock-orders-transactions-by-token)).
///
/// # Errors
/// - [`FenceError::Stale`] with the newest token when a newer holder has written: roll back.
/// - [`FenceError::TokenOutOfRange`] above `i64::MAX`.
/// - [`FenceError::Database`], e.g. when [`migrate`] has not run.
pub async fn advance(conn: &mut PgConnection, name: &str, token: u64) -> Result<(), FenceError> {
    // When the upsert did not update the row it still locked it, so the read of the newest
    // token (a new statement, a new snapshot) sees the committed one, and no one can change it
    // before we end.
    sql::advance::<Postgres>(conn, ADVANCE, NEWEST, name, token).await
}

/// The newest token recorded for the lock `name` in `lock_fences`, if any.
pub async fn newest(conn: &mut PgConnection, name: &str) -> Result<Option<u64>, FenceError> {
    sql::select_token::<Postgres, _>(conn, NEWEST, name).await
}

/// Adds the token column to your table if it is not there yet (existing rows get token 0, so
/// any holder may write them):
///
/// ```sql
/// ALTER TABLE stock ADD COLUMN IF NOT EXISTS lock_token BIGINT NOT NULL DEFAULT 0;
/// ```
///
/// Idempotent and safe when several processes run it at once.
pub async fn add_token_column(pool: &PgPool, column: &TokenColumn) -> Result<(), FenceError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await?;
    let alter = format!(
        "ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} BIGINT NOT NULL DEFAULT 0",
        column.quoted_table(),
        column.quoted_column()
    );
    sqlx::query(&alter).execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(())
}

/// Tells what a fenced `UPDATE` of the row with `key` did, from its `rows_affected()`:
///
/// ```sql
/// UPDATE stock SET qty = $1, lock_token = $2 WHERE sku = $3 AND lock_token <= $2;
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
    conn: &mut PgConnection,
    column: &'k TokenColumn,
    key: K,
    token: u64,
    rows_affected: u64,
) -> Result<FencedUpdate, FenceError>
where
    K: Encode<'k, Postgres> + Type<Postgres> + Display + Send + 'k,
{
    sql::check_update::<Postgres, K>(conn, column, true, key, token, rows_affected).await
}
