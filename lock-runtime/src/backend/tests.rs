//! The lock logic against a backend that is not Redis ([`MemoryBackend`]), under paused time:
//! exclusion, fencing, wake-up, renewal, loss detection and background release all go through
//! the `Backend` and `Channels` operations and nothing else.

use std::time::Duration;

use tokio::time::Instant;

use super::memory::MemoryBackend;
use crate::{LockClient, LockError, LockOptions, LossReason};

fn client(memory: &MemoryBackend, watchdog: Duration) -> LockClient {
    LockClient::builder("redis://memory")
        .watchdog_timeout(watchdog)
        .build_memory(memory.clone())
        .unwrap()
}

fn reason(e: LockError) -> LossReason {
    match e {
        LockError::Lost { reason, .. } => reason,
        other => panic!("expected a loss, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn locks_exclude_and_fencing_tokens_increase() {
    let memory = MemoryBackend::new();
    let (a, b) = (
        client(&memory, Duration::from_secs(30)),
        client(&memory, Duration::from_secs(30)),
    );
    let first = a.lock("stock:1").acquire().await.unwrap();
    let busy = b.lock("stock:1").try_acquire(Duration::ZERO).await;
    assert!(busy.unwrap_err().is_busy());
    let token = first.fencing_token().await.unwrap();
    first.release().await.unwrap();
    let second = b.lock("stock:1").try_acquire(Duration::ZERO).await.unwrap();
    assert!(second.fencing_token().await.unwrap() > token);
    assert!(b.lock("stock:1").is_locked().await.unwrap());
    assert!(b.lock("stock:1").force_unlock().await.unwrap());
    assert!(!b.lock("stock:1").is_locked().await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_release_wakes_a_waiter_through_the_channels() {
    let memory = MemoryBackend::new();
    let (a, b) = (
        client(&memory, Duration::from_secs(30)),
        client(&memory, Duration::from_secs(30)),
    );
    let held = a.lock("stock:2").acquire().await.unwrap();
    let start = Instant::now();
    let waiter = tokio::spawn(async move {
        let guard = b.lock("stock:2").acquire().await.unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    held.release().await.unwrap();
    let (woken, _guard) = waiter.await.unwrap();
    // Woken by the unlock message, not by the holder's 30 s lease running out.
    assert!(
        woken - start < Duration::from_secs(2),
        "{:?}",
        woken - start
    );
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_renews_every_third_of_its_timeout() {
    let memory = MemoryBackend::new();
    let locks = client(&memory, Duration::from_secs(3));
    let guard = locks.lock("stock:3").acquire().await.unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!guard.is_lost());
    let renewals = memory.renewals();
    assert!((9..=11).contains(&renewals), "{renewals} renewals in 10 s");
    let expiry = memory.expiry(guard.key()).expect("still held");
    assert!(expiry > Instant::now() + Duration::from_secs(1));
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lock_deleted_behind_the_holders_back_is_lost_at_the_next_renewal() {
    let memory = MemoryBackend::new();
    let locks = client(&memory, Duration::from_secs(3));
    let guard = locks.lock("stock:4").acquire().await.unwrap();
    memory.delete(guard.key());
    let lost = tokio::time::timeout(Duration::from_millis(1100), guard.lost()).await;
    assert_eq!(
        reason(lost.expect("declared within one renewal period")),
        LossReason::Deleted
    );
}

#[tokio::test(start_paused = true)]
async fn a_backend_that_hangs_has_the_loss_declared_before_the_lease_ends() {
    let memory = MemoryBackend::new();
    let locks = client(&memory, Duration::from_secs(3));
    let guard = locks.lock("stock:5").acquire().await.unwrap();
    memory.hang_renewals();
    let expiry = memory.expiry(guard.key()).unwrap();
    let loss = reason(guard.lost().await);
    assert_eq!(loss, LossReason::RenewalFailed);
    assert!(Instant::now() < expiry, "declared after the lease ran out");
}

#[tokio::test(start_paused = true)]
async fn an_explicit_lease_is_not_renewed_and_a_dropped_guard_is_released() {
    let memory = MemoryBackend::new();
    let locks = client(&memory, Duration::from_secs(3));
    let leased = locks
        .lock("stock:6")
        .acquire_with(LockOptions::new().lease(Duration::from_secs(1)))
        .await
        .unwrap();
    assert_eq!(reason(leased.lost().await), LossReason::LeaseExpired);
    assert_eq!(memory.renewals(), 0);
    drop(leased);
    let dropped = locks.lock("stock:7").acquire().await.unwrap();
    let key = dropped.key().to_owned();
    drop(dropped);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(memory.expiry(&key), None, "the releaser freed the lock");
}
