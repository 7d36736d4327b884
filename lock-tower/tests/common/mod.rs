//! Shared helpers for the lock-tower integration tests.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::time::Duration;

use lock_tests::RedisServer;
use lock_tower::LockClient;

/// Runs `fut`, failing the test if it takes longer than `limit`.
pub async fn bounded<F: Future>(limit: Duration, fut: F) -> F::Output {
    tokio::time::timeout(limit, fut)
        .await
        .expect("test took too long")
}

/// A client of `redis` whose replies time out after `response_timeout`.
pub async fn client(redis: &RedisServer, response_timeout: Duration) -> LockClient {
    lock_tests::client_with(redis, |b| {
        b.response_timeout(response_timeout)
            .connect_timeout(Duration::from_secs(2))
    })
    .await
}
