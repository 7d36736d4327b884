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
    // A lease long enough that a loaded machine's stalls do not cost locks: with a 600 ms lease
    // a renewal confirmed more than 540 ms after the previous one was sent rightly declares the
    // locks lost (and the rounds after it renew only the survivors). How long a round takes is
    // a figure for the benchmark (`bench/`), not for this test.
    let redis = RedisServer::start();
    let locks = common::client_with_watchdog(&redis, Duration::from_secs(3)).await;
    let mut guards = Vec::new();
    for i in 0..1200 {
        guards.push(locks.lock(format!("many:{i}")).acquire().await.unwrap());
    }
    // A round sent while the locks were being taken renews only those held by then: count from
    // the end of a round that was sent after all 1200 were held, then over three more rounds.
    let taken = locks.stats().renewal_round_trips;
    let before = quiet_stats(&locks, taken + 1).await;
    let calls_before = redis.script_calls();
    let stats = quiet_stats(&locks, before.renewal_round_trips + 3).await;
    let calls = redis.script_calls() - calls_before;
    assert!(
        guards.iter().all(|g| !g.is_lost()),
        "locks were lost: {stats:?}"
    );
    let trips = stats.renewal_round_trips - before.renewal_round_trips;
    let renewed = stats.renewals - before.renewals;
    assert_eq!(renewed, trips * 1200, "every round trip renewed every lock");
    // 1200 locks, 500 keys per script call: 3 calls per round (a round Redis has run but whose
    // answer the client has not yet counted adds 3 more).
    assert!(
        (3 * trips..=3 * (trips + 1)).contains(&calls),
        "{calls} renewal script calls in {trips} rounds"
    );
}

/// The client's figures once `trips` renewal rounds are done, read between rounds (two equal
/// reads in a row), so a round's trip and its renewals are counted together.
async fn quiet_stats(locks: &lock_runtime::LockClient, trips: u64) -> lock_runtime::ClientStats {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let stats = locks.stats();
            tokio::time::sleep(Duration::from_millis(20)).await;
            if stats.renewal_round_trips >= trips && locks.stats() == stats {
                return stats;
            }
        }
    })
    .await
    .expect("the watchdog keeps renewing")
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
    // A stall longer than the renewal period (so a round falls into it and times out after the
    // 200 ms response timeout) but well inside the lease: with a 6 s lease renewed every 2 s
    // and declared lost 600 ms before it ends, a stall of up to about 3 s is ridden out by
    // quick retries, so a loaded machine that stretches the 2.2 s freeze (the sleep, and the
    // `kill` that thaws it) by a second still holds the lock. With the old 1 s lease and three
    // 250 ms freezes, a scheduler that delayed the thaw by 500 ms lost it rightly.
    let redis = RedisServer::start();
    let locks = lock_runtime::LockClient::builder(&redis.url())
        .watchdog_timeout(Duration::from_secs(6))
        .response_timeout(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    let guard = locks.lock("stall").acquire().await.unwrap();
    let rounds = locks.stats().renewal_round_trips;
    let frozen = Instant::now();
    redis.freeze();
    tokio::time::sleep(Duration::from_millis(2200)).await;
    redis.thaw();
    let stall = frozen.elapsed();
    let after_stall = locks.stats().renewal_round_trips;
    // Renewed after the stall: a round that succeeds once Redis answers again.
    assert!(
        common::eventually(Duration::from_secs(10), || locks
            .stats()
            .renewal_round_trips
            > after_stall)
        .await,
        "no renewal after the stall"
    );
    assert!(
        !guard.is_lost(),
        "a stall of {stall:?} must be ridden out by quick retries ({rounds} rounds before it)"
    );
    assert!(redis.cmd(&["PTTL", "lock:{stall}"]).int().unwrap() > 0);
    guard.release().await.unwrap();
}
