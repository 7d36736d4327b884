//! `Lock::info` and `LockClient::scan` against real servers: what they read of every member of
//! the family, and how a scan finds names (batches, patterns, foreign keys, every master of a
//! cluster).

mod common;

use std::collections::HashSet;
use std::time::Duration;

use lock_runtime::{HoldMode, LockClient, LockError, LockKind, LockOptions};
use lock_tests::RedisServer;
use lock_tests::topology::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_reads_a_mutex_holder_lease_token_and_subscribed_waiters() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    assert_eq!(a.lock("stock:42").info().await.unwrap(), None);

    let guard = a.lock("stock:42").acquire().await.unwrap();
    let info = a.lock("stock:42").info().await.unwrap().expect("held");
    assert_eq!(info.name, "stock:42");
    assert_eq!(info.key, "lock:{stock:42}");
    assert_eq!(info.kind, LockKind::Mutex);
    assert_eq!(info.holder_count, 1);
    assert_eq!(info.holders[0].owner, guard.owner());
    assert_eq!(info.holders[0].mode, HoldMode::Exclusive);
    assert_eq!(info.holders[0].client_id(), Some(a.id()));
    assert_eq!(info.fencing_token, Some(guard.fencing_token()));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_reads_semaphore_permits_and_the_stored_capacity() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
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
    assert_eq!(info.fencing_token, Some(one.fencing_token()));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_reads_readers_a_writer_and_a_fair_queue() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
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
    assert_eq!(info.fencing_token, Some(writing.fencing_token()));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_refuses_foreign_data_and_the_old_queries_still_answer() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    redis.cmd(&["SET", "lock:{x}", "hello"]);
    match locks.lock("x").info().await {
        Err(LockError::ForeignData { key, found }) => {
            assert_eq!((key.as_str(), found.as_str()), ("lock:{x}", "string"));
        }
        other => panic!("expected ForeignData, got {other:?}"),
    }
    assert!(matches!(
        locks.lock("x").is_locked().await,
        Err(LockError::ForeignData { .. })
    ));
    // A hash we did not write: held, without a lease.
    redis.cmd(&["HSET", "lock:{h}", "someone", "1"]);
    assert!(locks.lock("h").is_locked().await.unwrap());
    assert_eq!(locks.lock("h").remaining_ttl().await.unwrap(), None);
    let info = locks.lock("h").info().await.unwrap().unwrap();
    assert_eq!((info.remaining, info.fencing_token), (None, None));
    assert_eq!(info.holders[0].client_id(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_finds_every_held_name_once_in_bounded_batches() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let mut guards = Vec::new();
    let mut expected = HashSet::new();
    for i in 0..60 {
        let name = format!("stock:{i}");
        guards.push(locks.lock(&name).acquire().await.unwrap());
        expected.insert(name);
    }
    guards.push(locks.semaphore("supplier", 2).acquire().await.unwrap());
    guards.push(
        locks
            .rw_lock("order:{user:7}")
            .write()
            .acquire()
            .await
            .unwrap(),
    );
    redis.cmd(&["SET", "lock:stray", "1"]);
    redis.cmd(&["SET", "unrelated", "1"]);

    let mut scan = locks.scan("stock:*").batch_size(5);
    let mut found = HashSet::new();
    let mut batches = 0;
    while let Some(batch) = scan.next_batch().await.unwrap() {
        batches += 1;
        assert!(batches < 10_000, "the scan never ends");
        for name in batch {
            assert!(found.insert(name.clone()), "{name} twice");
        }
    }
    assert!(scan.is_done());
    assert_eq!(found, expected);
    assert!(batches > 5, "one SCAN call per batch, {batches} batches");
    assert_eq!(scan.unknown_keys(), ["lock:stray"]);
    assert_eq!(scan.unknown_key_count(), 1);

    let mut all = locks.scan("*");
    let first = all.collect_up_to(50).await.unwrap();
    assert_eq!(first.len(), 50);
    let rest = all.collect_up_to(1000).await.unwrap();
    assert_eq!(first.len() + rest.len(), 62);
    let names: HashSet<String> = first.into_iter().chain(rest).collect();
    assert!(names.contains("supplier") && names.contains("order:{user:7}"));
    assert!(all.is_done());
    drop(guards);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_covers_every_master_of_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let locks = LockClient::cluster_builder(cluster.urls())
        .build()
        .await
        .unwrap();
    let mut guards = Vec::new();
    let mut masters = HashSet::new();
    for i in 0..30 {
        let name = format!("stock:{i}");
        masters.insert(cluster.master_index_for_key(&format!("lock:{{{name}}}")));
        guards.push(locks.lock(&name).acquire().await.unwrap());
    }
    assert_eq!(masters.len(), 3, "the names cover every master");
    let mut names = locks.scan("*").collect_up_to(100).await.unwrap();
    names.sort();
    let mut expected: Vec<String> = (0..30).map(|i| format!("stock:{i}")).collect();
    expected.sort();
    assert_eq!(names, expected);
    let info = locks.lock("stock:7").info().await.unwrap().unwrap();
    assert_eq!(info.holders[0].owner, guards[7].owner());
    drop(guards);
}
