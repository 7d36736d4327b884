//! The lock's behaviour, written once and run against every backend: `behaviour_redis.rs`
//! runs each test against a real `redis-server` in real time, `behaviour_memory.rs` against
//! `MemoryLocks` under tokio's paused time. Both instantiate the same list
//! ([`behaviour_tests!`]), so "the in-memory backend has the same semantics" is checked, not
//! claimed.
//!
//! Durations are short enough for real time (leases under a second) and every wait that a
//! test measures has a bound that paused time meets exactly and real time meets with slack.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

mod family;
mod inspect;
mod tokens;
pub use family::*;
pub use inspect::*;
pub use tokens::*;

use lock_runtime::{DEFAULT_WATCHDOG_TIMEOUT, LockClient, LockError, LockOptions, LossReason};
use lock_tests::loss_reason;
use tokio::time::Instant;

/// Where the locks live: a Redis server, or `MemoryLocks`.
pub trait Fixture {
    /// A new client (another process) whose watchdog timeout is `watchdog`.
    fn client_with_watchdog(&self, watchdog: Duration) -> impl Future<Output = LockClient>;

    /// A new client with default settings.
    fn client(&self) -> impl Future<Output = LockClient> {
        self.client_with_watchdog(DEFAULT_WATCHDOG_TIMEOUT)
    }

    /// Takes the lock `name` away behind its holder's back (Redis: `DEL` of its key under the
    /// default prefix; memory: `MemoryLocks::lose`).
    fn take_away(&self, name: &str);

    /// What is left of lock `name` besides its fencing counter (Redis: its keys under the
    /// default prefix, queue and waiting writers included; memory: its holders).
    fn leftovers(&self, name: &str) -> Vec<String>;

    /// Lock operations sent to the backend so far, where the backend counts them (Redis:
    /// `EVALSHA` and `FCALL` calls; not the plain `SET` of an uncontended mutex's first
    /// attempt, which `INFO commandstats` cannot tell from the `SET`s the scripts make).
    fn lock_round_trips(&self) -> Option<u64>;
}

/// Defines one `#[tokio::test]` per shared test, each running it against `$fixture`
/// (an expression evaluated inside the test, in its runtime).
macro_rules! behaviour_tests {
    (#[$attr:meta] $fixture:expr) => {
        behaviour_tests!(@each #[$attr] $fixture;
            exclusion_under_contention,
            a_held_lock_is_busy_for_other_clients_and_tasks,
            fencing_tokens_strictly_increase_across_holders,
            a_waiter_is_woken_by_the_release_not_by_the_lease_running_out,
            try_acquire_gives_up_after_its_wait,
            another_client_gets_the_lock_soon_after_a_guard_drop,
            an_explicit_lease_is_not_renewed_and_lost_fires_a_margin_before_it_ends,
            the_watchdog_keeps_a_lock_held_past_its_lease,
            a_lock_taken_away_is_reported_within_one_renewal_period,
            force_unlock_is_reported_and_release_after_it_is_an_error,
            max_hold_stops_renewal_and_frees_the_lock,
            nested_acquire_inside_the_scope_reenters_without_a_round_trip,
            a_spawned_task_is_a_new_owner_and_waits_for_the_holder,
            joined_siblings_taking_the_same_key_exclude_each_other,
            another_client_is_another_owner_even_inside_the_scope,
            a_cancelled_waiting_acquire_leaves_nothing_behind,
            fair_waiters_of_different_clients_are_served_in_arrival_order,
            rw_readers_share_and_a_writer_excludes_everyone,
            rw_a_waiting_writer_goes_before_new_readers,
            rw_a_writer_may_read_in_its_scope_a_reader_may_not_write,
            semaphore_never_more_holders_than_permits_across_clients,
            semaphore_a_release_of_several_permits_wakes_as_many_waiters,
            semaphore_a_waiter_for_several_permits_does_not_swallow_a_smaller_ones_wake_up,
            semaphore_the_capacity_changes_at_run_time_for_every_client,
            semaphore_permits_pass_between_the_tasks_of_a_client_in_memory,
            semaphore_permits_passed_in_memory_are_renewed_and_their_loss_reaches_their_holder,
            semaphore_permits_pass_only_to_a_waiter_for_as_many,
            semaphore_permits_passed_in_memory_let_another_client_take_its_turn,
            info_reads_a_mutex_holder_lease_token_and_subscribed_waiters,
            info_reads_semaphore_permits_and_the_stored_capacity,
            info_reads_readers_a_writer_and_a_fair_queue,
            a_token_on_demand_is_asked_for_once_and_a_fenced_grant_carries_its_own,
            lazy_and_eager_tokens_on_one_name_never_go_backwards,
            a_holder_that_lost_its_lock_gets_lost_never_a_token,
            a_hot_lock_passes_between_the_tasks_of_a_client_in_memory,
            a_lock_passed_in_memory_is_renewed_and_its_loss_reaches_its_holder,
            a_waiter_cancelled_as_the_lock_passes_in_memory_leaves_nothing,
        );
    };
    (@each #[$attr:meta] $fixture:expr; $($name:ident),* $(,)?) => {
        $(
            #[$attr]
            async fn $name() {
                let fixture = $fixture;
                behaviour::$name(&fixture).await;
            }
        )*
    };
}

