//! Explicit leases: the holder is told of the loss before Redis can hand the lock on.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use lock_runtime::{LockError, LockOptions, LossReason};
use lock_tests::{RedisServer, mono_ns};

/// Finding M1, end to end: many short leases overrun by their holder; a rival waiting on the
/// PTTL takes each one as soon as Redis lets it go. The holder's body (run under `run`, so it
/// is dropped once the loss is declared) asks `is_lost()` before each step, and must never be
/// told "not lost" after the rival was granted the lock.
///
/// The body stamps the clock *before* it asks, and keeps the stamp only when told it still
/// holds: a stamp later than the rival's grant is then a wrong answer. (It used to stamp
/// after `run`'s own check: a thread descheduled between the check and the stamp for longer
/// than the 10 ms margin, common on a loaded machine, stamped after the grant although the
/// answer had been given before it. That is the pause no margin covers, SAFETY.md "Paused
/// processes", not a wrong answer.) The margin rule itself is pinned down under paused time in
/// `watchdog/tests.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_of_an_overrun_lease_is_told_before_a_rival_holds() {
    let redis = RedisServer::start();
    let (a, b) = (common::client(&redis).await, common::client(&redis).await);
    let mut overlaps = Vec::new();
    for i in 0..30 {
        let name = format!("lease:{i}");
        let guard = a
            .lock(&name)
            .acquire_with(LockOptions::new().lease(Duration::from_millis(100)))
            .await
            .unwrap();
        let last = Arc::new(AtomicU64::new(0));
        let holder = {
            let last = last.clone();
            tokio::spawn(async move {
                let body = async {
                    loop {
                        let asked = mono_ns();
                        if guard.is_lost() {
                            // Told: `run` ends it with the loss.
                            std::future::pending::<()>().await;
                        }
                        last.store(asked, SeqCst);
                        tokio::task::yield_now().await;
                    }
                };
                let outcome = guard.run(body).await;
                (outcome, guard)
            })
        };
        let rival = b
            .lock(&name)
            .try_acquire(Duration::from_secs(2))
            .await
            .unwrap();
        let granted = mono_ns();
        let (outcome, guard) = holder.await.unwrap();
        assert!(
            matches!(
                outcome,
                Err(LockError::Lost {
                    reason: LossReason::LeaseExpired,
                    ..
                })
            ),
            "{outcome:?}"
        );
        if last.load(SeqCst) > granted {
            overlaps.push((i, last.load(SeqCst) - granted));
        }
        drop(guard);
        rival.release().await.unwrap();
    }
    assert!(
        overlaps.is_empty(),
        "the body was told it held after the rival held the lock (iteration, ns): {overlaps:?}"
    );
}
