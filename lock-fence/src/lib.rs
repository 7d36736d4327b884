//! Fencing tokens checked where it matters: in the store the lock protects.
//!
//! A distributed lock can be lost in the middle of a request while its holder keeps going: a
//! GC or VM pause, a network partition, a lease that ran out while a slow call was in flight.
//! Meanwhile another process takes the lock and writes. When the first holder wakes up, its
//! write still reaches the database, and nothing in the lock can stop it: by then it is just a
//! late message. Only the store can refuse it. Every acquisition of a lock from `lock-runtime`
//! carries a [fencing token](https://docs.rs/lock-runtime) (`LockGuard::fencing_token().await`,
//! a `u64` that strictly increases per lock name); this crate makes the store remember the
//! newest token it has accepted and refuse writes with older ones. Take the locks you fence
//! with `Lock::fenced()`: the token then comes with the grant, and asking for it costs no
//! round trip (a mutex taken without it gets its token in one more round trip).
//!
//! | store | feature | record the token in the transaction | or: a token column on your row |
//! |---|---|---|---|
//! | PostgreSQL (sqlx) | `postgres` | [`postgres::advance`](postgres/fn.advance.html) | [`postgres::check_update`](postgres/fn.check_update.html) |
//! | SQLite (sqlx) | `sqlite` | [`sqlite::advance`](sqlite/fn.advance.html) | [`sqlite::check_update`](sqlite/fn.check_update.html) |
//! | Redis | `redis` | [`redis::advance`](redis/fn.advance.html) | [`redis::set`](redis/fn.set.html) (value and token in one hash) |
//!
//! A refused write is [`FenceError::Stale`] ([`is_stale`](FenceError::is_stale)), with the
//! newest token: roll back and give the request up; the lock is no longer yours.
//!
//! # The fence table
//!
//! One table for every lock name; one upsert at the start of each transaction that the lock
//! protects ([`postgres::migrate`](postgres/fn.migrate.html) / [`sqlite::migrate`](sqlite/fn.migrate.html) create the table):
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS lock_fences (name TEXT PRIMARY KEY, token BIGINT NOT NULL);
//!
//! BEGIN;  -- SQLite: BEGIN IMMEDIATE
//! INSERT INTO lock_fences (name, token) VALUES ($1, $2)   -- SQLite: ?1, ?2
//! ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token
//! WHERE lock_fences.token <= EXCLUDED.token
//! RETURNING token;
//! -- no row returned: a newer holder has written; ROLLBACK
//! -- … your reads and writes …
//! COMMIT;  -- while the lock is held
//! ```
//!
//! The upsert locks the name's row until the transaction ends, so transactions fenced on one
//! name take turns and commit in token order; reads after it see everything the previous
//! holders committed (details in [`postgres`](postgres/index.html)). Nothing in your schema changes, and the
//! transaction may touch any number of tables.
//!
//! # The token column
//!
//! When the write is a single row, keep the token on the row itself: add a column
//! ([`postgres::add_token_column`](postgres/fn.add_token_column.html) / [`sqlite::add_token_column`](sqlite/fn.add_token_column.html), described by a
//! [`TokenColumn`]) and make every write conditional on it:
//!
//! ```sql
//! ALTER TABLE stock ADD COLUMN IF NOT EXISTS lock_token BIGINT NOT NULL DEFAULT 0;
//! -- SQLite: ALTER TABLE stock ADD COLUMN lock_token INTEGER NOT NULL DEFAULT 0;
//!
//! UPDATE stock SET qty = $1, lock_token = $2 WHERE sku = $3 AND lock_token <= $2;
//! -- SQLite: UPDATE stock SET qty = ?1, lock_token = ?2 WHERE sku = ?3 AND lock_token <= ?2;
//! ```
//!
//! Zero rows updated means a newer holder wrote the row, or there is no such row:
//! [`postgres::check_update`](postgres/fn.check_update.html) / [`sqlite::check_update`](sqlite/fn.check_update.html) tell which ([`FenceError::Stale`] or
//! [`FencedUpdate::NotMatched`]). If the new value was computed from a read, read the row with
//! `SELECT … FOR UPDATE` in the same transaction (SQLite: inside `BEGIN IMMEDIATE`), so that a
//! stale holder's write cannot land between your read and your write; or use the fence table.
//!
//! Tokens are `BIGINT`s in SQL: a token above `i64::MAX` is [`FenceError::TokenOutOfRange`]
//! (bind tokens with [`sql_token`]). Table and column names are validated
//! ([`FenceError::InvalidIdentifier`]) and quoted, never pasted into SQL as given.
//!
//! # How large tokens are
//!
//! Tokens are large from the first acquisition: on Redis a lock's fencing token is the Redis
//! server's clock in microseconds at the grant (the previous token + 1 when the clock has not
//! passed it), about 1.8·10¹⁵ in 2026; behind Sentinel it is ordered by the failover epoch
//! first, `2^52 + epoch × 2^34 +` the microseconds since 2026, about 4.5·10¹⁵. They do not
//! start at 1 and grow by one per acquisition. (`lock-runtime`'s in-memory test backend,
//! `MemoryLocks`, does count from 1: do not size a column after what a test saw.) So wherever
//! you keep a token:
//!
//! - SQL: `BIGINT` (PostgreSQL `int8`; SQLite's `INTEGER` holds 64 bits). A PostgreSQL
//!   `INTEGER`/`int4`, a MySQL `INT` or any 32-bit column overflows on the first write.
//! - JSON or JavaScript: a number is exact up to 2⁵³ (about 9.0·10¹⁵), which the microsecond
//!   clock passes in the year 2255 and the epoch-ordered tokens never do (lock-runtime keeps
//!   them below it); send tokens as strings if anything on the way parses them as doubles.
//! - Compare tokens, never subtract them to count acquisitions: consecutive holders' tokens
//!   differ by the time between the grants, in microseconds.
//!
//! ```
//! // A token as Redis grants it on 26 November 2026 (the server clock in µs).
//! let token: u64 = 1_795_000_000_000_000;
//! assert_eq!(lock_fence::sql_token(token).unwrap(), 1_795_000_000_000_000_i64); // fits BIGINT
//! assert!(i32::try_from(token).is_err()); // a 32-bit INTEGER column cannot hold it
//! assert!(token < 1 << 53); // exact as a JSON/JavaScript number, for now
//! // Only a token that did not come from a lock is out of range.
//! assert!(matches!(
//!     lock_fence::sql_token(u64::MAX),
//!     Err(lock_fence::FenceError::TokenOutOfRange { .. })
//! ));
//! ```
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_fence::FenceError;
//! use lock_runtime::LockClient;
//! use sqlx::PgPool;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let locks = LockClient::connect("redis://127.0.0.1:6379").await?;
//! let pool = PgPool::connect("postgres://shop@127.0.0.1/shop").await?;
//! lock_fence::postgres::migrate(&pool).await?;
//!
//! let guard = locks.lock("stock:42").fenced().try_acquire(Duration::from_secs(5)).await?;
//! let token = guard.fencing_token().await?; // came with the grant: no round trip
//! let purchase = async {
//!     // Not `pool.begin()`: dropped half-way, sqlx's begin can leave a transaction open.
//!     let mut tx = lock_fence::postgres::begin(&pool).await?;
//!     lock_fence::postgres::advance(&mut tx, "stock:42", token).await?;
//!     let qty: i32 = sqlx::query_scalar("SELECT qty FROM stock WHERE sku = $1")
//!         .bind("42")
//!         .fetch_one(&mut *tx)
//!         .await?;
//!     if qty > 0 {
//!         sqlx::query("UPDATE stock SET qty = $1 WHERE sku = $2")
//!             .bind(qty - 1)
//!             .bind("42")
//!             .execute(&mut *tx)
//!             .await?;
//!     }
//!     tx.commit().await?; // inside the locked body
//!     Ok::<bool, FenceError>(qty > 0)
//! };
//! // `run` drops the purchase (rolling the transaction back) if the lock is lost meanwhile;
//! // if the loss goes unnoticed (a pause), `advance` refuses the late transaction instead.
//! match guard.run(purchase).await? {
//!     Ok(sold) => println!("sold: {sold}"),
//!     Err(e) if e.is_stale() => println!("lost the lock mid-request: {e}"),
//!     Err(e) => return Err(e.into()),
//! }
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Dropped requests: begin with this crate
//!
//! A fenced write whose future is dropped half-way is the normal case, not an accident:
//! `LockGuard::run` drops it when the lock is lost, and a timeout or a disconnected client drops
//! the request. Begin the transaction with [`postgres::begin`](postgres/fn.begin.html) or
//! [`sqlite::begin`](sqlite/fn.begin.html) rather than sqlx's `Pool::begin` /
//! `begin_with("BEGIN IMMEDIATE")`: dropped while the database answers, sqlx 0.8's begin can
//! return the connection to the pool inside a transaction no one will end (on SQLite holding
//! the write lock, so every other process waits out its busy timeout). This crate's `begin`
//! runs in a task of its own, so it always completes, and a transaction no one receives is
//! rolled back. After that, a dropped `Transaction` rolls back at any point, commit included.
//!
//! # The order of lock and transaction
//!
//! The lock must cover the commit. Take the lock, begin, read, write, **commit**, then
//! release:
//!
//! ```text
//! lock ─ BEGIN ─ read ─ write ─ COMMIT ─ unlock        right: the next holder reads the commit
//! lock ─ BEGIN ─ read ─ write ─ unlock ─ COMMIT        wrong: the next holder reads the old data
//! ```
//!
//! In the wrong order the next holder takes the lock, reads the stock, still unchanged because
//! the first transaction has not committed, and sells the last unit a second time. It is the
//! oversell behind many "the distributed lock doesn't work" reports (Redisson issue 2183 and
//! countless Spring threads, where an `@Transactional` method calls the locked one, or the lock
//! is released in a `finally` inside the transaction). The crate's `tests/transaction_order.rs`
//! shows both orders with two purchases of the last unit: one sale when the commit is inside
//! the locked body, two when it comes after the release.
//!
//! The fence table also orders the wrong case: the second transaction waits at `advance` until
//! the first one ends, then reads its commit (also in that test). A token column alone does
//! not: the second holder's read does not wait. Put the commit inside the lock anyway: the
//! fence is the safety net for a lock lost without notice, not a replacement for the lock.
//!
//! # Which crate do I need
//!
//! | you want | crate |
//! |---|---|
//! | a distributed lock, semaphore, read/write or fair lock from code | [`lock-runtime`](https://docs.rs/lock-runtime) |
//! | `#[distributed_lock]` on an `async fn` | [`lock-macros`](https://docs.rs/lock-macros), through `lock-runtime`'s default `macros` feature |
//! | a lock (or *N* permits) per request in axum, tonic or any tower stack | [`lock-tower`](https://docs.rs/lock-tower) |
//! | the store to refuse a stale holder's write (PostgreSQL, SQLite, Redis) | [`lock-fence`](https://docs.rs/lock-fence) |
//! | to list, inspect or force-unlock locks from a shell | [`lockctl`](https://crates.io/crates/lockctl) (`cargo install lockctl`) |
//!
//! # Features
//!
//! None by default: `postgres` and `sqlite` (sqlx with the Tokio runtime; SQLite bundled) and
//! `redis` (the `redis` crate's async connections).

#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
#[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
mod sql;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod sqlite;

pub use error::FenceError;
pub use sql::{FENCE_TABLE, FencedUpdate, MAX_IDENTIFIER_LEN, TokenColumn, sql_token};
