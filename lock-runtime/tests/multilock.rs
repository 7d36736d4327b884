//! MultiLock: all or nothing, deadlock-free, one loss signal for all.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_runtime::{LockError, MultiLock};
use lock_tests::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_multilocks_in_opposite_order_do_not_deadlock() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let inside = Arc::new(AtomicUsize::new(0));
    let run =
        |locks: lock_runtime::LockClient, names: [&'static str; 2], inside: Arc<AtomicUsize>| {
            tokio::spawn(async move {
                let multi = MultiLock::new(names.map(|n| locks.lock(n))).unwrap();
                for _ in 0..30 {
                    let guard = multi.acquire().await.unwrap();
                    guard
                        .run(async {
                            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "overlap");
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            inside.fetch_sub(1, Ordering::SeqCst);
                        })
                        .await
                        .unwrap();
                    guard.release().await.unwrap();
                }
            })
        };
    let one = run(a, ["acct:1", "acct:2"], inside.clone());
    let two = run(b, ["acct:2", "acct:1"], inside.clone());
    tokio::time::timeout(Duration::from_secs(20), async {
        one.await.unwrap();
        two.await.unwrap();
    })
    .await
    .expect("no deadlock");
    assert!(redis.keys("lock:{acct:*}").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_busy_lock_means_none_is_held() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let other = common::client(&redis).await;
    let _busy = other.lock("m:2").acquire().await.unwrap();
    let multi = MultiLock::new([locks.lock("m:3"), locks.lock("m:1"), locks.lock("m:2")]).unwrap();
    let err = multi
        .try_acquire(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    // m:1 was taken first (sorted order), then given back.
    assert!(!locks.lock("m:1").is_locked().await.unwrap());
    assert!(!locks.lock("m:3").is_locked().await.unwrap());
    assert_eq!(locks.held_locks(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_any_lock_is_a_loss_of_the_multilock() {
    let redis = RedisServer::start();
    let locks = common::client_with_watchdog(&redis, Duration::from_secs(1)).await;
    let multi = MultiLock::new([locks.lock("l:a"), locks.lock("l:b")]).unwrap();
    assert_eq!(multi.locks().len(), 2);
    let guard = multi.acquire().await.unwrap();
    assert_eq!(guard.guards().len(), 2);
    redis.cmd(&["DEL", "lock:{l:b}"]);
    let err = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .unwrap();
    assert!(err.is_lost(), "{err:?}");
    assert!(guard.is_lost());
    let body = guard.run(async { 1 }).await;
    assert!(matches!(body, Err(LockError::Lost { .. })));
    assert!(
        guard.release().await.is_err(),
        "releasing a lost multilock reports it"
    );
    assert!(
        !locks.lock("l:a").is_locked().await.unwrap(),
        "the surviving lock is released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_acquire_of_a_member_reenters_and_bad_input_is_rejected() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let multi = MultiLock::new([locks.lock("n:1"), locks.lock("n:2"), locks.lock("n:1")]).unwrap();
    assert_eq!(multi.locks().len(), 2, "duplicates are taken once");
    let guard = multi.acquire().await.unwrap();
    let inner = guard
        .scope(async { locks.lock("n:2").try_acquire(Duration::ZERO).await })
        .await
        .unwrap();
    assert!(inner.is_reentrant());
    drop(inner);
    guard.release().await.unwrap();
    assert!(matches!(
        MultiLock::new(Vec::new()),
        Err(LockError::InvalidConfig(_))
    ));
    assert!(matches!(
        MultiLock::new([locks.lock("")]),
        Err(LockError::InvalidName { .. })
    ));
}
