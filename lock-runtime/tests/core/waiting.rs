//! Waiting: bounded waits, single attempts, pub/sub wake-up, and surviving a killed
//! subscription connection.

use crate::common;

use std::time::{Duration, Instant};

use lock_runtime::LockOptions;
use lock_tests::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_zero_makes_exactly_one_attempt() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let _held = a.lock("once").acquire().await.unwrap();
    let before = redis.script_calls();
    let err = b
        .lock("once")
        .try_acquire(Duration::ZERO)
        .await
        .unwrap_err();
    assert!(err.is_busy());
    assert_eq!(redis.script_calls() - before, 1);
    assert_eq!(
        redis.command_calls("subscribe"),
        0,
        "one attempt needs no subscription"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_survive_a_killed_subscription_connection() {
    let redis = RedisServer::start();
    let holder_client = common::client(&redis).await;
    let waiters_client = common::client(&redis).await;
    let holder = holder_client
        .lock("killed")
        .acquire_with(LockOptions::new().lease(Duration::from_secs(20)))
        .await
        .unwrap();
    let mut waiters = Vec::new();
    for _ in 0..5 {
        let locks = waiters_client.clone();
        waiters.push(tokio::spawn(async move {
            let g = locks.lock("killed").acquire().await.unwrap();
            let t = Instant::now();
            g.release().await.unwrap();
            t
        }));
    }
    assert!(
        common::eventually(Duration::from_secs(2), || !redis
            .pubsub_channels("lock:*")
            .is_empty())
        .await
    );
    assert!(redis.kill_clients("pubsub") >= 1);
    // The demux resubscribes by itself.
    assert!(
        common::eventually(Duration::from_secs(3), || !redis
            .pubsub_channels("lock:*")
            .is_empty())
        .await,
        "not resubscribed"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    holder.release().await.unwrap();
    for w in waiters {
        let got = tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .unwrap()
            .unwrap();
        assert!(got > released);
    }
    // All five took their turn well before the 20 s lease could have freed the lock.
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "{:?}",
        released.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_of_one_client_share_one_subscription() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let holder = a.lock("shared").acquire().await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..50 {
        let b = b.clone();
        waiters.push(tokio::spawn(async move {
            b.lock("shared")
                .acquire()
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
        }));
    }
    assert!(common::eventually(Duration::from_secs(2), || b.subscribed_channels() == 1).await);
    let subs = redis.cmd(&["PUBSUB", "NUMSUB", "lock:{shared}:unlock"]);
    assert_eq!(
        subs.items()[1].int(),
        Some(1),
        "one subscriber connection for 50 waiters"
    );
    holder.release().await.unwrap();
    for w in waiters {
        tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .unwrap()
            .unwrap();
    }
    common::assert_unsubscribed(&redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_wakes_one_local_waiter_not_the_whole_herd() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let holder = a.lock("herd").acquire().await.unwrap();
    let got = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut waiters = Vec::new();
    for _ in 0..20 {
        let (b, got) = (b.clone(), got.clone());
        waiters.push(tokio::spawn(async move {
            let g = b.lock("herd").acquire().await.unwrap();
            got.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(300)).await;
            g.release().await.unwrap();
        }));
    }
    // Let every waiter make its subscribed attempt and go to sleep.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = redis.script_calls();
    holder.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let calls = redis.script_calls() - before;
    assert_eq!(got.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The release, plus one woken waiter's acquire (a herd would be 21).
    assert!(calls <= 3, "{calls} scripts ran after one release");
    for w in waiters {
        w.abort();
    }
}

/// Finding L4: a waiter whose user may not subscribe to the unlock channel (an ACL without
/// channel permissions) polls every ~100 ms; it used to wait a whole response timeout (here
/// 5 s) for a confirmation before each attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_without_channel_permission_polls_every_100ms() {
    let redis = RedisServer::start();
    redis.cmd(&[
        "ACL",
        "SETUSER",
        "nochannels",
        "on",
        ">pw",
        "~*",
        "resetchannels",
        "+@all",
    ]);
    let holder = common::client(&redis).await;
    let waiter = lock_runtime::LockClient::builder(&format!(
        "redis://nochannels:pw@127.0.0.1:{}",
        redis.port()
    ))
    .response_timeout(Duration::from_secs(5))
    .build()
    .await
    .unwrap();
    let held = holder.lock("acl").acquire().await.unwrap();
    let task = tokio::spawn(async move {
        let g = waiter.lock("acl").acquire().await.unwrap();
        let got = Instant::now();
        // Its release cannot publish either (the script reports the ACL error); not the point.
        drop(g);
        got
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the waiter got the lock")
        .unwrap();
    let after = got.saturating_duration_since(released);
    // Before half the 5 s response timeout it used to wait for each confirmation (nor by a
    // message: it has no channel).
    assert!(
        after < Duration::from_millis(2500),
        "waited {after:?} after the release"
    );
}