/// Asserts that `locks` made `acquisitions` in all, some of them handed over locally, with
/// fewer lock operations than acquisitions since `before` (where the backend counts them):
/// through Redis, every acquisition and release would be an operation each.
fn passed_in_memory(f: &impl Fixture, locks: &LockClient, before: Option<u64>, acquisitions: u64) {
    let stats = locks.stats();
    assert_eq!(stats.acquisitions, acquisitions);
    assert!(stats.handoffs > 0, "{stats:?}");
    if let (Some(before), Some(after)) = (before, f.lock_round_trips()) {
        let operations = after - before;
        assert!(
            operations < stats.acquisitions,
            "{operations} lock operations for {} acquisitions",
            stats.acquisitions
        );
    }
}

/// Polls `cond` every 5 ms until it holds or `limit` passes; returns whether it held.
async fn eventually<F: Future<Output = bool>>(
    limit: Duration,
    mut cond: impl FnMut() -> F,
) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Many clients and tasks, one lock, a racy read-modify-write: never two holders at once,
/// never a lost increment, nothing left held.
pub async fn exclusion_under_contention(f: &impl Fixture) {
    const CLIENTS: usize = 3;
    const TASKS: usize = 8;
    const PER_TASK: usize = 100;
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let locks = f.client().await;
        clients.push(locks.clone());
        for _ in 0..TASKS {
            let locks = locks.clone();
            let (counter, inside, max_inside) =
                (counter.clone(), inside.clone(), max_inside.clone());
            handles.push(tokio::spawn(async move {
                for _ in 0..PER_TASK {
                    let guard = locks.lock("counter").acquire().await.unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_inside.fetch_max(now, Ordering::SeqCst);
                    // Non-atomic read-modify-write: only the lock keeps it correct.
                    let n = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(n + 1, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            }));
        }
    }
    for h in handles {
        h.await.unwrap();
    }
    assert_eq!(
        counter.load(Ordering::SeqCst),
        (CLIENTS * TASKS * PER_TASK) as u64
    );
    assert_eq!(
        max_inside.load(Ordering::SeqCst),
        1,
        "two holders overlapped"
    );
    assert!(
        !clients[0].lock("counter").is_locked().await.unwrap(),
        "lock left behind"
    );
}

/// While one client holds a lock, a single attempt of another client, and of another task of
/// the same client, is refused as busy, with the holder's remaining lease.
pub async fn a_held_lock_is_busy_for_other_clients_and_tasks(f: &impl Fixture) {
    let (a, b) = (f.client().await, f.client().await);
    let guard = a.lock("busy-now").fenced().acquire().await.unwrap();
    let err = b
        .lock("busy-now")
        .try_acquire(Duration::ZERO)
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    let left = err.retry_after().expect("the holder's lease is reported");
    assert!(
        left > Duration::from_secs(25) && left <= DEFAULT_WATCHDOG_TIMEOUT,
        "{left:?}"
    );
    let same_client = a.clone();
    let other_task = tokio::spawn(async move {
        same_client
            .lock("busy-now")
            .try_acquire(Duration::ZERO)
            .await
    });
    let err = other_task.await.unwrap().unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    assert!(b.lock("busy-now").is_locked().await.unwrap());
    let info = b.lock("busy-now").info().await.unwrap().expect("held");
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].client_id(), Some(a.id()));
    assert_eq!(info.fencing_token, guard.issued_token());
    guard.release().await.unwrap();
    assert!(!b.lock("busy-now").is_locked().await.unwrap());
    let taken = b
        .lock("busy-now")
        .try_acquire(Duration::ZERO)
        .await
        .expect("free once released");
    taken.release().await.unwrap();
}

