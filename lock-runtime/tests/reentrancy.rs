//! Reentrancy follows structure: nested scopes re-enter, siblings and spawned tasks exclude.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_runtime::LockError;
use lock_tests::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_acquire_inside_the_scope_reenters_without_a_round_trip() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let outer = locks.lock("nest").acquire().await.unwrap();
    let before = redis.command_calls("evalsha");
    let (token, reentrant) = outer
        .scope(async {
            let inner = locks
                .lock("nest")
                .try_acquire(Duration::from_millis(100))
                .await
                .unwrap();
            // Deeper still.
            let deeper = inner
                .scope(async { locks.lock("nest").acquire().await.unwrap() })
                .await;
            assert!(deeper.is_reentrant());
            let res = (inner.fencing_token(), inner.is_reentrant());
            inner.release().await.unwrap(); // releases nothing
            res
        })
        .await;
    assert!(reentrant);
    assert_eq!(token, outer.fencing_token());
    assert_eq!(
        redis.command_calls("evalsha"),
        before,
        "re-entry must not touch Redis"
    );
    assert_eq!(locks.stats().reentries, 2);
    assert_eq!(locks.stats().acquisitions, 1);
    // The inner release left the outer hold intact.
    assert!(locks.lock("nest").is_locked().await.unwrap());
    outer.release().await.unwrap();
    assert!(!locks.lock("nest").is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joined_siblings_taking_the_same_key_exclude_each_other() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let inside = AtomicUsize::new(0);
    let max_inside = AtomicUsize::new(0);
    let branch = || async {
        for _ in 0..10 {
            let guard = locks.lock("sibling").acquire().await.unwrap();
            guard
                .scope(async {
                    let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_inside.fetch_max(n, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
                .await;
            guard.release().await.unwrap();
        }
    };
    tokio::join!(branch(), branch());
    assert_eq!(max_inside.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::async_yields_async)] // the scope returns the spawned task's handle on purpose
async fn a_spawned_task_is_a_new_owner_and_waits_for_the_holder() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let guard = locks.lock("spawn").acquire().await.unwrap();
    let released = Arc::new(AtomicUsize::new(0));
    let child = guard
        .scope(async {
            let locks = locks.clone();
            let released = released.clone();
            // Spawned from inside the scope, yet not part of it.
            tokio::spawn(async move {
                let g = locks.lock("spawn").acquire().await.unwrap();
                assert!(!g.is_reentrant());
                assert_eq!(
                    released.load(Ordering::SeqCst),
                    1,
                    "got the lock before release"
                );
                g.release().await.unwrap();
            })
        })
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!child.is_finished());
    released.store(1, Ordering::SeqCst);
    guard.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), child)
        .await
        .expect("the spawned task got the lock after release")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_is_another_owner_even_inside_the_scope() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let guard = a.lock("two-clients").acquire().await.unwrap();
    let res = guard
        .scope(b.lock("two-clients").try_acquire(Duration::from_millis(50)))
        .await;
    assert!(matches!(res, Err(LockError::WaitTimeout { .. })), "{res:?}");
}

/// Regression: `LockGuard::run` held a `watch` borrow across an await, so its future was not
/// `Send` and could not be spawned (found by the chaos worker).
#[test]
fn lock_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    fn check(lock: lock_runtime::Lock, guard: lock_runtime::LockGuard) {
        assert_send(&lock.acquire());
        assert_send(&lock.is_locked());
        assert_send(&guard.lost());
        assert_send(&guard.run(async {}));
        assert_send(&guard.scope(async {}));
        assert_send(&guard.release());
    }
    let _ = check;
}

/// A waiting task must stay small (benchmark target: ≤ 2 KiB per waiting task, task included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acquire_future_is_small() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let lock = locks.lock("size");
    let size = std::mem::size_of_val(&lock.acquire());
    println!("acquire future: {size} bytes");
    assert!(size <= 1024, "acquire future is {size} bytes");
}

/// Regression: a scoped future built outside another guard's scope but awaited inside it lost
/// the outer lock (the parent frame was captured when the future was built; found by MultiLock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_nest_by_where_they_run_not_where_they_were_built() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let a = locks.lock("outer-a").acquire().await.unwrap();
    let b = locks.lock("outer-b").acquire().await.unwrap();
    let inner = b.scope(async {
        let ga = locks
            .lock("outer-a")
            .try_acquire(Duration::ZERO)
            .await
            .unwrap();
        let gb = locks
            .lock("outer-b")
            .try_acquire(Duration::ZERO)
            .await
            .unwrap();
        (ga.is_reentrant(), gb.is_reentrant())
    });
    assert_eq!(a.scope(inner).await, (true, true));
    a.release().await.unwrap();
    b.release().await.unwrap();
}
