//! The chaos workload's fenced store on SQL: SQLite or PostgreSQL, fenced through `lock-fence`'s
//! fence table, as an adopter would use it (issue 32: the failover suites' SQL stores).
//!
//! A critical section is the Redis store's read-modify-write ([`FENCED_READ`](super::FENCED_READ),
//! [`FENCED_WRITE`](super::FENCED_WRITE)) in one transaction (SQLite: `BEGIN IMMEDIATE`):
//! `lock_fence::{sqlite,postgres}::advance(name, token)` first (refused: the section is
//! [`Outcome::RejectedRead`]), then the counter read, a pause, the counter written back plus one
//! and the token appended to the commit log, then the commit, while the lock is held. The fence
//! table orders the transactions of one name by token (PostgreSQL: its row lock; SQLite: the
//! database's write lock), so the log's `seq` order is the commit order of each name and
//! [`SqlStore::read`] gives the checker the same [`StoreState`] as [`super::read_store`].
//!
//! The workload's own tables, beside `lock_fences` (created by [`SqlStore::prepare`], which
//! also runs `lock-fence`'s `migrate`):
//!
//! ```sql
//! CREATE TABLE chaos_values (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
//! CREATE TABLE chaos_log (seq BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, token BIGINT NOT NULL);
//! -- SQLite: INTEGER, and seq INTEGER PRIMARY KEY AUTOINCREMENT
//! ```
//!
//! URLs: `sqlite://<file>` (WAL, a busy timeout: several processes share the file) or
//! `postgres://…`.

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use lock_fence::FenceError;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use super::{Outcome, StoreState};

/// How long a connection waits for SQLite's write lock, or for a pooled connection.
const BUSY: Duration = Duration::from_secs(10);

/// Connections per process: one per task of the workload is enough.
const CONNECTIONS: u32 = 4;

const SQLITE_TABLES: [&str; 2] = [
    "CREATE TABLE IF NOT EXISTS chaos_values (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chaos_log \
     (seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, token INTEGER NOT NULL)",
];

const POSTGRES_TABLES: [&str; 2] = [
    "CREATE TABLE IF NOT EXISTS chaos_values (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chaos_log \
     (seq BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, token BIGINT NOT NULL)",
];

/// A SQL store of the chaos workload: a pool on SQLite or PostgreSQL.
#[derive(Debug, Clone)]
pub enum SqlStore {
    /// `sqlite://<file>`.
    Sqlite(SqlitePool),
    /// `postgres://…`.
    Postgres(PgPool),
}

impl SqlStore {
    /// Whether `url` names a SQL store (`sqlite://`, `postgres://`, `postgresql://`).
    pub fn is_sql_url(url: &str) -> bool {
        ["sqlite://", "postgres://", "postgresql://"]
            .iter()
            .any(|scheme| url.starts_with(scheme))
    }

