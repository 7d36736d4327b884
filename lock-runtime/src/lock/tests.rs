//! The wait loop and the guard's release against a scripted Redis under paused time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::fake::{FakeRedis, reply};
use crate::{LockClient, LockError, LockOptions, LossReason, MultiLock};

/// A lock that is busy (PTTL 30 s) until `free` is set; releases hang for `release_delay`.
fn lock_server(free: Arc<AtomicBool>, release_delay: Duration) -> FakeRedis {
    FakeRedis::new(move |call| {
        let free = free.clone();
        async move {
            match call.script().as_str() {
                "acquire" if free.load(Ordering::SeqCst) => Ok(reply(1, 5)),
                "acquire" => Ok(reply(0, 30_000)),
                "release" => {
                    tokio::time::sleep(release_delay).await;
                    Ok(reply(1, 0))
                }
                _ => Ok(reply(1, 0)),
            }
        }
    })
}

/// Finding L4: a waiter whose channel cannot be confirmed polls every ~100 ms, not every
/// response timeout (2 s).
#[tokio::test(start_paused = true)]
async fn an_unconfirmable_channel_degrades_to_100ms_polling() {
    let free = Arc::new(AtomicBool::new(false));
    let fake = lock_server(free.clone(), Duration::ZERO).on_subscribe(|_, _| async {
        Err(redis::RedisError::from(std::io::Error::other(
            "NOPERM no permissions to access a channel",
        )))
    });
    let locks = LockClient::builder("redis://fake")
        .response_timeout(Duration::from_secs(2))
        .build_fake(fake.clone())
        .unwrap();
    let start = Instant::now();
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .lock("busy")
                .acquire()
                .await
                .map(|g| (g, Instant::now()))
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    free.store(true, Ordering::SeqCst);
    let (guard, got) = waiter.await.unwrap().unwrap();
    let after_free = got - (start + Duration::from_secs(1));
    assert!(after_free <= Duration::from_millis(200), "{after_free:?}");
    let attempts = fake
        .calls()
        .iter()
        .filter(|c| c.script() == "acquire")
        .count();
    assert!((8..=25).contains(&attempts), "{attempts} attempts in 1 s");
    drop(guard);
}

/// Finding M2: a `release()` dropped while its request is in flight hands the release to the
/// background releaser (which sends it again) and declares the loss signal.
#[tokio::test(start_paused = true)]
async fn a_cancelled_release_is_finished_in_the_background() {
    let fake = lock_server(Arc::new(AtomicBool::new(true)), Duration::from_secs(5));
    let locks = LockClient::builder("redis://fake")
        .build_fake(fake.clone())
        .unwrap();
    let guard = locks.lock("k").acquire().await.unwrap();
    let held = guard.held.clone();
    let cancelled = tokio::time::timeout(Duration::from_millis(50), guard.release()).await;
    assert!(cancelled.is_err(), "the release hangs");
    assert_eq!(held.signal.get(), Some(LossReason::Released));
    assert_eq!(locks.held_locks(), 0);
    tokio::time::sleep(Duration::from_secs(20)).await;
    let releases = fake
        .calls()
        .iter()
        .filter(|c| c.script() == "release")
        .count();
    assert!(releases >= 2, "only {releases} release request(s)");
}

/// Finding L8: once `release()` has started, the guard's scope no longer re-enters, even
/// while the release is still in flight.
#[tokio::test(start_paused = true)]
async fn a_scope_does_not_reenter_while_the_release_is_in_flight() {
    let fake = lock_server(Arc::new(AtomicBool::new(true)), Duration::from_millis(500));
    let locks = LockClient::builder("redis://fake")
        .build_fake(fake)
        .unwrap();
    let guard = locks.lock("k").acquire().await.unwrap();
    let held = guard.held.clone();
    let release = tokio::spawn(guard.release());
    tokio::time::sleep(Duration::from_millis(10)).await;
    let inner = crate::scope::enter(held, async {
        locks
            .lock("k")
            .acquire_with(LockOptions::new().wait(Duration::ZERO))
            .await
    })
    .await;
    assert!(
        matches!(
            inner,
            Err(LockError::Lost {
                reason: LossReason::Released,
                ..
            })
        ),
        "{inner:?}"
    );
    release.await.unwrap().unwrap();
}

/// Finding L2: `Duration::MAX` waits forever instead of panicking, for a lock and a
/// MultiLock.
#[tokio::test(start_paused = true)]
async fn a_wait_of_duration_max_waits_without_a_deadline() {
    let free = Arc::new(AtomicBool::new(false));
    let locks = LockClient::builder("redis://fake")
        .build_fake(lock_server(free.clone(), Duration::ZERO))
        .unwrap();
    let waiters = tokio::spawn({
        let locks = locks.clone();
        async move {
            let one = locks.lock("a").try_acquire(Duration::MAX).await?;
            drop(one);
            let multi = MultiLock::new([locks.lock("b"), locks.lock("c")])?;
            multi.try_acquire(Duration::MAX).await.map(drop)
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    free.store(true, Ordering::SeqCst);
    waiters.await.unwrap().unwrap();
}

/// Finding L2: leases and settings Redis or an `Instant` could not represent are typed errors,
/// and nothing is sent.
#[tokio::test(start_paused = true)]
async fn durations_out_of_range_are_invalid_config() {
    let sent = Arc::new(AtomicUsize::new(0));
    let count = sent.clone();
    let fake = FakeRedis::new(move |_| {
        count.fetch_add(1, Ordering::SeqCst);
        async { Ok(reply(1, 1)) }
    });
    let locks = LockClient::builder("redis://fake")
        .build_fake(fake)
        .unwrap();
    for opts in [
        LockOptions::new().lease(Duration::MAX),
        LockOptions::new().lease(Duration::from_millis(u64::MAX)),
        LockOptions::new().lease(crate::MAX_LEASE + Duration::from_secs(1)),
        LockOptions::new().lease(Duration::from_millis(5)),
        LockOptions::new().max_hold(Duration::MAX),
    ] {
        let err = locks.lock("x").acquire_with(opts).await.unwrap_err();
        assert!(
            matches!(err, LockError::InvalidConfig(_)),
            "{opts:?}: {err:?}"
        );
    }
    assert_eq!(sent.load(Ordering::SeqCst), 0, "nothing was sent");
    let fake = || FakeRedis::new(|_| async { Ok(reply(1, 1)) });
    for builder in [
        LockClient::builder("redis://fake").watchdog_timeout(Duration::MAX),
        LockClient::builder("redis://fake").fence_retention(Duration::MAX),
        LockClient::builder("redis://fake").response_timeout(Duration::MAX),
        LockClient::builder("redis://fake").failover_grace(Duration::MAX),
    ] {
        let err = builder.build_fake(fake()).unwrap_err();
        assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");
    }
}
