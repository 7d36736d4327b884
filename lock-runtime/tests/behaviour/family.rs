//! The rest of the family, shared like the mutex's tests: fair locks, read/write locks and
//! semaphores.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{LockError, LockOptions};
use tokio::time::Instant;

use super::{Fixture, eventually};

/// Waiters of a fair lock in different clients are served in the order they arrived, each
/// with a larger token; nothing but the fencing counter is left, nobody stays subscribed.
pub async fn fair_waiters_of_different_clients_are_served_in_arrival_order(f: &impl Fixture) {
    const WAITERS: usize = 8;
    let holder = f.client().await;
    let first = holder.fair_lock("drop").acquire().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let mut clients = Vec::new();
    for i in 0..WAITERS {
        // One client per waiter (as if each were its own process), arriving in turn.
        let client = f.client().await;
        clients.push(client.clone());
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let guard = client.fair_lock("drop").acquire().await.unwrap();
            order.lock().unwrap().push(i);
            let token = guard.fencing_token().await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
            guard.release().await.unwrap();
            token
        }));
        // Its first attempt has put it in the queue before the next one arrives.
        let queued = eventually(Duration::from_secs(2), || async {
            let info = holder.fair_lock("drop").info().await.unwrap();
            info.is_some_and(|info| info.waiters.queued == i + 1)
        })
        .await;
        assert!(queued, "waiter {i} did not queue");
    }
    first.release().await.unwrap();
    let mut tokens = Vec::new();
    for task in tasks {
        tokens.push(
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("every waiter served")
                .unwrap(),
        );
    }
    assert_eq!(*order.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_eq!(f.leftovers("drop"), Vec::<String>::new());
    let clean = eventually(Duration::from_secs(2), || async {
        clients.iter().all(|c| c.subscribed_channels() == 0)
    })
    .await;
    assert!(clean, "a waiter stayed subscribed");
}

