//! Reentrancy: futures are `Send` and small, scopes nest by where they run. Re-entry in a scope, siblings and spawned tasks excluding each other are shared
//! behaviour tests (`behaviour/mod.rs`).

use crate::common;

use std::time::Duration;

use lock_tests::RedisServer;

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

/// Code inside a scope reaches the hold it runs under without naming the lock again
/// (`TokenHandle::current`, what a `#[distributed_lock]` body uses), innermost first; outside
/// any scope there is none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_inside_a_scope_reaches_its_hold_without_its_name() {
    use lock_runtime::TokenHandle;
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    assert!(TokenHandle::current().is_none());
    let outer = locks.lock("outer").acquire().await.unwrap();
    let inner = locks.lock("inner").acquire().await.unwrap();
    outer
        .scope(async {
            assert_eq!(TokenHandle::current().unwrap().name(), "outer");
            inner
                .scope(async {
                    let here = TokenHandle::current().unwrap();
                    assert_eq!(here.name(), "inner");
                    let token = here.fencing_token().await.unwrap();
                    assert_eq!(inner.issued_token(), Some(token), "the same hold");
                    let names: Vec<String> = TokenHandle::scoped()
                        .iter()
                        .map(|h| h.name().to_owned())
                        .collect();
                    assert_eq!(names, ["inner", "outer"]);
                })
                .await;
        })
        .await;
    // A spawned task is outside the scope it was spawned from.
    let spawned = outer
        .scope(async { tokio::spawn(async { TokenHandle::current().is_none() }).await })
        .await
        .unwrap();
    assert!(spawned);
    assert!(TokenHandle::scoped().is_empty());
}