/// Every grant of a name, whichever client takes it, carries a larger token than the last.
pub async fn fencing_tokens_strictly_increase_across_holders(f: &impl Fixture) {
    let (a, b) = (f.client().await, f.client().await);
    let mut last = 0;
    for i in 0..50 {
        let locks = if i % 2 == 0 { &a } else { &b };
        let guard = locks.lock("fenced").acquire().await.unwrap();
        assert!(
            guard.fencing_token().await.unwrap() > last,
            "token went backwards"
        );
        last = guard.fencing_token().await.unwrap();
        guard.release().await.unwrap();
    }
}

/// A waiter sleeps on the unlock message: a release wakes it at once, long before the
/// holder's lease would have run out.
pub async fn a_waiter_is_woken_by_the_release_not_by_the_lease_running_out(f: &impl Fixture) {
    let (a, b) = (f.client().await, f.client().await);
    let lease = LockOptions::new().lease(Duration::from_secs(10));
    let holder = a.lock("wake").acquire_with(lease).await.unwrap();
    let waiter = tokio::spawn(async move {
        let g = b.lock("wake").acquire().await.unwrap();
        (Instant::now(), g)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "the waiter must wait while held");
    let released = Instant::now();
    holder.release().await.unwrap();
    let (got, _g) = waiter.await.unwrap();
    let delay = got - released;
    // The waiter's own timer was set to the holder's lease left (about 9.8 s): woken in half
    // of that, it was the release's message that woke it.
    assert!(delay < Duration::from_secs(5), "woken after {delay:?}");
}

/// A bounded wait on a held lock gives up after its wait (not before, not much later), reports
/// the holder's lease, and leaves no subscription behind.
pub async fn try_acquire_gives_up_after_its_wait(f: &impl Fixture) {
    let (a, b) = (f.client().await, f.client().await);
    let _held = a.lock("busy").acquire().await.unwrap();
    let start = Instant::now();
    let err = b
        .lock("busy")
        .try_acquire(Duration::from_millis(200))
        .await
        .unwrap_err();
    let waited = start.elapsed();
    assert!(err.is_busy(), "{err:?}");
    assert!(waited >= Duration::from_millis(200), "{waited:?}");
    // Ended by its own deadline, not by sleeping on the holder's lease (30 s).
    assert!(waited < Duration::from_secs(15), "{waited:?}");
    match err {
        LockError::WaitTimeout { remaining_ttl, .. } => {
            let ttl = remaining_ttl.expect("the holder's TTL is reported");
            assert!(ttl > Duration::from_secs(25), "{ttl:?}");
        }
        other => panic!("{other:?}"),
    }
    // Nothing left subscribed once the waiter gave up: neither in the client nor as the
    // backend counts subscribers.
    let clean = eventually(Duration::from_secs(2), || async {
        let info = a.lock("busy").info().await.unwrap().expect("still held");
        b.subscribed_channels() == 0 && info.waiters.subscribed == 0
    })
    .await;
    assert!(clean, "a subscription was left behind");
}

/// A dropped guard is released in the background; a waiting client gets the lock soon after.
pub async fn another_client_gets_the_lock_soon_after_a_guard_drop(f: &impl Fixture) {
    let (a, b) = (f.client().await, f.client().await);
    for _ in 0..5 {
        let guard = a.lock("drop").acquire().await.unwrap();
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move {
                let g = b.lock("drop").acquire().await.unwrap();
                let t = Instant::now();
                g.release().await.unwrap();
                t
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "the waiter must wait while held");
        let dropped = Instant::now();
        drop(guard);
        let got = waiter.await.unwrap();
        // The dropped guard's lease had about 30 s left, and the waiter's timer was set to
        // it: taken in a third of that, the lock was released in the background.
        assert!(
            got - dropped < Duration::from_secs(10),
            "{:?}",
            got - dropped
        );
    }
}

/// A lock with an explicit lease is not renewed: its holder is told a tenth of the lease
/// before it ends, and another client takes it right after, with a larger token.
pub async fn an_explicit_lease_is_not_renewed_and_lost_fires_a_margin_before_it_ends(
    f: &impl Fixture,
) {
    let locks = f.client_with_watchdog(Duration::from_secs(1)).await;
    let other = f.client().await;
    let start = Instant::now();
    let guard = locks
        .lock("leased")
        .acquire_with(LockOptions::new().lease(Duration::from_millis(700)))
        .await
        .unwrap();
    let first = guard.fencing_token().await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .unwrap();
    let at = start.elapsed();
    assert_eq!(loss_reason(&err), Some(LossReason::LeaseExpired), "{err:?}");
    // Lease 700 ms, margin 70 ms: told at 630 ms (on a loaded machine, later), never before
    // the margin; that it was told at all (within the 2 s above) shows it was not renewed.
    assert!(at >= Duration::from_millis(620), "{at:?}");
    // Not renewed: another client can take it right after.
    let g = other
        .lock("leased")
        .try_acquire(Duration::from_millis(300))
        .await
        .unwrap();
    assert!(g.fencing_token().await.unwrap() > first);
    // A holder that lost the lock never gets a token (it had one: it keeps answering Lost).
    assert!(matches!(
        guard.fencing_token().await,
        Err(LockError::Lost { .. })
    ));
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
}

/// Without an explicit lease the watchdog renews the lock: held for five times its lease it
/// stays held (and busy for others), and it is free at once after the release.
pub async fn the_watchdog_keeps_a_lock_held_past_its_lease(f: &impl Fixture) {
    const WATCHDOG: Duration = Duration::from_millis(600);
    let locks = f.client_with_watchdog(WATCHDOG).await;
    let other = f.client().await;
    let guard = locks.lock("long").acquire().await.unwrap();
    let start = Instant::now();
    while start.elapsed() < WATCHDOG * 5 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let ttl = other.lock("long").remaining_ttl().await.unwrap();
        assert!(
            ttl.is_some_and(|t| t <= WATCHDOG),
            "lease ran out while held ({ttl:?})"
        );
        let err = other
            .lock("long")
            .try_acquire(Duration::ZERO)
            .await
            .unwrap_err();
        assert!(err.is_busy(), "{err:?}");
        assert!(!guard.is_lost());
    }
    assert!(locks.stats().renewals >= 10, "{:?}", locks.stats());
    guard.release().await.unwrap();
    let _free = other
        .lock("long")
        .try_acquire(Duration::ZERO)
        .await
        .expect("free at once after release");
}