    /// A pool on the store at `url`; a SQLite file is created if missing, in WAL mode with a
    /// busy timeout.
    ///
    /// # Errors
    /// If the store cannot be reached, or `url` is not a SQL store's.
    pub async fn connect(url: &str) -> Result<SqlStore, sqlx::Error> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            let options = SqliteConnectOptions::new()
                .filename(path)
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                // Safe in WAL mode against a process killed mid-commit (the workers are).
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(BUSY);
            let pool = SqlitePoolOptions::new()
                .max_connections(CONNECTIONS)
                .acquire_timeout(BUSY)
                .connect_with(options)
                .await?;
            return Ok(SqlStore::Sqlite(pool));
        }
        if !Self::is_sql_url(url) {
            return Err(sqlx::Error::Configuration(
                format!("not a SQL store: {url}").into(),
            ));
        }
        let pool = PgPoolOptions::new()
            .max_connections(CONNECTIONS)
            .acquire_timeout(BUSY)
            .connect_with(PgConnectOptions::from_str(url)?)
            .await?;
        Ok(SqlStore::Postgres(pool))
    }

    /// Creates the fence table (`lock-fence`'s `migrate`) and the workload's tables; once,
    /// before the workers start.
    ///
    /// # Errors
    /// A database error.
    pub async fn prepare(&self) -> Result<(), FenceError> {
        match self {
            SqlStore::Sqlite(pool) => {
                lock_fence::sqlite::migrate(pool).await?;
                for table in SQLITE_TABLES {
                    sqlx::query(table).execute(pool).await?;
                }
            }
            SqlStore::Postgres(pool) => {
                lock_fence::postgres::migrate(pool).await?;
                for table in POSTGRES_TABLES {
                    sqlx::query(table).execute(pool).await?;
                }
            }
        }
        Ok(())
    }

    /// One critical section's fenced read-modify-write of the counter of `key` with `token`
    /// (see the module docs), pausing `pause` between the read and the write.
    pub async fn section(&self, key: &str, token: u64, pause: Duration) -> Outcome {
        let done = match self {
            SqlStore::Sqlite(pool) => sqlite_section(pool, key, token, pause).await,
            SqlStore::Postgres(pool) => postgres_section(pool, key, token, pause).await,
        };
        match done {
            Ok(()) => Outcome::Committed,
            // `advance` refused the token: nothing was read or written.
            Err(e) if e.is_stale() => Outcome::RejectedRead,
            Err(_) => Outcome::Failed,
        }
    }

    /// Each counter of `keys` and its commit log (tokens in commit order), as
    /// [`read_store`](super::read_store) reads the Redis store.
    ///
    /// # Errors
    /// A database error.
    pub async fn read(&self, keys: &[String]) -> Result<HashMap<String, StoreState>, sqlx::Error> {
        let mut state = HashMap::new();
        for key in keys {
            let (value, log): (Option<i64>, Vec<i64>) = match self {
                SqlStore::Sqlite(pool) => (
                    sqlx::query_scalar::<_, i64>("SELECT value FROM chaos_values WHERE name = ?1")
                        .bind(key)
                        .fetch_optional(pool)
                        .await?,
                    sqlx::query_scalar::<_, i64>(
                        "SELECT token FROM chaos_log WHERE name = ?1 ORDER BY seq",
                    )
                    .bind(key)
                    .fetch_all(pool)
                    .await?,
                ),
                SqlStore::Postgres(pool) => (
                    sqlx::query_scalar::<_, i64>("SELECT value FROM chaos_values WHERE name = $1")
                        .bind(key)
                        .fetch_optional(pool)
                        .await?,
                    sqlx::query_scalar::<_, i64>(
                        "SELECT token FROM chaos_log WHERE name = $1 ORDER BY seq",
                    )
                    .bind(key)
                    .fetch_all(pool)
                    .await?,
                ),
            };
            let unsigned = |n: i64| u64::try_from(n).unwrap_or(0);
            state.insert(
                key.clone(),
                StoreState {
                    value: value.map_or(0, unsigned),
                    log: log.into_iter().map(unsigned).collect(),
                },
            );
        }
        Ok(state)
    }

    /// Closes the pool.
    pub async fn close(&self) {
        match self {
            SqlStore::Sqlite(pool) => pool.close().await,
            SqlStore::Postgres(pool) => pool.close().await,
        }
    }
}

