//! An inventory service that sells stock on a store without transactions, protected by
//! `LockLayer`, and a load demo that tries hard to oversell.
//!
//! Run with `cargo run --release -p example-inventory` (or add `-- --no-lock` to see what the
//! lock prevents). It starts its own redis-server on a free loopback port unless `REDIS_URL`
//! is set, starts three service instances as separate processes, fires 2,000 concurrent
//! purchase requests over HTTP at five products, and prints what was sold.
//!
//! The purchase handler is a classic lost-update hazard: it loads the stock (`GET`), thinks
//! for a millisecond, and saves `stock - 1` (`SET`), like an ORM's load/save. Without the lock
//! two requests read the same stock and both sell the last unit. With
//! `LockLayer::new(locks, "stock:<id>")` requests for one product run one at a time across all
//! instances, and every save carries the lock's fencing token: the store refuses a save whose
//! token is older than the last one it accepted, so even a holder that lost its lock cannot
//! overwrite a newer state.
//!
//! Options: `--no-lock`, `--requests N` (2000), `--products N` (5), `--stock N` (100 per
//! product), `--instances N` (3). The process exits non-zero if anything was oversold with the
//! lock on.
//!
//! The code: `service.rs` is the service (the part to copy: one `LockLayer` line and a fenced
//! save), `load.rs` drives it (processes, requests, the results table).

mod load;
mod service;

use load::{Config, drive};
use service::serve;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [cmd, url, port, mode] = args.as_slice()
        && cmd == "serve"
    {
        return serve(url, port.parse()?, mode == "lock").await;
    }
    let config = Config::parse(&args)?;
    let oversold = drive(config).await?;
    if oversold > 0 && config.locked {
        std::process::exit(1);
    }
    Ok(())
}
