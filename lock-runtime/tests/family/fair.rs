//! Fair locks against a real redis-server: a queue that heals itself (dead and cancelled
//! waiters), directed wake-ups. First come, first served across clients with increasing tokens
//! is a shared behaviour test (`behaviour/family.rs`).

use crate::common;

use std::time::{Duration, Instant};

use lock_runtime::{LockError, LockOptions, MultiLock};
use lock_tests::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_only_the_next_waiter_and_at_once() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let held = a.fair_lock("turn").acquire().await.unwrap();
    let before = redis.script_calls();
    let mut waiters = Vec::new();
    for _ in 0..5 {
        let lock = b.fair_lock("turn");
        waiters.push(tokio::spawn(async move {
            let g = lock.acquire().await.unwrap();
            let at = Instant::now();
            (g, at)
        }));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let queued = redis.script_calls();
    let released = Instant::now();
    held.release().await.unwrap();
    let (next, at) = tokio::time::timeout(Duration::from_secs(2), waiters.remove(0))
        .await
        .unwrap()
        .unwrap();
    assert!(
        at - released < Duration::from_secs(1),
        "{:?}",
        at - released
    );
    // The release and the one waiter whose turn it was: nobody else woke to try.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = redis.script_calls();
    assert!(queued - before >= 5);
    assert!(
        after - queued <= 3,
        "{} scripts for one hand-over",
        after - queued
    );
    drop(next);
    for waiter in waiters {
        drop(waiter.await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_waiters_place_expires_and_the_queue_moves_on() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    // A waiter that queued and died: its place ends in 1 s and nobody refreshes it.
    let now_ms = redis.time_ms();
    redis.cmd(&["ZADD", "lock:{jam}:queue", "1", "dead:1"]);
    redis.cmd(&[
        "ZADD",
        "lock:{jam}:places",
        &(now_ms + 1000).to_string(),
        "dead:1",
    ]);
    let start = Instant::now();
    let guard = a
        .fair_lock("jam")
        .try_acquire(Duration::from_secs(10))
        .await
        .unwrap();
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(800), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    guard.release().await.unwrap();
    assert!(
        redis
            .keys("lock:{jam}:*")
            .iter()
            .all(|k| k.ends_with(":fence"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_or_timed_out_waiter_leaves_the_queue_at_once() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let c = common::client(&redis).await;
    let held = a.fair_lock("line").acquire().await.unwrap();
    let first = tokio::spawn(async move { b.fair_lock("line").acquire().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let timed_out = c
        .fair_lock("line")
        .try_acquire(Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(timed_out.is_busy());
    let last = {
        let c = c.clone();
        tokio::spawn(async move { c.fair_lock("line").acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.abort();
    let _ = first.await;
    assert!(
        common::eventually(Duration::from_secs(1), || redis
            .cmd(&["ZCARD", "lock:{line}:queue"])
            .int()
            == Some(1))
        .await,
        "only the last waiter is left in the queue"
    );
    let released = Instant::now();
    held.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(10), last)
        .await
        .expect("the next live waiter gets it")
        .unwrap()
        .unwrap();
    // Had the cancelled waiter kept its place, the lock would have waited for that place to
    // lapse (5 s) before the last waiter's turn.
    assert!(released.elapsed() < Duration::from_millis(2500));
    guard.release().await.unwrap();
    assert_eq!(c.held_locks(), 0);
    common::assert_unsubscribed(&redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_wait_keeps_its_place() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let c = common::client(&redis).await;
    let held = a.fair_lock("long").acquire().await.unwrap();
    let early = tokio::spawn(async move { b.fair_lock("long").acquire().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let late = tokio::spawn(async move { c.fair_lock("long").acquire().await.unwrap() });
    // Longer than a place lasts unless refreshed (5 s).
    tokio::time::sleep(Duration::from_millis(6500)).await;
    held.release().await.unwrap();
    let early = tokio::time::timeout(Duration::from_secs(2), early)
        .await
        .unwrap()
        .unwrap();
    assert!(!late.is_finished(), "the later waiter stays behind");
    early.release().await.unwrap();
    let late = tokio::time::timeout(Duration::from_secs(2), late)
        .await
        .unwrap()
        .unwrap();
    late.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_in_the_queue_is_a_typed_error() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    redis.cmd(&["SET", "lock:{odd}:queue", "mine"]);
    let err = a
        .fair_lock("odd")
        .acquire_with(LockOptions::new().wait(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::ForeignData { found, .. } if found == "string"),
        "{err:?}"
    );
    assert_eq!(redis.cmd(&["GET", "lock:{odd}:queue"]).text(), Some("mine"));
    // A plain mutex and a fair lock of one name exclude each other (across processes: within
    // one client, the plain lock is refused outright, see below).
    let b = common::client(&redis).await;
    let fair = a.fair_lock("both").acquire().await.unwrap();
    assert!(
        b.lock("both")
            .try_acquire(Duration::ZERO)
            .await
            .unwrap_err()
            .is_busy()
    );
    fair.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiter_whose_turn_it_was_wakes_the_next_when_it_leaves_behind_a_dead_one() {
    use futures_util::StreamExt;
    // Queue: a dead waiter (its place ended) ahead of `turn`, then `next`; the lock is free.
    // `turn` is the waiter whose turn it is; when it leaves, the release must wake `next` by
    // name, not leave it to its refresh timer because the raw head of the queue was the dead one.
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    // Loads the library.
    a.fair_lock("turns")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let now_ms = redis.time_ms();
    let alive = (now_ms + 60_000).to_string();
    redis.cmd(&[
        "ZADD",
        "lock:{turns}:queue",
        "1",
        "dead:1",
        "2",
        "turn:1",
        "3",
        "next:1",
    ]);
    redis.cmd(&[
        "ZADD",
        "lock:{turns}:places",
        &(now_ms - 1).to_string(),
        "dead:1",
        &alive,
        "turn:1",
        &alive,
        "next:1",
    ]);
    let client = redis::Client::open(redis.url()).unwrap();
    let mut unlocks = client.get_async_pubsub().await.unwrap();
    unlocks.subscribe("lock:{turns}:unlock").await.unwrap();
    let function = crate::semaphore::function_named(&redis, "fair_release");
    let reply = redis.cmd(&[
        "FCALL",
        &function,
        "4",
        "lock:{turns}",
        "lock:{turns}:unlock",
        "lock:{turns}:queue",
        "lock:{turns}:places",
        "turn:1",
    ]);
    assert_eq!(reply.items().first().and_then(|r| r.int()), Some(0));
    let message = tokio::time::timeout(Duration::from_secs(5), unlocks.on_message().next())
        .await
        .expect("the next waiter is woken by name")
        .unwrap();
    assert_eq!(message.get_payload::<String>().unwrap(), "next:1");
    let queue = redis.cmd(&["ZRANGE", "lock:{turns}:queue", "0", "-1"]);
    assert_eq!(queue.items().len(), 1, "{queue:?}");
    assert_eq!(queue.items()[0].text(), Some("next:1"));
}

/// Regression: `lock(name)` next to `fair_lock(name)` in one client took the lock ahead of the
/// fair lock's queue. While the client uses a name as one of them (a handle, guard or waiter
/// lives), an acquisition through the other is refused with a typed error, in both directions;
/// nothing reaches Redis. Reading the lock through either handle still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_skip_a_fair_queue_with_a_plain_lock_of_the_same_name() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;

    // A holder in another process and a waiter of `a` in the queue.
    let turn = b.fair_lock("drop:1").acquire().await.unwrap();
    let fair = a.fair_lock("drop:1");
    let queued = fair.clone();
    let waiter = tokio::spawn(async move { queued.acquire().await });
    assert!(lock_tests::until_info(&fair, |i| i.waiters.queued == 1).await);

    // (Bounded: before the fix it waited for the lock, and would have taken it ahead of the
    // queued waiter once `b` released it.)
    let err = a
        .lock("drop:1")
        .try_acquire(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Unsupported { name, .. } if name == "drop:1"),
        "{err:?}"
    );
    assert!(a.lock("drop:1").info().await.unwrap().is_some());
    assert_eq!(
        MultiLock::new([a.lock("drop:1"), a.lock("other")])
            .map(drop)
            .unwrap_err()
            .to_string(),
        err.to_string()
    );

    turn.release().await.unwrap();
    let mine = lock_tests::granted(waiter).await;
    mine.release().await.unwrap();
    drop(fair);

    // The other way round: a plain lock in use, then a fair lock of the same name.
    let plain = a.lock("stock:7").acquire().await.unwrap();
    let err = a
        .fair_lock("stock:7")
        .try_acquire(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Unsupported { .. }), "{err:?}");
    plain.release().await.unwrap();

    // Once nothing of the client uses the name any more, it may be used as the other kind.
    let fair_now = a.fair_lock("stock:7").acquire().await.unwrap();
    fair_now.release().await.unwrap();
}
