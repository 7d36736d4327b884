//! The store: stock and sales in SQLite (a file, WAL mode) or PostgreSQL, through sqlx.
//!
//! Two tables, `inventory_stock (sku, qty)` and `inventory_sales (sku, qty, via)`, and the
//! fencing table of `lock_fence`. A sale writes the new stock and its `inventory_sales` row in
//! one transaction, so the driver can check the store itself at the end: per product, initial
//! minus final stock must equal the units recorded as sold.
//!
//! The SQL is the same for both databases (`$1` parameters work in SQLite too); [`Store`] and
//! [`Tx`] only pick the driver. SQLite transactions that write start with `BEGIN IMMEDIATE`:
//! they take the write lock up front (waiting for it up to the busy timeout) instead of
//! failing with `SQLITE_BUSY` when a read transaction tries to become a write one.

use std::str::FromStr;
use std::time::Duration;

use sqlx::Transaction;
use sqlx::postgres::{PgPool, PgPoolOptions, Postgres};
use sqlx::sqlite::{
    Sqlite, SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
};

/// How long a SQLite statement waits for another process's write lock before failing.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long taking a connection from a pool may take.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

/// What can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// The database failed or refused a statement.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// The fencing table refused a token (`is_stale()`), or failed.
    #[error("fence: {0}")]
    Fence(#[from] lock_fence::FenceError),
    /// `DATABASE_URL` is neither `postgres://…` nor `sqlite:…`.
    #[error("unsupported database URL {0:?}: use postgres://… or sqlite:…")]
    UnsupportedUrl(String),
}

impl StoreError {
    /// A save refused because a newer fencing token was already accepted for the lock name.
    pub(crate) fn is_stale(&self) -> bool {
        matches!(self, StoreError::Fence(e) if e.is_stale())
    }
}

/// A pool of connections to the stock database.
#[derive(Debug, Clone)]
pub(crate) enum Store {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// A write transaction on a [`Store`]; rolled back when dropped without [`commit`](Tx::commit).
#[derive(Debug)]
pub(crate) enum Tx {
    Sqlite(Transaction<'static, Sqlite>),
    Postgres(Transaction<'static, Postgres>),
}

/// Runs `$body` with `$conn` bound to the open connection of whichever database `$tx` is on.
macro_rules! on_tx {
    ($tx:expr, $conn:ident => $body:expr) => {
        match $tx {
            Tx::Sqlite(tx) => {
                let $conn = &mut **tx;
                $body
            }
            Tx::Postgres(tx) => {
                let $conn = &mut **tx;
                $body
            }
        }
    };
}

/// Runs `$body` with `$pool` bound to whichever pool `$store` is.
macro_rules! on_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match $store {
            Store::Sqlite($pool) => $body,
            Store::Postgres($pool) => $body,
        }
    };
}

impl Store {
    /// Connects to `url` (`postgres://…` or `sqlite:…`) with at most `connections` connections.
    /// `create` creates a missing SQLite file (the driver does, the services do not).
    pub(crate) async fn connect(
        url: &str,
        connections: u32,
        create: bool,
    ) -> Result<Store, StoreError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let pool = PgPoolOptions::new()
                .max_connections(connections)
                .acquire_timeout(ACQUIRE_TIMEOUT)
                .connect(url)
                .await?;
            Ok(Store::Postgres(pool))
        } else if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)?
                .create_if_missing(create)
                // Readers never wait for the writer, and commits do not rewrite the database.
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(SQLITE_BUSY_TIMEOUT);
            let pool = SqlitePoolOptions::new()
                .max_connections(connections)
                .acquire_timeout(ACQUIRE_TIMEOUT)
                .connect_with(options)
                .await?;
            Ok(Store::Sqlite(pool))
        } else {
            Err(StoreError::UnsupportedUrl(url.to_owned()))
        }
    }

    /// Creates the tables (the fencing table too) and resets the demo's rows: `products`
    /// products with `stock` units each, no sales. The fencing tokens recorded by earlier runs
    /// stay: a new Redis starts each token counter from its clock in microseconds, so its
    /// tokens are newer than any an earlier run recorded (SAFETY.md, promise 2).
    pub(crate) async fn reset(&self, products: &[String], stock: i64) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(pool) => lock_fence::sqlite::migrate(pool).await?,
            Store::Postgres(pool) => lock_fence::postgres::migrate(pool).await?,
        }
        let mut tx = self.begin().await?;
        on_tx!(&mut tx, conn => {
            for statement in [
                "CREATE TABLE IF NOT EXISTS inventory_stock \
                 (sku TEXT PRIMARY KEY, qty BIGINT NOT NULL)",
                "CREATE TABLE IF NOT EXISTS inventory_sales \
                 (sku TEXT NOT NULL, qty BIGINT NOT NULL, via TEXT NOT NULL)",
                "DELETE FROM inventory_sales",
                "DELETE FROM inventory_stock",
            ] {
                sqlx::query(statement).execute(&mut *conn).await?;
            }
            for sku in products {
                sqlx::query("INSERT INTO inventory_stock (sku, qty) VALUES ($1, $2)")
                    .bind(sku)
                    .bind(stock)
                    .execute(&mut *conn)
                    .await?;
            }
        });
        tx.commit().await
    }

    /// Loads one product's stock in a statement of its own (an ORM's `find`); `None` for an
    /// unknown product.
    pub(crate) async fn load(&self, sku: &str) -> Result<Option<i64>, StoreError> {
        const SQL: &str = "SELECT qty FROM inventory_stock WHERE sku = $1";
        Ok(on_pool!(self, pool => {
            sqlx::query_scalar(SQL).bind(sku).fetch_optional(pool).await?
        }))
    }

    /// Starts a write transaction (`BEGIN IMMEDIATE` on SQLite, `BEGIN` — read committed — on
    /// PostgreSQL).
    pub(crate) async fn begin(&self) -> Result<Tx, StoreError> {
        Ok(match self {
            Store::Sqlite(pool) => Tx::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?),
            Store::Postgres(pool) => Tx::Postgres(pool.begin().await?),
        })
    }

    /// The store's own account, per product: (sku, units sold by the `inventory_sales` rows,
    /// stock left).
    pub(crate) async fn account(&self) -> Result<Vec<(String, i64, i64)>, StoreError> {
        const SQL: &str = "SELECT s.sku, \
             CAST(COALESCE((SELECT SUM(x.qty) FROM inventory_sales x WHERE x.sku = s.sku), 0) AS BIGINT), \
             s.qty \
             FROM inventory_stock s ORDER BY s.sku";
        Ok(on_pool!(self, pool => {
            sqlx::query_as(SQL).fetch_all(pool).await?
        }))
    }

    /// Where the stock is, for the results table (a PostgreSQL password masked).
    pub(crate) fn describe(url: &str) -> String {
        if let Some(path) = url.strip_prefix("sqlite:") {
            let path = path.trim_start_matches("//");
            let path = path.split('?').next().unwrap_or(path);
            format!("SQLite {path} (WAL)")
        } else {
            format!("PostgreSQL {}", mask_password(url))
        }
    }

    /// Closes the pool's connections.
    pub(crate) async fn close(&self) {
        on_pool!(self, pool => pool.close().await)
    }
}

