//! Semaphores against a real redis-server: wake-ups, permit leases, cancellation and bad input.
//! The permit limit across clients, waking as many waiters as permits came free and capacity
//! changes are shared behaviour tests (`behaviour/family.rs`).

use crate::common;

use std::time::{Duration, Instant};

use lock_runtime::{LockError, LockOptions};
use lock_tests::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_at_once() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let held = a.semaphore("api", 1).acquire().await.unwrap();
    let waiter = tokio::spawn(async move {
        let permit = b.semaphore("api", 1).acquire().await.unwrap();
        (Instant::now(), permit)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    let released = Instant::now();
    held.release().await.unwrap();
    let (got, permit) = waiter.await.unwrap();
    let latency = got - released;
    // Far below the holder's 30 s lease: woken by the release, not by a timer.
    assert!(latency < Duration::from_secs(2), "{latency:?}");
    assert_eq!(permit.permits(), 1);
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_of_a_holder_that_died_come_back_when_its_lease_ends() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let lease = Duration::from_millis(400);
    // A holder that never releases nor renews (a crashed process, as far as Redis can tell).
    let dead = a
        .semaphore("leased", 1)
        .acquire_with(LockOptions::new().lease(lease))
        .await
        .unwrap();
    std::mem::forget(dead);
    let start = Instant::now();
    let permit = b
        .semaphore("leased", 1)
        .try_acquire(Duration::from_secs(5))
        .await
        .unwrap();
    let waited = start.elapsed();
    assert!(waited >= lease - Duration::from_millis(50), "{waited:?}");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
    permit.release().await.unwrap();
    assert_eq!(b.semaphore("leased", 1).available().await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_permits() {
    let redis = RedisServer::start();
    let a = common::client_with_watchdog(&redis, Duration::from_millis(300)).await;
    let b = common::client(&redis).await;
    let permit = a.semaphore("renewed", 1).acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(!permit.is_lost());
    let err = b
        .semaphore("renewed", 1)
        .try_acquire(Duration::ZERO)
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiters_leave_no_permit_subscription_or_watchdog_entry() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let held = a
        .semaphore("storm", 2)
        .acquire_many(2, LockOptions::new())
        .await
        .unwrap();
    // The permits come free while some waiters are mid-attempt and others are cancelled.
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        held.release().await.unwrap();
    });
    let mut waiters = Vec::new();
    for i in 0..40u64 {
        let sem = b.semaphore("storm", 2);
        waiters.push(tokio::spawn(async move {
            let permits = 1 + (i % 2) as u32;
            tokio::time::timeout(
                Duration::from_millis(5 * i),
                sem.acquire_many(permits, LockOptions::new()),
            )
            .await
            // A permit that was taken is dropped here: released in the background.
            .is_ok()
        }));
    }
    for waiter in waiters {
        waiter.await.unwrap();
    }
    release.await.unwrap();
    assert!(
        common::eventually(Duration::from_secs(3), || redis
            .keys("lock:{storm}")
            .is_empty())
        .await,
        "every permit came back: {:?}",
        redis.cmd(&["ZRANGE", "lock:{storm}", "0", "-1"])
    );
    assert_eq!(b.held_locks(), 0);
    common::assert_unsubscribed(&redis).await;
    assert_eq!(b.semaphore("storm", 2).available().await.unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_typed_error_and_changes_nothing() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let sem = a.semaphore("strict", 2);
    for permits in [0, 3] {
        match sem.acquire_many(permits, LockOptions::new()).await {
            Err(LockError::InvalidPermits {
                requested,
                capacity,
                ..
            }) => assert_eq!((requested, capacity), (permits, 2)),
            other => panic!("{permits} permits: {other:?}"),
        }
    }
    // A stored capacity is the one in force.
    sem.set_capacity(1).await.unwrap();
    let err = sem.acquire_many(2, LockOptions::new()).await.unwrap_err();
    assert!(
        matches!(err, LockError::InvalidPermits { capacity: 1, .. }),
        "{err:?}"
    );
    sem.reset_capacity().await.unwrap();
    assert!(
        redis.keys("lock:*").is_empty(),
        "{:?}",
        redis.keys("lock:*")
    );

    // A name that holds a mutex is not a semaphore (and the mutex is untouched).
    let mutex = a.lock("shared-name").acquire().await.unwrap();
    let err = a.semaphore("shared-name", 5).acquire().await.unwrap_err();
    assert!(
        matches!(&err, LockError::ForeignData { found, .. } if found == "string"),
        "{err:?}"
    );
    assert!(matches!(
        a.semaphore("shared-name", 5).available().await,
        Err(LockError::ForeignData { .. })
    ));
    mutex.release().await.unwrap();

    // Foreign data at the semaphore's own keys is reported, never overwritten.
    redis.cmd(&["SET", "lock:{foreign}", "user data"]);
    let err = a.semaphore("foreign", 1).acquire().await.unwrap_err();
    assert!(matches!(&err, LockError::ForeignData { found, .. } if found == "string"));
    redis.cmd(&["SET", "lock:{odd}:capacity", "ten"]);
    let err = a.semaphore("odd", 1).acquire().await.unwrap_err();
    assert!(matches!(err, LockError::ForeignData { .. }), "{err:?}");
    let err = a.semaphore("odd", 1).set_capacity(3).await.unwrap_err();
    assert!(matches!(err, LockError::ForeignData { .. }), "{err:?}");
    assert_eq!(
        redis.cmd(&["GET", "lock:{foreign}"]).text(),
        Some("user data")
    );
    assert_eq!(
        redis.cmd(&["GET", "lock:{odd}:capacity"]).text(),
        Some("ten")
    );

    // Inside a permit's scope the same semaphore re-enters; a mutex of that name does not.
    let permit = a.semaphore("scoped", 1).acquire().await.unwrap();
    permit
        .scope(async {
            let again = a.semaphore("scoped", 1).acquire().await.unwrap();
            assert!(again.is_reentrant());
            let err = a.lock("scoped").acquire().await.unwrap_err();
            assert!(matches!(err, LockError::WouldDeadlock { .. }), "{err:?}");
        })
        .await;
    permit.release().await.unwrap();
}

/// The library function whose name ends in `_{stem}` (a client loaded the library first).
pub(crate) fn function_named(redis: &RedisServer, stem: &str) -> String {
    fn find(resp: &lock_tests::Resp, suffix: &str) -> Option<String> {
        if let Some(text) = resp.text() {
            return text.ends_with(suffix).then(|| text.to_owned());
        }
        resp.items().iter().find_map(|r| find(r, suffix))
    }
    find(&redis.cmd(&["FUNCTION", "LIST"]), &format!("_{stem}"))
        .unwrap_or_else(|| panic!("no function for {stem}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retaken_acquire_is_granted_after_the_capacity_went_below_its_permits() {
    // An acquire was granted but its reply was lost; an operator lowered the capacity; the
    // client's retry (the same owner id) must learn that it holds, not that it asked too much
    // (it would drop its clean-up and leave the permits held for a whole lease).
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let sem = a.semaphore("retake", 3);
    let held = sem.acquire_many(3, LockOptions::new()).await.unwrap();
    let members = redis.cmd(&["ZRANGE", "lock:{retake}", "0", "-1"]);
    let owner = members.items()[0].text().unwrap().to_owned();
    sem.set_capacity(2).await.unwrap();
    let function = function_named(&redis, "semaphore_acquire");
    let retry = redis.cmd(&[
        "FCALL",
        &function,
        "3",
        "lock:{retake}",
        "lock:{retake}:fence",
        "lock:{retake}:capacity",
        &owner,
        "30000",
        "60000",
        "3",
    ]);
    assert_eq!(
        retry.items().first().and_then(|r| r.int()),
        Some(1),
        "{retry:?}"
    );
    // A new owner asking for more than the capacity is still refused.
    let err = sem.acquire_many(3, LockOptions::new()).await.unwrap_err();
    assert!(
        matches!(err, LockError::InvalidPermits { capacity: 2, .. }),
        "{err:?}"
    );
    held.release().await.unwrap();
    assert_eq!(redis.cmd(&["EXISTS", "lock:{retake}"]).int(), Some(0));
}
