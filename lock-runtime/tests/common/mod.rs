//! Shared helpers for the lock-runtime integration tests.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use lock_runtime::LockClient;
use lock_tests::RedisServer;

/// A client with default settings.
pub async fn client(redis: &RedisServer) -> LockClient {
    LockClient::connect(&redis.url()).await.expect("connect")
}

/// A client whose watchdog timeout is `watchdog` (renewal every third of it).
pub async fn client_with_watchdog(redis: &RedisServer, watchdog: Duration) -> LockClient {
    LockClient::builder(&redis.url())
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("connect")
}

/// A plain redis connection for test bookkeeping (counters, inspection).
pub async fn conn(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// How many times a command ran on the server so far (`INFO commandstats`).
pub fn command_calls(redis: &RedisServer, command: &str) -> u64 {
    redis.command_calls(command)
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
