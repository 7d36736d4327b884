//! What `Lock::info` reads of every member of the family, shared by both backends.

use std::time::Duration;

use lock_runtime::{HoldMode, LockKind, LockOptions};

use super::Fixture;

/// A mutex's holder, lease, token and subscribed waiters (one subscription per client).
pub async fn info_reads_a_mutex_holder_lease_token_and_subscribed_waiters(f: &impl Fixture) {
    let a = f.client().await;
    let b = f.client().await;
    assert_eq!(a.lock("stock:42").info().await.unwrap(), None);

    let guard = a.lock("stock:42").fenced().acquire().await.unwrap();
    let info = a.lock("stock:42").info().await.unwrap().expect("held");
    assert_eq!(info.name, "stock:42");
    assert_eq!(info.key, "lock:{stock:42}");
    assert_eq!(info.kind, LockKind::Mutex);
    assert_eq!(info.holder_count, 1);
    assert_eq!(info.holders[0].owner, guard.owner());
    assert_eq!(info.holders[0].mode, HoldMode::Exclusive);
    assert_eq!(info.holders[0].client_id(), Some(a.id()));
    assert_eq!(info.fencing_token, guard.issued_token());
    let left = info.remaining.expect("a lease");
    assert!(
        left > Duration::ZERO && left <= Duration::from_secs(30),
        "{left:?}"
    );
    assert_eq!(info.waiting(), 0);

    // Two waiting tasks of one client share one subscription.
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let lock = b.lock("stock:42");
            // Released at once, so that whichever is granted first does not hold up the other
            // while the test waits for them in spawn order.
            tokio::spawn(async move { lock.acquire().await?.release().await })
        })
        .collect();
    let subscribed = lock_tests::until_info(&a.lock("stock:42"), |i| {
        i.waiters.subscribed == 1 && i.waiting() == 1
    })
    .await;
    assert!(
        subscribed,
        "the waiting client's subscription was not counted"
    );
    guard.release().await.unwrap();
    for waiter in waiters {
        lock_tests::granted(waiter).await;
    }
}

/// A semaphore's permit holders, their leases and the stored capacity, read through any handle.
pub async fn info_reads_semaphore_permits_and_the_stored_capacity(f: &impl Fixture) {
    let locks = f.client().await;
    let supplier = locks.semaphore("supplier:acme", 10);
    let three = supplier
        .acquire_many(3, LockOptions::new().lease(Duration::from_secs(20)))
        .await
        .unwrap();
    let one = supplier.acquire().await.unwrap();
    supplier.set_capacity(8).await.unwrap();

    // Any handle reads it: the kind comes from Redis.
    let info = locks
        .lock("supplier:acme")
        .info()
        .await
        .unwrap()
        .expect("held");
    assert_eq!(info.kind, LockKind::Semaphore);
    assert_eq!(info.holder_count, 2);
    assert_eq!(info.permits_held(), 4);
    assert_eq!(info.capacity, Some(8));
    assert_eq!(info.fencing_token, Some(one.fencing_token().await.unwrap()));
    let leased = info
        .holders
        .iter()
        .find(|h| h.owner == three.owner())
        .expect("the 3-permit holder");
    assert_eq!(leased.mode, HoldMode::Permits(3));
    let left = leased.remaining.expect("a lease");
    assert!(left <= Duration::from_secs(20) && left > Duration::from_secs(15));
    drop((three, one));
}

/// A read/write lock's readers, waiting writer and writer; a fair lock's queue.
pub async fn info_reads_readers_a_writer_and_a_fair_queue(f: &impl Fixture) {
    let a = f.client().await;
    let b = f.client().await;
    let stock = a.rw_lock("stock:42");
    let r1 = stock.read().acquire().await.unwrap();
    let r2 = b.rw_lock("stock:42").read().acquire().await.unwrap();
    let writer = b.rw_lock("stock:42").write().clone();
    let waiting_writer = tokio::spawn(async move { writer.acquire().await });
    let queued = lock_tests::until_info(stock.read(), |i| i.waiters.queued == 1).await;
    assert!(queued, "the waiting writer was not counted");
    let info = stock.read().info().await.unwrap().unwrap();
    assert_eq!(info.kind, LockKind::ReadWrite);
    assert_eq!(info.holder_count, 2);
    assert!(info.holders.iter().all(|h| h.mode == HoldMode::Read));
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let writing = lock_tests::granted(waiting_writer).await;
    let info = stock.read().info().await.unwrap().unwrap();
    assert_eq!(info.holders[0].mode, HoldMode::Write);
    assert_eq!(
        info.fencing_token,
        Some(writing.fencing_token().await.unwrap())
    );
    writing.release().await.unwrap();

    // A fair lock reads as one through its own handle, and through any once someone queues.
    let turn = a.fair_lock("drop:1").acquire().await.unwrap();
    assert_eq!(
        a.fair_lock("drop:1").info().await.unwrap().unwrap().kind,
        LockKind::Fair
    );
    assert_eq!(
        a.lock("drop:1").info().await.unwrap().unwrap().kind,
        LockKind::Mutex
    );
    let fair = b.fair_lock("drop:1");
    let waiter = tokio::spawn(async move { fair.acquire().await });
    let queued = lock_tests::until_info(&a.lock("drop:1"), |i| {
        i.kind == LockKind::Fair && i.waiting() == 1
    })
    .await;
    assert!(queued, "the fair lock's queue was not read");
    turn.release().await.unwrap();
    let next = lock_tests::granted(waiter).await;
    next.release().await.unwrap();
}
