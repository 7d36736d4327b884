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
    // Only the fencing counter stays (for its retention).
    assert_eq!(f.leftovers("stock"), Vec::<String>::new());
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
