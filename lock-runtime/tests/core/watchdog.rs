//! The watchdog on Redis: renewal stops with the guard, batching, frozen and stalled servers.
//! Renewal while held, loss of a deleted or force-unlocked lock, explicit leases and the
//! maximum hold time are shared behaviour tests (`behaviour/mod.rs`).

use crate::common;

use std::time::{Duration, Instant};

use lock_runtime::{LockError, LossReason};
use lock_tests::RedisServer;

const WATCHDOG: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_stops_once_the_guard_is_dropped() {
    let redis = RedisServer::start();
    let locks = common::client_with_watchdog(&redis, WATCHDOG).await;
    let guard = locks.lock("dropped").acquire().await.unwrap();
    assert_eq!(locks.held_locks(), 1);
    tokio::time::sleep(Duration::from_millis(800)).await;
    drop(guard);
    assert_eq!(locks.held_locks(), 0);
    assert!(
        common::eventually(Duration::from_millis(500), || redis
            .keys("lock:{dropped}")
            .is_empty())
        .await
    );
    let renewals = redis.script_calls();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(redis.script_calls(), renewals, "still renewing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_of_many_locks_are_one_round_trip() {
    let redis = RedisServer::start();
    let locks = common::client_with_watchdog(&redis, Duration::from_millis(600)).await;
    let mut guards = Vec::new();
    for i in 0..1200 {
        guards.push(locks.lock(format!("many:{i}")).acquire().await.unwrap());
    }
    let before = redis.script_calls();
    let stats_before = locks.stats();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let calls = redis.script_calls() - before;
    let stats = locks.stats();
    let trips = stats.renewal_round_trips - stats_before.renewal_round_trips;
    let renewed = stats.renewals - stats_before.renewals;
    // One round trip per 200 ms period renews all 1200 locks.
    assert!(
        (3..=6).contains(&trips),
        "{trips} renewal round trips in 1 s"
    );
    assert_eq!(renewed, trips * 1200, "every round trip renewed every lock");
    // 1200 locks, 500 keys per script call: 3 calls per period, ~5 periods in 1 s.
    assert!((3..=3 * 6).contains(&calls), "{calls} renewal script calls");
    assert!(guards.iter().all(|g| !g.is_lost()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_makes_lost_fire_before_the_lease_could_expire() {
    let redis = RedisServer::start();
    let locks = frozen_client(&redis).await;
    let guard = locks.lock("frozen").acquire().await.unwrap();
    let acquired = Instant::now();
    redis.freeze();
    let err = tokio::time::timeout(Duration::from_secs(3), guard.lost()).await;
    let at = acquired.elapsed();
    redis.thaw();
    let err = err.expect("lost() fires while Redis is frozen");
    assert!(
        matches!(
            err,
            LockError::Lost {
                reason: LossReason::RenewalFailed,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        at < WATCHDOG,
        "declared at {at:?}, after the lease could have expired"
    );
}

async fn frozen_client(redis: &RedisServer) -> lock_runtime::LockClient {
    lock_runtime::LockClient::builder(&redis.url())
        .watchdog_timeout(WATCHDOG)
        .response_timeout(Duration::from_millis(200))
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_renewal_reports_exactly_the_locks_that_were_lost() {
    let redis = RedisServer::start();
    let locks = common::client_with_watchdog(&redis, WATCHDOG).await;
    let a = locks.lock("batch:a").acquire().await.unwrap();
    let b = locks.lock("batch:b").acquire().await.unwrap();
    let c = locks.lock("batch:c").acquire().await.unwrap();
    redis.cmd(&["DEL", "lock:{batch:b}"]);
    let err = tokio::time::timeout(WATCHDOG, b.lost())
        .await
        .expect("b is lost");
    assert!(err.is_lost());
    tokio::time::sleep(WATCHDOG).await;
    assert!(!a.is_lost() && !c.is_lost());
    assert_eq!(locks.held_locks(), 2);
    assert!(redis.cmd(&["PTTL", "lock:{batch:a}"]).int().unwrap() > 0);
    a.release().await.unwrap();
    c.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_stall_of_redis_does_not_lose_the_lock() {
    let redis = RedisServer::start();
    let locks = frozen_client(&redis).await;
    let guard = locks.lock("stall").acquire().await.unwrap();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        redis.freeze();
        tokio::time::sleep(Duration::from_millis(250)).await;
        redis.thaw();
    }
    tokio::time::sleep(WATCHDOG).await;
    assert!(
        !guard.is_lost(),
        "a 250 ms stall must be ridden out by quick retries"
    );
    guard.release().await.unwrap();
}