/// Readers share a read/write lock; a writer excludes readers and writers alike.
pub async fn rw_readers_share_and_a_writer_excludes_everyone(f: &impl Fixture) {
    let (a, b) = (f.client().await, f.client().await);
    let r1 = a.rw_lock("stock").read().acquire().await.unwrap();
    let r2 = b
        .rw_lock("stock")
        .read()
        .try_acquire(Duration::ZERO)
        .await
        .expect("readers share the lock");
    let info = a
        .rw_lock("stock")
        .read()
        .info()
        .await
        .unwrap()
        .expect("held");
    assert_eq!(info.holder_count, 2);
    let err = b
        .rw_lock("stock")
        .write()
        .try_acquire(Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = b.rw_lock("stock").write().acquire().await.unwrap();
    for side in [
        a.rw_lock("stock").read().clone(),
        a.rw_lock("stock").write().clone(),
    ] {
        let err = side.try_acquire(Duration::ZERO).await.unwrap_err();
        assert!(err.is_busy(), "{side:?}: {err:?}");
    }
    assert!(a.rw_lock("stock").read().is_locked().await.unwrap());
    w.release().await.unwrap();
    // Only the fencing counter stays (for its retention). The writer that gave up left its
    // claim to the background releaser, which removes it at once: but on a loaded machine
    // "at once" can come after the releases above.
    let clean = eventually(Duration::from_secs(2), || async {
        f.leftovers("stock").is_empty()
    })
    .await;
    assert!(clean, "left: {:?}", f.leftovers("stock"));
}

/// While a writer waits, new readers wait behind it, so readers cannot starve it.
pub async fn rw_a_waiting_writer_goes_before_new_readers(f: &impl Fixture) {
    let (a, b, c) = (f.client().await, f.client().await, f.client().await);
    let reader = a.rw_lock("hot").read().acquire().await.unwrap();
    let writer = tokio::spawn(async move {
        let w = b.rw_lock("hot").write().acquire().await.unwrap();
        let at = Instant::now();
        tokio::time::sleep(Duration::from_millis(100)).await;
        w.release().await.unwrap();
        at
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    // A stream of new readers would starve the writer: they wait behind it instead.
    let late = c.rw_lock("hot").read().clone();
    let err = late
        .try_acquire(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    let late_reader = tokio::spawn(async move {
        let r = late.acquire().await.unwrap();
        let at = Instant::now();
        r.release().await.unwrap();
        at
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    reader.release().await.unwrap();
    let wrote = writer.await.unwrap();
    let read = late_reader.await.unwrap();
    assert!(read > wrote, "the waiting writer went first");
}

/// In a write guard's scope the read side re-enters; in a read guard's scope the write side is
/// refused (it would wait for itself).
pub async fn rw_a_writer_may_read_in_its_scope_a_reader_may_not_write(f: &impl Fixture) {
    let a = f.client().await;
    let rw = a.rw_lock("doc");
    let w = rw.write().acquire().await.unwrap();
    w.scope(async {
        let r = rw.read().acquire().await.unwrap();
        assert!(r.is_reentrant());
        assert_eq!(
            r.fencing_token().await.unwrap(),
            w.fencing_token().await.unwrap()
        );
    })
    .await;
    w.release().await.unwrap();
    let r = rw.read().acquire().await.unwrap();
    r.scope(async {
        let again = rw.read().acquire().await.unwrap();
        assert!(again.is_reentrant());
        let err = rw.write().acquire().await.unwrap_err();
        assert!(matches!(err, LockError::WouldDeadlock { .. }), "{err:?}");
    })
    .await;
    r.release().await.unwrap();
}

/// Never more permit holders than the capacity, across clients; the capacity is used in full.
pub async fn semaphore_never_more_holders_than_permits_across_clients(f: &impl Fixture) {
    const CAPACITY: usize = 3;
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..3 {
        let client = f.client().await;
        clients.push(client.clone());
        for _ in 0..4 {
            let sem = client.semaphore("supplier", CAPACITY as u32);
            let (inside, most) = (inside.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let permit = sem.acquire().await.unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.unwrap();
                }
            }));
        }
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("all permits taken and returned in time")
            .unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= CAPACITY, "{most} holders at once");
    assert_eq!(most, CAPACITY, "the capacity was used in full");
    assert_eq!(
        f.leftovers("supplier"),
        Vec::<String>::new(),
        "no permit left"
    );
    let clean = eventually(Duration::from_secs(2), || async {
        clients.iter().all(|c| c.subscribed_channels() == 0)
    })
    .await;
    assert!(clean, "a waiter stayed subscribed");
}

/// A release of three permits wakes three waiters (of three clients) with one message.
pub async fn semaphore_a_release_of_several_permits_wakes_as_many_waiters(f: &impl Fixture) {
    let a = f.client().await;
    let sem = a.semaphore("bulk", 3);
    let held = sem.acquire_many(3, LockOptions::new()).await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 0);
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let client = f.client().await;
        waiters.push(tokio::spawn(async move {
            client.semaphore("bulk", 3).acquire().await.unwrap()
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.unwrap();
    let mut permits = Vec::new();
    for waiter in waiters {
        permits.push(
            tokio::time::timeout(Duration::from_secs(2), waiter)
                .await
                .expect("each waiter woken by the one release")
                .unwrap(),
        );
    }
    assert_eq!(sem.available().await.unwrap(), 0);
    drop(permits);
    let freed = eventually(Duration::from_secs(2), || async {
        sem.available().await.unwrap() == 3
    })
    .await;
    assert!(freed, "dropped permits were not released");
    assert_eq!(f.leftovers("bulk"), Vec::<String>::new());
}

/// A waiter for two permits passes on a wake-up for one permit to a waiter that wants one.
pub async fn semaphore_a_waiter_for_several_permits_does_not_swallow_a_smaller_ones_wake_up(
    f: &impl Fixture,
) {
    let a = f.client().await;
    let sem = a.semaphore("mixed", 2);
    let first = sem.acquire().await.unwrap();
    let second = sem.acquire().await.unwrap();
    // Same client: one release message wakes one of its waiters.
    let big = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire_many(2, LockOptions::new()).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let small = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.release().await.unwrap();
    let small = tokio::time::timeout(Duration::from_secs(2), small)
        .await
        .expect("the one free permit reached the waiter it suits")
        .unwrap()
        .unwrap();
    assert!(!big.is_finished());
    small.release().await.unwrap();
    second.release().await.unwrap();
    let big = tokio::time::timeout(Duration::from_secs(2), big)
        .await
        .expect("two free permits reach the bigger waiter")
        .unwrap()
        .unwrap();
    assert_eq!(big.permits(), 2);
}

/// A stored capacity applies to every client at once, wakes waiters when raised, and can be
/// reset to each handle's own.
pub async fn semaphore_the_capacity_changes_at_run_time_for_every_client(f: &impl Fixture) {
    let (a, b) = (f.client().await, f.client().await);
    let sem_a = a.semaphore("elastic", 1);
    let sem_b = b.semaphore("elastic", 1);
    let held = sem_a.acquire().await.unwrap();
    let waiter = tokio::spawn(async move { sem_b.acquire().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    sem_a.set_capacity(2).await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("a capacity raise wakes the waiter")
        .unwrap();
    assert_eq!(sem_a.capacity().await.unwrap(), 2);
    assert_eq!(sem_a.available().await.unwrap(), 0);
    // Lowered below what is held: holders keep their permits, newcomers wait.
    sem_a.set_capacity(1).await.unwrap();
    assert_eq!(sem_a.available().await.unwrap(), 0);
    let err = sem_a.try_acquire(Duration::ZERO).await.unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    sem_a.reset_capacity().await.unwrap();
    assert_eq!(sem_a.capacity().await.unwrap(), 1);
    held.release().await.unwrap();
    second.release().await.unwrap();
    assert_eq!(f.leftovers("elastic"), Vec::<String>::new());
}

/// Whether a client comes to wait for `sem` (subscribed to its channel) within 5 s.
async fn one_waits(sem: &lock_runtime::Semaphore) -> bool {
    eventually(Duration::from_secs(5), || async {
        sem.info()
            .await
            .unwrap()
            .is_some_and(|i| i.waiters.subscribed == 1)
    })
    .await
}

/// A semaphore's permits pass between the tasks of one client in memory: never more holders
/// than permits, fewer lock operations than acquisitions, and every token its holders ask for
/// is a token of its own.
pub async fn semaphore_permits_pass_between_the_tasks_of_a_client_in_memory(f: &impl Fixture) {
    const CAPACITY: usize = 2;
    const TASKS: usize = 6;
    const PER_TASK: usize = 30;
    let locks = f.client().await;
    let inside = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let before = f.lock_round_trips();
    let mut handles = Vec::new();
    for _ in 0..TASKS {
        let sem = locks.semaphore("pool", CAPACITY as u32);
        let (inside, tokens) = (inside.clone(), tokens.clone());
        handles.push(tokio::spawn(async move {
            for i in 0..PER_TASK {
                let permit = sem.acquire().await.unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(now <= CAPACITY, "{now} holders of {CAPACITY} permits");
                if i % 10 == 0 {
                    let token = permit.fencing_token().await.unwrap();
                    tokens.lock().unwrap().push(token);
                }
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.unwrap();
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    super::passed_in_memory(f, &locks, before, (TASKS * PER_TASK) as u64);
    let mut tokens = tokens.lock().unwrap().clone();
    let asked = tokens.len();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), asked, "a token went to two holders");
    let sem = locks.semaphore("pool", CAPACITY as u32);
    assert_eq!(sem.available().await.unwrap(), CAPACITY as u32);
    assert_eq!(f.leftovers("pool"), Vec::<String>::new());
}

/// Permits passed in memory keep being renewed by the watchdog; their token is issued on
/// demand, above the one of the hold they passed from; their loss reaches the task that holds
/// them at that moment.
pub async fn semaphore_permits_passed_in_memory_are_renewed_and_their_loss_reaches_their_holder(
    f: &impl Fixture,
) {
    let locks = f.client_with_watchdog(Duration::from_millis(600)).await;
    let sem = locks.semaphore("passed-permits", 1);
    let first = sem.acquire().await.unwrap();
    let first_owner = first.owner().to_owned();
    let first_token = first
        .issued_token()
        .expect("a grant in Redis carries its token");
    let waiter = tokio::spawn({
        let sem = sem.clone();
        async move { sem.acquire().await.unwrap() }
    });
    assert!(one_waits(&sem).await, "the waiter never subscribed");
    first.release().await.unwrap();
    let second = waiter.await.unwrap();
    assert_eq!(
        second.owner(),
        first_owner,
        "the hold in Redis passed as it was"
    );
    assert_eq!(second.issued_token(), None, "tokens on demand");
    assert!(locks.stats().handoffs >= 1, "{:?}", locks.stats());
    // Held past two leases: renewed throughout.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert!(!second.is_lost());
    assert!(sem.is_held().await.unwrap());
    let token = second.fencing_token().await.unwrap();
    assert!(token > first_token, "{token} after {first_token}");
    f.take_away("passed-permits");
    let err = tokio::time::timeout(Duration::from_secs(5), second.lost())
        .await
        .expect("told within a renewal period");
    assert_eq!(
        lock_tests::loss_reason(&err),
        Some(lock_runtime::LossReason::Deleted),
        "{err:?}"
    );
    assert!(matches!(
        second.fencing_token().await,
        Err(LockError::Lost { .. })
    ));
}

/// Permits pass in memory only to a waiter for as many: a waiter for two, first in the queue,
/// is not given one permit of a holder of one; it takes its two through Redis, under an owner
/// id and a token of its own.
pub async fn semaphore_permits_pass_only_to_a_waiter_for_as_many(f: &impl Fixture) {
    let locks = f.client().await;
    let sem = locks.semaphore("sizes", 2);
    let a = sem.acquire().await.unwrap();
    let b = sem.acquire().await.unwrap();
    let passed_from = [a.owner().to_owned(), b.owner().to_owned()];
    let pair = tokio::spawn({
        let sem = sem.clone();
        async move { sem.acquire_many(2, LockOptions::new()).await.unwrap() }
    });
    assert!(one_waits(&sem).await, "the waiter never subscribed");
    a.release().await.unwrap();
    // The freed permit stays free: one is too few for the waiter, and nobody else waits.
    assert_eq!(sem.available().await.unwrap(), 1);
    assert!(!pair.is_finished());
    b.release().await.unwrap();
    let pair = tokio::time::timeout(Duration::from_secs(5), pair)
        .await
        .expect("granted once both permits are free")
        .unwrap();
    assert_eq!(pair.permits(), 2);
    assert!(!passed_from.contains(&pair.owner().to_owned()));
    assert!(
        pair.issued_token().is_some(),
        "granted in Redis, with its token"
    );
    assert_eq!(locks.stats().handoffs, 0);
}

/// A client whose tasks pass a semaphore's permits among themselves in memory lets another
/// client that waits take its turn: the turn ends at the hand-off limit (or after its time),
/// and the permit it frees is kept from the passing client until the waiting one had it.
pub async fn semaphore_permits_passed_in_memory_let_another_client_take_its_turn(f: &impl Fixture) {
    /// The hand-off limit's default: a turn is at most this many passes in a row.
    const LIMIT: u64 = 64;
    /// The turns of the passing client the waiting one may sit through: one, and more where a
    /// loaded machine delays the waiter past the refusal of the passing client (5 ms).
    const TURNS: u64 = 10;
    let hot = f.client().await;
    let other = f.client().await;
    let taken = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut handles = Vec::new();
    for _ in 0..3 {
        let sem = hot.semaphore("turns", 1);
        let (taken, stop) = (taken.clone(), stop.clone());
        handles.push(tokio::spawn(async move {
            // Bounded in count as well as by the flag.
            for _ in 0..20_000 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let permit = sem.acquire().await.unwrap();
                taken.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                permit.release().await.unwrap();
            }
        }));
    }
    let busy = eventually(Duration::from_secs(10), || async {
        taken.load(Ordering::SeqCst) > 2 * LIMIT as usize
    })
    .await;
    assert!(busy, "the hot client's tasks never got going");
    assert!(hot.stats().handoffs > 0, "{:?}", hot.stats());
    let asked = taken.load(Ordering::SeqCst) as u64;
    let permit = other
        .semaphore("turns", 1)
        .try_acquire(Duration::from_secs(10))
        .await
        .expect("the other client had a turn");
    let during = taken.load(Ordering::SeqCst) as u64 - asked;
    stop.store(true, Ordering::SeqCst);
    permit.release().await.unwrap();
    for h in handles {
        h.await.unwrap();
    }
    assert!(
        during <= TURNS * (LIMIT + 1),
        "{during} acquisitions of the hot client while the other waited"
    );
}
