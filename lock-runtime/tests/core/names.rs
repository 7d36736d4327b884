//! Lock names: no name can reach another lock's keys.

use crate::common;

use std::time::Duration;

use lock_tests::RedisServer;

/// Regression (L1): the lock `{u}:fence` was the fencing counter of the lock `{u}`, so whoever
/// used one made the other fail with `ForeignData` (a hash where a counter was expected, or the
/// other way round).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_ending_in_fence_is_a_lock_of_its_own() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;

    // "{u}" first: its fencing counter exists, then "{u}:fence" must still be a free lock.
    let u = locks.lock("{u}").acquire().await.expect("{u}");
    let forged = locks
        .lock("{u}:fence")
        .try_acquire(Duration::ZERO)
        .await
        .expect("{u}:fence is a lock of its own, not the fencing counter of {u}");
    assert_ne!(u.key(), forged.key());
    let first = u.fencing_token().await.unwrap();
    u.release().await.expect("release {u}");
    // With "{u}:fence" held, "{u}" keeps working and its tokens keep increasing.
    let again = locks
        .lock("{u}")
        .try_acquire(Duration::ZERO)
        .await
        .expect("{u} again, while {u}:fence is held");
    assert!(again.fencing_token().await.unwrap() > first);
    again.release().await.expect("release {u}");
    forged.release().await.expect("release {u}:fence");

    // The other way round: "{v}:fence" held first, then "{v}" (and "{v}:unlock").
    let forged = locks.lock("{v}:fence").acquire().await.expect("{v}:fence");
    for name in ["{v}", "{v}:unlock"] {
        let guard = locks
            .lock(name)
            .try_acquire(Duration::ZERO)
            .await
            .unwrap_or_else(|e| panic!("{name} while {{v}}:fence is held: {e}"));
        guard.release().await.expect("release");
    }
    forged.release().await.expect("release {v}:fence");
}

/// Names with braces anywhere (L6) work on one server too, each its own lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_braces_anywhere_are_distinct_locks() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let names = [
        "}x", "}", "}}", "}{", "a}{b}", "{}x", "x}", "%7Dx", "{%7Dx}",
    ];
    let mut guards = Vec::new();
    for name in names {
        let guard = locks
            .lock(name)
            .try_acquire(Duration::ZERO)
            .await
            .unwrap_or_else(|e| panic!("{name:?}: {e}"));
        guards.push(guard);
    }
    for guard in guards {
        guard.release().await.expect("release");
    }
}
