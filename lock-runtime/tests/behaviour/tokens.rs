//! Fencing tokens on demand (a mutex's default) and eager ones (`Lock::fenced`), and the
//! in-memory hand-off that tokens on demand allow: SAFETY.md, promise 2 ("a token is issued
//! only to the holder, while it holds; every token is greater than every token issued before
//! it for that name") and promise 5 (every loss reaches the task that holds at that moment).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_runtime::{LockError, LossReason};
use lock_tests::loss_reason;

use super::Fixture;

/// A mutex taken without a token asks for one once, in one round trip, and keeps it; a fenced
/// one carries its token from the grant and never asks.
pub async fn a_token_on_demand_is_asked_for_once_and_a_fenced_grant_carries_its_own(
    f: &impl Fixture,
) {
    let locks = f.client().await;
    let guard = locks.lock("on-demand").acquire().await.unwrap();
    assert_eq!(guard.issued_token(), None, "no token with a plain grant");
    let before = f.lock_round_trips();
    let token = guard.fencing_token().await.unwrap();
    let asked = f.lock_round_trips();
    assert_eq!(guard.fencing_token().await.unwrap(), token, "cached");
    assert_eq!(guard.issued_token(), Some(token));
    if let (Some(before), Some(asked)) = (before, asked) {
        assert_eq!(asked, before + 1, "one round trip for the token");
        assert_eq!(f.lock_round_trips(), Some(asked), "none for the cached one");
    }
    guard.release().await.unwrap();

    let fenced = locks.lock("on-demand").fenced().acquire().await.unwrap();
    let carried = fenced.issued_token().expect("issued with the grant");
    assert!(carried > token, "{carried} after {token}");
    let before = f.lock_round_trips();
    assert_eq!(fenced.fencing_token().await.unwrap(), carried);
    assert_eq!(
        f.lock_round_trips(),
        before,
        "no round trip for a carried token"
    );
    fenced.release().await.unwrap();
}

/// Tokens on demand and eager tokens, interleaved on one name by two clients, never go
/// backwards: every token is greater than every token issued before it.
pub async fn lazy_and_eager_tokens_on_one_name_never_go_backwards(f: &impl Fixture) {
    let (a, b) = (f.client().await, f.client().await);
    let mut last = 0;
    for round in 0..40 {
        let client = if round % 3 == 0 { &a } else { &b };
        let lock = client.lock("interleaved");
        let lock = if round % 2 == 0 { lock.fenced() } else { lock };
        let guard = lock.acquire().await.unwrap();
        // Some holders never ask for theirs.
        if round % 5 != 4 {
            let token = guard.fencing_token().await.unwrap();
            assert!(token > last, "round {round}: {token} after {last}");
            last = token;
        }
        guard.release().await.unwrap();
    }
}

/// A holder whose lock was taken away behind its back, and then taken by a rival, asks for a
/// token: it is told the lock is lost, never given one (Redis checks the holder in the same
/// step as it issues).
pub async fn a_holder_that_lost_its_lock_gets_lost_never_a_token(f: &impl Fixture) {
    let (a, b) = (f.client().await, f.client().await);
    let stale = a.lock("taken-away").acquire().await.unwrap();
    f.take_away("taken-away");
    let rival = b.lock("taken-away").fenced().acquire().await.unwrap();
    let err = stale.fencing_token().await.unwrap_err();
    assert!(matches!(err, LockError::Lost { .. }), "{err:?}");
    assert!(
        stale.is_lost(),
        "the refusal is a loss its holder is told of"
    );
    assert_eq!(loss_reason(&stale.lost().await), Some(LossReason::Deleted));
    // The rival's token is the newest; the stale holder's release frees nothing of it.
    assert!(stale.release().await.is_err());
    assert!(b.lock("taken-away").is_locked().await.unwrap());
    let token = rival.issued_token().expect("fenced");
    assert_eq!(rival.fencing_token().await.unwrap(), token);
    rival.release().await.unwrap();
}

/// A hot lock whose holders want no token passes between the tasks of one client in memory:
/// never two holders at once, fewer lock operations than acquisitions, and the tokens its
/// holders ask for increase in holding order (each hand-over is a real change of holder).
pub async fn a_hot_lock_passes_between_the_tasks_of_a_client_in_memory(f: &impl Fixture) {
    const TASKS: usize = 4;
    const PER_TASK: usize = 50;
    let locks = f.client().await;
    let inside = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let before = f.lock_round_trips();
    let mut handles = Vec::new();
    for _ in 0..TASKS {
        let (locks, inside, tokens) = (locks.clone(), inside.clone(), tokens.clone());
        handles.push(tokio::spawn(async move {
            for i in 0..PER_TASK {
                let guard = locks.lock("hot").acquire().await.unwrap();
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                if i % 10 == 0 {
                    let token = guard.fencing_token().await.unwrap();
                    tokens.lock().unwrap().push(token);
                }
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    super::passed_in_memory(f, &locks, before, (TASKS * PER_TASK) as u64);
    let tokens = tokens.lock().unwrap().clone();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens in holding order: {tokens:?}"
    );
    assert!(!locks.lock("hot").is_locked().await.unwrap());
}

/// A lock passed in memory keeps being renewed by the watchdog, and its loss reaches the task
/// that holds it at that moment.
pub async fn a_lock_passed_in_memory_is_renewed_and_its_loss_reaches_its_holder(f: &impl Fixture) {
    let locks = f.client_with_watchdog(Duration::from_millis(600)).await;
    let first = locks.lock("passed").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move { locks.lock("passed").acquire().await.unwrap() }
    });
    // Subscribed to the unlock channel: queued for a local hand-off by then.
    assert!(lock_tests::until_info(&locks.lock("passed"), |i| i.waiters.subscribed == 1).await);
    first.release().await.unwrap();
    let second = waiter.await.unwrap();
    assert!(locks.stats().handoffs >= 1, "{:?}", locks.stats());
    // Held past two leases: renewed throughout.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert!(!second.is_lost());
    assert!(locks.lock("passed").is_locked().await.unwrap());
    let token = second.fencing_token().await.unwrap();
    assert!(token > 0);
    f.take_away("passed");
    let err = tokio::time::timeout(Duration::from_secs(5), second.lost())
        .await
        .expect("told within a renewal period");
    assert_eq!(loss_reason(&err), Some(LossReason::Deleted), "{err:?}");
}

/// A waiter cancelled while (or right after) the lock passes to it in memory leaves nothing
/// behind: the hold is released and the lock is free for everyone.
pub async fn a_waiter_cancelled_as_the_lock_passes_in_memory_leaves_nothing(f: &impl Fixture) {
    let locks = f.client().await;
    let other = f.client().await;
    for round in 0..10 {
        let first = locks.lock("cancelled").acquire().await.unwrap();
        let waiter = tokio::spawn({
            let locks = locks.clone();
            async move { locks.lock("cancelled").acquire().await }
        });
        assert!(
            lock_tests::until_info(&locks.lock("cancelled"), |i| i.waiters.subscribed == 1).await
        );
        // The pass happens inside `release`, before its first await; the abort follows at
        // once, before or after the waiter ran.
        let release = first.release();
        let abort = async {
            waiter.abort();
        };
        let (released, ()) = tokio::join!(release, abort);
        released.unwrap();
        let _ = waiter.await;
        let freed = other
            .lock("cancelled")
            .try_acquire(Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e:?}"));
        freed.release().await.unwrap();
    }
    assert!(f.leftovers("cancelled").is_empty());
}
