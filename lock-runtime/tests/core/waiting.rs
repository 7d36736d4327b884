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
    // Fenced, so that a script call (which loads the library of functions) ran before.
    let _held = a.lock("once").fenced().acquire().await.unwrap();
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

/// A release publishes the unlock message only when someone waits: a waiting attempt that
/// finds the mutex held marks it, and the release that finds the mark publishes. Uncontended
/// pairs publish nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_publishes_only_when_someone_waits() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let published = || redis.command_calls("publish");
    for _ in 0..10 {
        a.lock("quiet")
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    assert_eq!(published(), 0, "nobody waited: no message");

    // A waiter of another client: the release publishes, and wakes it long before the
    // holder's 30 s lease would have.
    let held = a.lock("quiet").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("quiet").acquire().await }
    });
    assert!(
        common::eventually(Duration::from_secs(5), || redis
            .cmd(&["GET", "lock:{quiet}"])
            .text()
            .is_some_and(|v| v.ends_with('!')))
        .await,
        "the waiting attempt marks the lock"
    );
    held.release().await.unwrap();
    assert_eq!(published(), 1);
    let taken = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the message, not the lease's end")
        .unwrap()
        .unwrap();
    // Nobody waits any more: its release is silent again.
    taken.release().await.unwrap();
    assert_eq!(published(), 1);
}

/// Waiters of three clients on one lock, each holding for a long lease: every release wakes
/// the next one by its message. The mark a waiter leaves goes with the hold it marked, so a
/// waiter that takes the lock while others still wait marks it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_release_in_a_queue_of_clients_wakes_the_next_waiter() {
    let redis = RedisServer::start();
    let clients = [
        common::client(&redis).await,
        common::client(&redis).await,
        common::client(&redis).await,
        common::client(&redis).await,
    ];
    let started = Instant::now();
    let first = clients[0].lock("queue").acquire().await.unwrap();
    let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
    for locks in &clients[1..] {
        let (locks, done_tx) = (locks.clone(), done_tx.clone());
        tokio::spawn(async move {
            let guard = locks.lock("queue").acquire().await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            guard.release().await.unwrap();
            done_tx.send(()).unwrap();
        });
    }
    // Every waiter subscribed (and so made its marking attempt).
    let subscribers = || {
        redis
            .cmd(&["PUBSUB", "NUMSUB", "lock:{queue}:unlock"])
            .items()[1]
            .int()
    };
    assert!(common::eventually(Duration::from_secs(5), || subscribers() == Some(3)).await);
    first.release().await.unwrap();
    for _ in 0..3 {
        done.recv().await.unwrap();
    }
    // Four holds of 30 s leases, each woken by its predecessor's message: far less than one
    // lease in all (a missed message would cost a waiter the whole 30 s).
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "{:?}",
        started.elapsed()
    );
    // Three releases with a waiter behind; the last one's publishes only if the grant still
    // counted a subscription its predecessor was dropping.
    let published = redis.command_calls("publish");
    assert!((3..=4).contains(&published), "{published}");
}
