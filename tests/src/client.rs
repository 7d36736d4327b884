//! Clients for tests and examples: one place that connects a [`LockClient`] to a test server,
//! one that finds a Redis for an example, and waits for what the clients' locks do.

use std::time::Duration;

use lock_runtime::{Lock, LockClient, LockClientBuilder, LockError, LockInfo, LossReason};
use tokio::task::JoinHandle;

use crate::RedisServer;

/// A client of `redis` with default settings.
///
/// # Panics
/// If it cannot connect.
pub async fn client(redis: &RedisServer) -> LockClient {
    client_with(redis, |builder| builder).await
}

/// A client of `redis` with the settings `configure` makes, e.g.
/// `client_with(&redis, |b| b.watchdog_timeout(Duration::from_secs(1)))`.
///
/// # Panics
/// If it cannot connect.
pub async fn client_with(
    redis: &RedisServer,
    configure: impl FnOnce(LockClientBuilder) -> LockClientBuilder,
) -> LockClient {
    configure(LockClient::builder(&redis.url()))
        .build()
        .await
        .expect("connect a lock client to the test server")
}

/// Polls `cond` every 5 ms until it holds or `limit` passes; returns whether it held.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Reads `lock`'s [`info`](Lock::info) every 20 ms until the lock is held and `cond` holds for
/// what was read, for up to 5 s; returns whether it did.
///
/// # Panics
/// If reading the info fails.
pub async fn until_info(lock: &Lock, mut cond: impl FnMut(&LockInfo) -> bool) -> bool {
    for _ in 0..250 {
        if lock.info().await.unwrap().is_some_and(|info| cond(&info)) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// What a spawned acquisition (`tokio::spawn(async move { lock.acquire().await })`) got, once
/// it was granted.
///
/// # Panics
/// If it is not granted within 5 s, the task panicked, or the acquisition failed.
pub async fn granted<G>(waiter: JoinHandle<Result<G, LockError>>) -> G {
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter was granted the lock within 5 s")
        .expect("the waiting task")
        .expect("the acquisition")
}

/// The Redis an example runs against: `REDIS_URL` when set, or else a `redis-server` started
/// on a free loopback port (stopped when the returned server is dropped, so keep it alive).
///
/// # Panics
/// When `REDIS_URL` is not set and `redis-server` cannot be started (`bash scripts/demo.sh`
/// installs it).
pub fn local_redis() -> (Option<RedisServer>, String) {
    match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = RedisServer::start();
            let url = server.url();
            (Some(server), url)
        }
    }
}

/// Why a lock was lost, when `err` is [`LockError::Lost`]; `None` for any other error.
pub fn loss_reason(err: &LockError) -> Option<LossReason> {
    match err {
        LockError::Lost { reason, .. } => Some(*reason),
        _ => None,
    }
}
