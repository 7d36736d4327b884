//! Read/write locks against a real redis-server: crashed and cancelled holders and waiters,
//! renewal, bad input. Shared readers, an exclusive writer, writers first and reentrancy by
//! scope are shared behaviour tests (`behaviour/family.rs`).

use crate::common;

use std::time::{Duration, Instant};

use lock_runtime::{LockError, LockOptions};
use lock_tests::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_reader_blocks_a_writer_for_its_lease_only() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let lease = Duration::from_millis(400);
    let dead = a
        .rw_lock("crashy")
        .read()
        .acquire_with(LockOptions::new().lease(lease))
        .await
        .unwrap();
    let live = a.rw_lock("crashy").read().acquire().await.unwrap();
    std::mem::forget(dead);
    live.release().await.unwrap();
    let start = Instant::now();
    let w = b
        .rw_lock("crashy")
        .write()
        .try_acquire(Duration::from_secs(20))
        .await
        .unwrap();
    let waited = start.elapsed();
    // Held back by the dead reader's own 400 ms lease, not by the 30 s a renewed one has.
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    w.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_gives_up_lets_readers_in_at_once() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let reader = a.rw_lock("shy").read().acquire().await.unwrap();
    // Cancelled while it waits (its claim would otherwise hold readers back for 5 s).
    let writer = tokio::spawn(async move { b.rw_lock("shy").write().acquire().await });
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(redis.cmd(&["ZCARD", "lock:{shy}:writers"]).int(), Some(1));
    writer.abort();
    let _ = writer.await;
    let start = Instant::now();
    let r = a
        .rw_lock("shy")
        .read()
        .try_acquire(Duration::from_secs(20))
        .await
        .unwrap();
    // The claim, had it stayed, would have held readers back for 5 s.
    assert!(
        start.elapsed() < Duration::from_millis(2500),
        "{:?}",
        start.elapsed()
    );
    // And one that timed out.
    let b = common::client(&redis).await;
    let err = b
        .rw_lock("shy")
        .write()
        .try_acquire(Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(err.is_busy());
    assert!(
        common::eventually(Duration::from_secs(1), || redis
            .keys("lock:{shy}:writers")
            .is_empty())
        .await
    );
    reader.release().await.unwrap();
    r.release().await.unwrap();
    common::assert_unsubscribed(&redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_read_and_write_holds() {
    let redis = RedisServer::start();
    let a = common::client_with_watchdog(&redis, Duration::from_millis(300)).await;
    let b = common::client(&redis).await;
    let r = a.rw_lock("long").read().acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!r.is_lost());
    assert!(
        b.rw_lock("long")
            .write()
            .try_acquire(Duration::ZERO)
            .await
            .is_err()
    );
    r.release().await.unwrap();
    let w = a.rw_lock("long").write().acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!w.is_lost());
    assert!(
        b.rw_lock("long")
            .read()
            .try_acquire(Duration::ZERO)
            .await
            .is_err()
    );
    // Forced open: the holder hears of it at its next renewal.
    assert!(b.rw_lock("long").write().force_unlock().await.unwrap());
    let err = tokio::time::timeout(Duration::from_secs(2), w.lost())
        .await
        .expect("loss reported");
    assert!(err.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_of_other_kinds_and_foreign_data_are_typed_errors() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let mutex = a.lock("taken").acquire().await.unwrap();
    for side in [
        a.rw_lock("taken").read().clone(),
        a.rw_lock("taken").write().clone(),
    ] {
        // A mutex is a string.
        let err = side.acquire().await.unwrap_err();
        assert!(
            matches!(&err, LockError::ForeignData { found, .. } if found == "string"),
            "{err:?}"
        );
    }
    mutex.release().await.unwrap();
    let permit = a.semaphore("sem", 1).acquire().await.unwrap();
    // A semaphore's holders are a sorted set too: its permit is not a read hold.
    let err = a.lock("sem").acquire().await.unwrap_err();
    assert!(matches!(err, LockError::ForeignData { .. }), "{err:?}");
    permit.release().await.unwrap();
    redis.cmd(&["RPUSH", "lock:{list}:writers", "x"]);
    let err = a.rw_lock("list").write().acquire().await.unwrap_err();
    assert!(
        matches!(&err, LockError::ForeignData { found, .. } if found == "list"),
        "{err:?}"
    );
    assert_eq!(redis.cmd(&["LLEN", "lock:{list}:writers"]).int(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_died_waiting_holds_readers_back_for_its_claim_only() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let reader = a.rw_lock("stale").read().acquire().await.unwrap();
    // The claim of a writer that died while waiting: it ends in 1 s and nobody refreshes it.
    let now_ms = redis.time_ms();
    redis.cmd(&[
        "ZADD",
        "lock:{stale}:writers",
        &(now_ms + 1000).to_string(),
        "dead:1#w",
    ]);
    let b = common::client(&redis).await;
    let start = Instant::now();
    // The reader's lease is 30 s: only the claim's end lets the new reader in this soon.
    let r = b
        .rw_lock("stale")
        .read()
        .try_acquire(Duration::from_secs(10))
        .await
        .unwrap();
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(800), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    r.release().await.unwrap();
    reader.release().await.unwrap();
}
