//! Semaphores against a real redis-server: the permit limit across clients, wake-ups, permit
//! leases, capacity changes, cancellation and bad input.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::{LockError, LockOptions};
use lock_tests::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_holders_than_permits_across_clients() {
    const CAPACITY: usize = 3;
    let redis = RedisServer::start();
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = common::client(&redis).await;
        for _ in 0..4 {
            let sem = client.semaphore("supplier", CAPACITY as u32);
            let (inside, most) = (inside.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let permit = sem.acquire().await.unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.unwrap();
                }
            }));
        }
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("all permits taken and returned in time")
            .unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= CAPACITY, "{most} holders at once");
    assert_eq!(most, CAPACITY, "the capacity was used in full");
    assert!(redis.keys("lock:{supplier}").is_empty(), "no permit left");
    common::assert_unsubscribed(&redis).await;
}

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
async fn a_release_of_several_permits_wakes_as_many_waiters() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let sem = a.semaphore("bulk", 3);
    let held = sem.acquire_many(3, LockOptions::new()).await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 0);
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let client = common::client(&redis).await;
        waiters.push(tokio::spawn(async move {
            client.semaphore("bulk", 3).acquire().await.unwrap()
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.unwrap();
    let mut permits = Vec::new();
    for waiter in waiters {
        permits.push(
            tokio::time::timeout(Duration::from_secs(2), waiter)
                .await
                .expect("each waiter woken by the one release")
                .unwrap(),
        );
    }
    assert_eq!(sem.available().await.unwrap(), 0);
    drop(permits);
    assert!(
        common::eventually(Duration::from_secs(2), || redis
            .keys("lock:{bulk}")
            .is_empty())
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_for_several_permits_does_not_swallow_a_smaller_ones_wake_up() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let sem = a.semaphore("mixed", 2);
    let first = sem.acquire().await.unwrap();
    let second = sem.acquire().await.unwrap();
    // Same client: one release message wakes one of its waiters.
    let big = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire_many(2, LockOptions::new()).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let small = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.release().await.unwrap();
    let small = tokio::time::timeout(Duration::from_secs(2), small)
        .await
        .expect("the one free permit reached the waiter it suits")
        .unwrap()
        .unwrap();
    assert!(!big.is_finished());
    small.release().await.unwrap();
    second.release().await.unwrap();
    let big = tokio::time::timeout(Duration::from_secs(2), big)
        .await
        .expect("two free permits reach the bigger waiter")
        .unwrap()
        .unwrap();
    assert_eq!(big.permits(), 2);
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
async fn the_capacity_changes_at_run_time_for_every_client() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let sem_a = a.semaphore("elastic", 1);
    let sem_b = b.semaphore("elastic", 1);
    let held = sem_a.acquire().await.unwrap();
    let waiter = tokio::spawn(async move { sem_b.acquire().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    sem_a.set_capacity(2).await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("a capacity raise wakes the waiter")
        .unwrap();
    assert_eq!(sem_a.capacity().await.unwrap(), 2);
    assert_eq!(sem_a.available().await.unwrap(), 0);
    // Lowered below what is held: holders keep their permits, newcomers wait.
    sem_a.set_capacity(1).await.unwrap();
    assert_eq!(sem_a.available().await.unwrap(), 0);
    let err = sem_a.try_acquire(Duration::ZERO).await.unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    sem_a.reset_capacity().await.unwrap();
    assert_eq!(sem_a.capacity().await.unwrap(), 1);
    assert!(redis.keys("lock:{elastic}:capacity").is_empty());
    held.release().await.unwrap();
    second.release().await.unwrap();
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
        matches!(&err, LockError::ForeignData { found, .. } if found == "hash"),
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
