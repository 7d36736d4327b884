//! Bad input and a misbehaving Redis: typed errors, nothing lost, nothing panics.

use crate::common;

use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, LossReason, MAX_NAME_LEN};
use lock_tests::{RedisServer, TcpProxy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_flushed_mid_run_are_reloaded() {
    let redis = RedisServer::start();
    // The watchdog reloads its script too.
    common::lock_through_flushes(&redis, &["SCRIPT", "FLUSH"]).await;
}

/// A holder whose server restarted empty (no persistence) while it held, and whose lock a
/// rival then took, releases at once, on its broken connection, before its watchdog has seen
/// the restart: the release never says "it was ours" (`Ok`). Its first request failed after it
/// may have run, and the retry found the lock not ours: `ReleaseUnconfirmed` (or `NotOwner`,
/// had the client known its connection to be new), and the rival's lock is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_a_restart_without_persistence_never_reports_it_was_ours() {
    let mut redis = RedisServer::start();
    // The default watchdog: its first renewal is 10 s away, long after the release.
    let a = LockClient::builder(&redis.url())
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let stale = a.lock("n").acquire().await.unwrap();
    redis.restart_empty();
    let b = common::client(&redis).await;
    let rival = b.lock("n").acquire().await.unwrap();
    let err = stale.release().await.unwrap_err();
    assert!(
        matches!(
            err,
            LockError::ReleaseUnconfirmed { .. } | LockError::NotOwner { .. }
        ),
        "{err:?}"
    );
    assert_eq!(
        redis.mutex_holder("lock:{n}").as_deref(),
        Some(rival.owner()),
        "the rival's lock is untouched"
    );
    rival.release().await.unwrap();
}

