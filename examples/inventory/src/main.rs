//! An inventory service that sells stock kept in a real database (SQLite, or PostgreSQL at
//! `DATABASE_URL`), protected by `LockLayer` (one product) and `MultiLockLayer` (a cart), with
//! every save fenced; and a load demo that tries hard to oversell.
//!
//! Run with `cargo run --release -p example-inventory` (or add `-- --no-lock` to see what the
//! lock prevents). It starts its own redis-server on a free loopback port unless `REDIS_URL`
//! is set, keeps the stock in a SQLite file in a fresh temp dir (removed at the end) unless
//! `DATABASE_URL=postgres://…` is set (the demo creates its tables there and resets its rows),
//! starts three service instances as separate processes, fires 2,000 concurrent single-product
//! purchases and 500 multi-product carts over HTTP at five products, and prints what was sold,
//! checked against the database's own rows.
//!
//! The purchase handler is a classic lost-update hazard: it loads the stock (`SELECT`), thinks
//! for a millisecond, and saves `stock - 1` (`UPDATE … SET qty = $computed`, with the sale's row,
//! in one transaction), like an ORM's load/save. A read-committed transaction does not stop two
//! requests from loading the same stock and both selling the last unit. With
//! `LockLayer::new(locks, "stock:<id>")` requests for one product run one at a time across all
//! instances, and every save first advances the product's fencing token in the database
//! (`lock_fence`): a save whose token is older than the last one accepted is rolled back, so
//! even a holder that lost its lock cannot overwrite a newer state.
//!
//! `POST /checkout` sells a cart (`{"items":[{"sku":"3","qty":1},{"sku":"1","qty":2}]}`) whole
//! or not at all, in one transaction, under `MultiLockLayer` with one lock per product (the
//! names from the JSON body, `stock:<items[].sku>`): carts list their products in random order,
//! so without care two carts would take each other's locks in opposite orders. The demo counts
//! requests not answered within 30 s as "stuck"; there must be none.
//!
//! Every instance serves the locks' metrics at `GET /metrics` (Prometheus' text format, from
//! lock-runtime's feature `metrics` and `metrics-exporter-prometheus`); the results table adds
//! up a few of them over the instances (acquisitions, wait timeouts, losses, wait p99).
//!
//! Options: `--no-lock`, `--requests N` (2000 purchases), `--carts N` (500; 0 for none),
//! `--products N` (5), `--stock N` (100 per product), `--instances N` (3), `--stuck-after S`
//! (30), `--seed N`. The process exits non-zero if, with the lock on, anything was oversold or
//! stuck.
//!
//! The code: `service.rs` is the service (the part to copy: a `LockLayer` line, a
//! `MultiLockLayer` line and fenced saves), `store.rs` the SQL (SQLite or PostgreSQL through
//! sqlx), `load.rs` drives it (processes, requests, the results table).

mod load;
mod scrape;
mod service;
mod store;

use load::{Config, drive};
use service::serve;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [cmd, redis_url, database_url, port, mode] = args.as_slice()
        && cmd == "serve"
    {
        return serve(redis_url, database_url, port.parse()?, mode == "lock").await;
    }
    let Some(config) = Config::parse(&args)? else {
        return Ok(());
    };
    let verdict = drive(config).await?;
    if config.locked && (verdict.oversold > 0 || verdict.stuck > 0) {
        std::process::exit(1);
    }
    Ok(())
}