impl Tx {
    /// Reads a product's stock inside the transaction; `None` for an unknown product.
    pub(crate) async fn stock(&mut self, sku: &str) -> Result<Option<i64>, StoreError> {
        const SQL: &str = "SELECT qty FROM inventory_stock WHERE sku = $1";
        Ok(on_tx!(self, conn => {
            sqlx::query_scalar(SQL).bind(sku).fetch_optional(conn).await?
        }))
    }

    /// Checks and records `token` for `lock_name` (`lock_fence`): fails with a stale
    /// [`StoreError`] when a newer token was already accepted. Call it before the write it fences.
    pub(crate) async fn advance(&mut self, lock_name: &str, token: u64) -> Result<(), StoreError> {
        match self {
            Tx::Sqlite(tx) => lock_fence::sqlite::advance(tx, lock_name, token).await?,
            Tx::Postgres(tx) => lock_fence::postgres::advance(tx, lock_name, token).await?,
        }
        Ok(())
    }

    /// Saves a product's new stock (an ORM's `save`: the value computed by the application).
    pub(crate) async fn save_stock(&mut self, sku: &str, qty: i64) -> Result<(), StoreError> {
        const SQL: &str = "UPDATE inventory_stock SET qty = $2 WHERE sku = $1";
        on_tx!(self, conn => {
            sqlx::query(SQL).bind(sku).bind(qty).execute(conn).await?;
        });
        Ok(())
    }

    /// Records a sale of `qty` units of `sku` (`via`: `purchase` or `cart`).
    pub(crate) async fn record_sale(
        &mut self,
        sku: &str,
        qty: i64,
        via: &str,
    ) -> Result<(), StoreError> {
        const SQL: &str = "INSERT INTO inventory_sales (sku, qty, via) VALUES ($1, $2, $3)";
        on_tx!(self, conn => {
            sqlx::query(SQL).bind(sku).bind(qty).bind(via).execute(conn).await?;
        });
        Ok(())
    }

    pub(crate) async fn commit(self) -> Result<(), StoreError> {
        match self {
            Tx::Sqlite(tx) => tx.commit().await?,
            Tx::Postgres(tx) => tx.commit().await?,
        }
        Ok(())
    }

    pub(crate) async fn rollback(self) -> Result<(), StoreError> {
        match self {
            Tx::Sqlite(tx) => tx.rollback().await?,
            Tx::Postgres(tx) => tx.rollback().await?,
        }
        Ok(())
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:****@host/db`.
fn mask_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:****@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_password_is_masked_and_nothing_else_changes() {
        assert_eq!(
            mask_password("postgres://app:s3cr%40t@127.0.0.1:5432/shop?sslmode=disable"),
            "postgres://app:****@127.0.0.1:5432/shop?sslmode=disable"
        );
        assert_eq!(
            mask_password("postgres://app@127.0.0.1/shop"),
            "postgres://app@127.0.0.1/shop"
        );
        assert_eq!(
            mask_password("postgresql://127.0.0.1/shop"),
            "postgresql://127.0.0.1/shop"
        );
        assert_eq!(mask_password("not a url"), "not a url");
    }

    #[test]
    fn the_store_line_names_the_database() {
        assert_eq!(
            Store::describe("sqlite:///tmp/x/inventory.db?mode=rwc"),
            "SQLite /tmp/x/inventory.db (WAL)"
        );
        assert_eq!(
            Store::describe("postgres://u:p@127.0.0.1:5/d"),
            "PostgreSQL postgres://u:****@127.0.0.1:5/d"
        );
    }
}