/// A lock deleted behind its holder's back is reported lost (`Deleted`) within one renewal
/// period, and its release is an error.
pub async fn a_lock_taken_away_is_reported_within_one_renewal_period(f: &impl Fixture) {
    const WATCHDOG: Duration = Duration::from_secs(1);
    let locks = f.client_with_watchdog(WATCHDOG).await;
    let guard = locks.lock("deleted").acquire().await.unwrap();
    let rounds = locks.stats().renewal_round_trips;
    f.take_away("deleted");
    let err = tokio::time::timeout(WATCHDOG * 10, guard.lost())
        .await
        .expect("lost() once a renewal finds the lock gone");
    // Found gone by a renewal (not declared because the lease ran out), and by the first round
    // sent after the take-away: one already in flight may still have renewed it. Rounds, not
    // milliseconds: a loaded machine only makes them later.
    assert_eq!(loss_reason(&err), Some(LossReason::Deleted), "{err:?}");
    let after = locks.stats().renewal_round_trips - rounds;
    assert!(
        (1..=2).contains(&after),
        "declared after {after} renewal rounds"
    );
    assert!(guard.is_lost());
    // (Counted just after the loss is declared.)
    let counted = eventually(Duration::from_secs(1), || async {
        locks.stats().losses == 1
    })
    .await;
    assert!(counted, "{:?}", locks.stats());
    let released = guard.release().await;
    assert!(
        matches!(released, Err(LockError::Lost { .. })),
        "{released:?}"
    );
    // Free for anyone else.
    let other = f.client().await;
    let g = other
        .lock("deleted")
        .try_acquire(Duration::ZERO)
        .await
        .unwrap();
    g.release().await.unwrap();
}

