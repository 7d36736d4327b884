//! Shared helpers for the lock-runtime integration tests.
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::time::Duration;

use lock_runtime::LockClient;
use lock_tests::RedisServer;

pub use lock_tests::{client, eventually};

/// A client whose watchdog timeout is `watchdog` (renewal every third of it).
pub async fn client_with_watchdog(redis: &RedisServer, watchdog: Duration) -> LockClient {
    lock_tests::client_with(redis, |b| b.watchdog_timeout(watchdog)).await
}

/// A plain redis connection for test bookkeeping (counters, inspection).
pub async fn conn(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Asserts that within 2 s no `lock:*` pub/sub channel is left on `redis` (every waiter that
/// gave up, finished or was cancelled unsubscribed).
pub async fn assert_unsubscribed(redis: &RedisServer) {
    let clean = eventually(Duration::from_secs(2), || {
        redis.pubsub_channels("lock:*").is_empty()
    })
    .await;
    assert!(
        clean,
        "channels left: {:?}",
        redis.pubsub_channels("lock:*")
    );
}