/// A release that ran on the server but whose reply was cut (the connection closed before it
/// came back) is retried with the same owner id and finds the lock gone: it cannot tell that
/// from a loss before the release, so it says `ReleaseUnconfirmed`, never `Ok`, and the lock
/// is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_is_cut_is_unconfirmed_and_leaves_the_lock_free() {
    let redis = RedisServer::start();
    let upstream = format!("127.0.0.1:{}", redis.port()).parse().unwrap();
    let proxy = TcpProxy::start(upstream).await.unwrap();
    let locks = LockClient::builder(&proxy.url())
        .response_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    // The release's function loaded first (a call that finds none loads it: a reply).
    let warm = locks.lock("warm").acquire().await.unwrap();
    warm.release().await.unwrap();
    let guard = locks.lock("cut").acquire().await.unwrap();
    let source = proxy.sources()[0];
    // Requests pass, replies are held.
    proxy.set_black_hole_from(source, false, true);
    let release = tokio::spawn(guard.release());
    assert!(
        common::eventually(Duration::from_secs(5), || redis
            .mutex_holder("lock:{cut}")
            .is_none())
        .await,
        "the release ran on the server"
    );
    // Its reply is dropped with the connection.
    proxy.cut_from(source);
    proxy.set_black_hole_from(source, false, false);
    let err = release.await.unwrap().unwrap_err();
    assert!(
        matches!(err, LockError::ReleaseUnconfirmed { .. }),
        "{err:?}"
    );
    assert_eq!(redis.mutex_holder("lock:{cut}"), None);
    assert!(
        locks.lock("cut").try_acquire(Duration::ZERO).await.is_ok(),
        "free for the next holder"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_while_held_reports_lost_and_locking_works_again() {
    let mut redis = RedisServer::start();
    let locks = LockClient::builder(&redis.url())
        .watchdog_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let guard = locks.lock("restart").acquire().await.unwrap();
    let before = guard.fencing_token().await.unwrap();
    redis.restart();
    let err = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost() fires");
    assert!(
        matches!(
            err,
            LockError::Lost {
                reason: LossReason::Deleted | LossReason::RenewalFailed,
                ..
            }
        ),
        "{err:?}"
    );
    // Acquiring works again once Redis is back (the connection is re-established).
    let mut got = None;
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.is_none() && Instant::now() < deadline {
        match locks
            .lock("restart")
            .try_acquire(Duration::from_millis(500))
            .await
        {
            Ok(g) => got = Some(g),
            Err(e) => {
                assert!(e.is_unavailable(), "{e:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let g = got.expect("acquire works after the restart");
    assert!(
        g.fencing_token().await.unwrap() > before,
        "tokens increase across a restart"
    );
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_at_a_lock_key_is_a_typed_error_and_is_left_alone() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    redis.cmd(&["SET", "lock:{foreign}", "not a lock"]);
    let err = locks
        .lock("foreign")
        .try_acquire(Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::ForeignData { key, found } if key == "lock:{foreign}" && found == "string"),
        "{err:?}"
    );
    assert!(matches!(
        locks.lock("foreign").is_locked().await,
        Err(LockError::ForeignData { .. })
    ));
    assert!(matches!(
        locks.lock("foreign").force_unlock().await,
        Err(LockError::ForeignData { .. })
    ));
    assert_eq!(
        redis.cmd(&["GET", "lock:{foreign}"]).text(),
        Some("not a lock")
    );
}

/// Foreign data at the fencing counter of a free lock: a fenced acquire (which takes a free lock
/// in the step that reads it, then issues the token) and a first attempt without a token both
/// report it, and the refused grant is taken back: the lock stays free and the counter keeps
/// its data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_grant_refused_by_foreign_data_at_the_counter_leaves_the_lock_free() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    redis.cmd(&["SET", "lock:{counter}:fence", "not a counter"]);
    for attempt in [Duration::ZERO, Duration::from_millis(100)] {
        let err = locks
            .lock("counter")
            .fenced()
            .try_acquire(attempt)
            .await
            .unwrap_err();
        // (The error names the lock's key: the scripts' reply does not say which key held it.)
        assert!(
            matches!(&err, LockError::ForeignData { found, .. } if found == "string"),
            "{err:?}"
        );
        assert_eq!(redis.mutex_holder("lock:{counter}"), None, "taken back");
    }
    assert_eq!(
        redis.cmd(&["GET", "lock:{counter}:fence"]).text(),
        Some("not a counter")
    );
    // A first attempt without a token reads the counter too (it could hold turns): refused,
    // and taken back the same way.
    let err = locks
        .lock("counter")
        .try_acquire(Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(&err, LockError::ForeignData { .. }), "{err:?}");
    assert_eq!(redis.mutex_holder("lock:{counter}"), None, "taken back");
}

/// A hold whose key was overwritten with foreign data while it was held: the release reports
/// the data's type and leaves it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_a_lock_overwritten_with_foreign_data_is_a_typed_error() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    for (kind, write) in [
        ("string", vec!["SET", "lock:{overwritten}", "not a lock"]),
        ("list", vec!["RPUSH", "lock:{overwritten}", "not a lock"]),
    ] {
        let guard = locks.lock("overwritten").acquire().await.unwrap();
        redis.cmd(&["DEL", "lock:{overwritten}"]);
        redis.cmd(&write);
        let err = guard.release().await.unwrap_err();
        assert!(
            matches!(&err, LockError::ForeignData { key, found } if key == "lock:{overwritten}" && found == kind),
            "{err:?}"
        );
        assert_eq!(
            redis.cmd(&["TYPE", "lock:{overwritten}"]).text(),
            Some(kind)
        );
        redis.cmd(&["DEL", "lock:{overwritten}"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_hash_without_ttl_does_not_make_waiting_unbounded() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    redis.cmd(&["HSET", "lock:{immortal}", "someone-else", "1"]);
    let start = Instant::now();
    let err = locks
        .lock("immortal")
        .try_acquire(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(err.is_busy());
    assert!(start.elapsed() < Duration::from_secs(2));
    assert_eq!(locks.lock("immortal").remaining_ttl().await.unwrap(), None);
    // A waiter without a deadline still retries on its own (bounded sleeps), so it gets the
    // lock once the foreign hash is removed even without an unlock message.
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("immortal").acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    redis.cmd(&["DEL", "lock:{immortal}"]);
    let g = tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_fails_within_the_connect_timeout() {
    let redis = RedisServer::start();
    let url = redis.url();
    drop(redis); // nothing listens there any more
    let start = Instant::now();
    let err = LockClient::builder(&url)
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_gives_unavailable_errors_not_panics() {
    let mut redis = RedisServer::start();
    let locks = common::client(&redis).await;
    redis.stop();
    let err = locks
        .lock("down")
        .try_acquire(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(
        std::error::Error::source(&err).is_some(),
        "the redis error is kept as source"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_names_and_settings_are_rejected_clearly() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    for name in [
        String::new(),
        "x".repeat(MAX_NAME_LEN + 1),
        "bad\nname".into(),
    ] {
        let err = locks.lock(&name).acquire().await.unwrap_err();
        assert!(matches!(err, LockError::InvalidName { .. }), "{err:?}");
        assert!(matches!(
            locks.lock(&name).is_locked().await,
            Err(LockError::InvalidName { .. })
        ));
    }
    let err = locks
        .lock("ok")
        .acquire_with(lock_runtime::LockOptions::new().lease(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");
    for builder in [
        LockClient::builder(&redis.url()).prefix("a{b}"),
        LockClient::builder(&redis.url()).watchdog_timeout(Duration::from_millis(1)),
        LockClient::builder("not a url"),
    ] {
        let err = builder.build().await.unwrap_err();
        assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");
    }
    assert!(redis.keys("*").is_empty(), "nothing was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_acquire_is_reconciled_not_reported_as_not_acquired() {
    let redis = RedisServer::start();
    let locks = LockClient::builder(&redis.url())
        .response_timeout(Duration::from_millis(150))
        .build()
        .await
        .unwrap();
    // Freeze Redis so the first attempt times out; it runs once Redis thaws, and the retry
    // with the same owner id must recognise the hold as ours.
    redis.freeze();
    let acquire = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("reconcile").acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    redis.thaw();
    let guard = tokio::time::timeout(Duration::from_secs(3), acquire)
        .await
        .unwrap()
        .unwrap()
        .expect("reconciled into a hold");
    assert_eq!(
        redis.mutex_holder("lock:{reconcile}").as_deref(),
        Some(guard.owner()),
        "exactly our one hold"
    );
    guard.release().await.unwrap();
    assert!(redis.keys("lock:{reconcile}").is_empty());
}