/// `force_unlock` frees a held lock (and says whether it did); the holder's release is then an
/// error, and a guard still held is told by `lost()`.
pub async fn force_unlock_is_reported_and_release_after_it_is_an_error(f: &impl Fixture) {
    const WATCHDOG: Duration = Duration::from_secs(1);
    let locks = f.client_with_watchdog(WATCHDOG).await;
    let admin = f.client().await;
    let guard = locks.lock("forced").acquire().await.unwrap();
    assert!(admin.lock("forced").force_unlock().await.unwrap());
    assert!(!admin.lock("forced").is_locked().await.unwrap());
    assert!(
        !admin.lock("forced").force_unlock().await.unwrap(),
        "already free"
    );
    // Released before the watchdog noticed: the backend itself says it is not ours.
    let released = guard.release().await;
    assert!(
        matches!(
            released,
            Err(LockError::NotOwner { .. } | LockError::Lost { .. })
        ),
        "{released:?}"
    );

    let guard = locks.lock("forced").acquire().await.unwrap();
    admin.lock("forced").force_unlock().await.unwrap();
    let err = tokio::time::timeout(WATCHDOG, guard.lost())
        .await
        .expect("lost() fires");
    assert!(err.is_lost());
}

/// A maximum hold time stops renewal, declares the loss and frees the lock.
pub async fn max_hold_stops_renewal_and_frees_the_lock(f: &impl Fixture) {
    let locks = f.client_with_watchdog(Duration::from_secs(1)).await;
    let other = f.client().await;
    let guard = locks
        .lock("capped")
        .acquire_with(LockOptions::new().max_hold(Duration::from_millis(1500)))
        .await
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .unwrap();
    assert_eq!(
        loss_reason(&err),
        Some(LossReason::MaxHoldExceeded),
        "{err:?}"
    );
    let _free = other
        .lock("capped")
        .try_acquire(Duration::from_millis(500))
        .await
        .expect("released after max hold");
}

/// Inside a guard's scope, taking the same lock re-enters at once (same token, no round trip),
/// however deep; an inner release leaves the outer hold in place.
pub async fn nested_acquire_inside_the_scope_reenters_without_a_round_trip(f: &impl Fixture) {
    let locks = f.client().await;
    let outer = locks.lock("nest").acquire().await.unwrap();
    // The token asked for once, then shared by every re-entrant guard.
    let first = outer.fencing_token().await.unwrap();
    let before = f.lock_round_trips();
    let (token, reentrant) = outer
        .scope(async {
            let inner = locks
                .lock("nest")
                .try_acquire(Duration::from_millis(100))
                .await
                .unwrap();
            // Deeper still.
            let deeper = inner
                .scope(async { locks.lock("nest").acquire().await.unwrap() })
                .await;
            assert!(deeper.is_reentrant());
            let res = (inner.fencing_token().await.unwrap(), inner.is_reentrant());
            inner.release().await.unwrap(); // releases nothing
            res
        })
        .await;
    assert!(reentrant);
    assert_eq!(token, first);
    assert_eq!(outer.fencing_token().await.unwrap(), first);
    assert_eq!(
        f.lock_round_trips(),
        before,
        "re-entry must not touch the backend"
    );
    assert_eq!(locks.stats().reentries, 2);
    assert_eq!(locks.stats().acquisitions, 1);
    // The inner release left the outer hold intact.
    assert!(locks.lock("nest").is_locked().await.unwrap());
    outer.release().await.unwrap();
    assert!(!locks.lock("nest").is_locked().await.unwrap());
}

