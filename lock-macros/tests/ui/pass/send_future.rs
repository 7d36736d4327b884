//! The returned future is `Send` (and `'static` when the arguments are) whenever the body's is:
//! it can be given to `tokio::spawn` and used as an axum-style handler.

use std::future::Future;
use std::sync::Arc;

use lock_runtime::{LockClient, LockError, distributed_lock};

fn require_send<F: Future + Send>(fut: F) -> F {
    fut
}

#[distributed_lock(name = "job:<id>", client = locks)]
async fn job(locks: LockClient, id: u64) -> Result<u64, LockError> {
    tokio::task::yield_now().await;
    Ok(id)
}

struct Service {
    locks: Arc<LockClient>,
}

impl Service {
    #[distributed_lock(name = "svc:<id>", client = self.locks, wait = "1s", on_lost = ignore)]
    async fn handle(&self, id: u64) -> Result<u64, LockError> {
        tokio::task::yield_now().await;
        Ok(id)
    }
}

#[allow(dead_code)]
fn spawn_them(locks: LockClient, service: Arc<Service>) {
    let _ = tokio::spawn(job(locks, 1));
    let _ = tokio::spawn(async move { service.handle(2).await });
}

#[allow(dead_code)]
fn borrowed_futures_are_send(locks: LockClient, service: &Service) {
    let _ = require_send(job(locks, 1));
    let _ = require_send(service.handle(1));
}

pub(super) fn main() {}