async fn sqlite_section(
    pool: &SqlitePool,
    key: &str,
    token: u64,
    pause: Duration,
) -> Result<(), FenceError> {
    // `BEGIN IMMEDIATE`: the write lock at once, so the read below cannot be overtaken by
    // another process's write. `lock-fence`'s begin, not sqlx's: a section dropped while it
    // begins (cancelled, or its lock lost: `LockGuard::run`) cannot leave the transaction open
    // and the write lock held.
    let mut tx = lock_fence::sqlite::begin(pool).await?;
    lock_fence::sqlite::advance(&mut tx, key, token).await?;
    let value: Option<i64> = sqlx::query_scalar("SELECT value FROM chaos_values WHERE name = ?1")
        .bind(key)
        .fetch_optional(&mut *tx)
        .await?;
    // The non-atomic part: only the lock (and, when it is lost, fencing) keeps it right.
    tokio::time::sleep(pause).await;
    sqlx::query(
        "INSERT INTO chaos_values (name, value) VALUES (?1, ?2) \
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
    )
    .bind(key)
    .bind(value.unwrap_or(0) + 1)
    .execute(&mut *tx)
    .await?;
    sqlx::query("INSERT INTO chaos_log (name, token) VALUES (?1, ?2)")
        .bind(key)
        .bind(lock_fence::sql_token(token)?)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

async fn postgres_section(
    pool: &PgPool,
    key: &str,
    token: u64,
    pause: Duration,
) -> Result<(), FenceError> {
    // `lock-fence`'s begin, not sqlx's: a section dropped while it begins cannot leave its
    // connection idle in transaction.
    let mut tx = lock_fence::postgres::begin(pool).await?;
    // Locks the name's fence row until the transaction ends: one holder's transaction at a
    // time, in token order.
    lock_fence::postgres::advance(&mut tx, key, token).await?;
    let value: Option<i64> = sqlx::query_scalar("SELECT value FROM chaos_values WHERE name = $1")
        .bind(key)
        .fetch_optional(&mut *tx)
        .await?;
    tokio::time::sleep(pause).await;
    sqlx::query(
        "INSERT INTO chaos_values (name, value) VALUES ($1, $2) \
         ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
    )
    .bind(key)
    .bind(value.unwrap_or(0) + 1)
    .execute(&mut *tx)
    .await?;
    sqlx::query("INSERT INTO chaos_log (name, token) VALUES ($1, $2)")
        .bind(key)
        .bind(lock_fence::sql_token(token)?)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both stores: a newer token's commit, then an older token refused before it read, the
    /// same token again accepted; the read-back is what the checker needs.
    async fn refuses_a_stale_token_and_logs_commits_in_order(store: SqlStore) {
        store.prepare().await.unwrap();
        let key = "chaos:1".to_string();
        assert_eq!(
            store.section(&key, 7, Duration::ZERO).await,
            Outcome::Committed
        );
        assert_eq!(
            store.section(&key, 5, Duration::ZERO).await,
            Outcome::RejectedRead
        );
        assert_eq!(
            store.section(&key, 9, Duration::ZERO).await,
            Outcome::Committed
        );
        let state = store.read(std::slice::from_ref(&key)).await.unwrap();
        assert_eq!(state[&key].value, 2);
        assert_eq!(state[&key].log, vec![7, 9]);
        assert_eq!(crate::chaos::stale_writes_accepted(&state), 0);
        store.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_sqlite_store_refuses_a_stale_token_and_logs_commits_in_order() {
        let dir = crate::ChildProcess::temp_dir("chaos-sqlite");
        let url = format!("sqlite://{}", dir.join("store.db").display());
        refuses_a_stale_token_and_logs_commits_in_order(SqlStore::connect(&url).await.unwrap())
            .await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A section dropped at any point (cancelled, or its lock lost) leaves no transaction open:
    /// another process's section after it gets SQLite's write lock and commits (a transaction
    /// left open would hold the lock until that section's busy timeout failed it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sqlite_section_dropped_at_any_point_leaves_no_transaction_open() {
        let dir = crate::ChildProcess::temp_dir("chaos-sqlite-cut");
        let url = format!("sqlite://{}", dir.join("store.db").display());
        let one = SqlStore::connect(&url).await.unwrap();
        one.prepare().await.unwrap();
        // Another process's pool on the same file.
        let other = SqlStore::connect(&url).await.unwrap();
        let mut token = 1;
        for round in 0..300u64 {
            let cut = Duration::from_micros(round * 37 % 500);
            let _ = tokio::time::timeout(cut, one.section("chaos:1", token, Duration::ZERO)).await;
            let outcome = other.section("chaos:1", token + 1, Duration::ZERO).await;
            assert_eq!(
                outcome,
                Outcome::Committed,
                "round {round}, cut after {cut:?}"
            );
            token += 2;
        }
        one.close().await;
        other.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_postgres_store_refuses_a_stale_token_and_logs_commits_in_order() {
        let pg = tokio::task::spawn_blocking(crate::PostgresServer::start)
            .await
            .unwrap();
        let store = SqlStore::connect(&pg.url()).await.unwrap();
        refuses_a_stale_token_and_logs_commits_in_order(store).await;
        tokio::task::spawn_blocking(move || drop(pg)).await.unwrap();
    }
}