/// A task spawned from inside a scope is not part of it: it waits for the holder's release.
#[allow(clippy::async_yields_async)] // the scope returns the spawned task's handle on purpose
pub async fn a_spawned_task_is_a_new_owner_and_waits_for_the_holder(f: &impl Fixture) {
    let locks = f.client().await;
    let guard = locks.lock("spawn").acquire().await.unwrap();
    let released = Arc::new(AtomicUsize::new(0));
    let child = guard
        .scope(async {
            let locks = locks.clone();
            let released = released.clone();
            // Spawned from inside the scope, yet not part of it.
            tokio::spawn(async move {
                let g = locks.lock("spawn").acquire().await.unwrap();
                assert!(!g.is_reentrant());
                assert_eq!(
                    released.load(Ordering::SeqCst),
                    1,
                    "got the lock before release"
                );
                g.release().await.unwrap();
            })
        })
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!child.is_finished());
    released.store(1, Ordering::SeqCst);
    guard.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), child)
        .await
        .expect("the spawned task got the lock after release")
        .unwrap();
}

/// Two `join!`ed branches of one task are different owners: they never hold at once.
pub async fn joined_siblings_taking_the_same_key_exclude_each_other(f: &impl Fixture) {
    let locks = f.client().await;
    let inside = AtomicUsize::new(0);
    let max_inside = AtomicUsize::new(0);
    let branch = || async {
        for _ in 0..10 {
            let guard = locks.lock("sibling").acquire().await.unwrap();
            guard
                .scope(async {
                    let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_inside.fetch_max(n, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
                .await;
            guard.release().await.unwrap();
        }
    };
    tokio::join!(branch(), branch());
    assert_eq!(max_inside.load(Ordering::SeqCst), 1);
}

/// A scope re-enters the locks of its own client only.
pub async fn another_client_is_another_owner_even_inside_the_scope(f: &impl Fixture) {
    let (a, b) = (f.client().await, f.client().await);
    let guard = a.lock("two-clients").acquire().await.unwrap();
    let res = guard
        .scope(b.lock("two-clients").try_acquire(Duration::from_millis(50)))
        .await;
    assert!(matches!(res, Err(LockError::WaitTimeout { .. })), "{res:?}");
}

/// A waiting acquire dropped mid-wait leaves no hold, subscription or watchdog entry: the
/// holder keeps the lock, and once it releases, the lock is free for anyone.
pub async fn a_cancelled_waiting_acquire_leaves_nothing_behind(f: &impl Fixture) {
    let (a, b, c) = (f.client().await, f.client().await, f.client().await);
    let guard = a.lock("cancelled").acquire().await.unwrap();
    let waiting =
        tokio::time::timeout(Duration::from_millis(200), b.lock("cancelled").acquire()).await;
    assert!(waiting.is_err(), "the acquire must still be waiting");
    let clean = eventually(Duration::from_secs(2), || async {
        let info = a
            .lock("cancelled")
            .info()
            .await
            .unwrap()
            .expect("still held");
        b.subscribed_channels() == 0 && info.waiters.subscribed == 0
    })
    .await;
    assert!(clean, "the cancelled waiter left a subscription");
    assert_eq!(b.held_locks(), 0);
    let info = c.lock("cancelled").info().await.unwrap().expect("held");
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].client_id(), Some(a.id()));
    guard.release().await.unwrap();
    assert!(!c.lock("cancelled").is_locked().await.unwrap());
    let g = c
        .lock("cancelled")
        .try_acquire(Duration::ZERO)
        .await
        .expect("free after the holder's release");
    g.release().await.unwrap();
}
