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

/// Locks through `flush` (`SCRIPT FLUSH`, `FUNCTION FLUSH`) sent mid-run: 20 lock/unlock pairs
/// with a flush every 5, then one more under a lock held all along, whose watchdog must load
/// what it needs too (it renews every 200 ms; the lock is still held 800 ms later).
pub async fn lock_through_flushes(redis: &RedisServer, flush: &[&str]) {
    let locks = client_with_watchdog(redis, Duration::from_millis(600)).await;
    let held = locks.lock("flush:held").acquire().await.unwrap();
    for i in 0..20 {
        if i % 5 == 0 {
            redis.cmd(flush);
        }
        let g = locks.lock("flush").acquire().await.unwrap();
        assert!(locks.lock("flush").is_locked().await.unwrap());
        g.release().await.unwrap();
    }
    redis.cmd(flush);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!held.is_lost());
    held.release().await.unwrap();
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

/// `a` holds `name`, a task of `b` waits, and is woken by the release.
pub async fn contend_and_wake(a: &LockClient, b: &LockClient, name: &str) {
    let held = a.lock(name).acquire().await.unwrap();
    let b = b.clone();
    let name_b = name.to_owned();
    let waiter = tokio::spawn(async move { b.lock(&name_b).acquire().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter must wait while `a` holds {name}"
    );
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("woken after release")
        .unwrap()
        .unwrap();
    g.release().await.unwrap();
}
