//! `Lock::info` and `LockClient::scan` against real servers: foreign data, and how a scan
//! finds names (batches, patterns, foreign keys, every master of a cluster). What `info` reads
//! of every member of the family is a shared behaviour test (`behaviour/inspect.rs`).

use crate::common;

use std::collections::HashSet;

use lock_runtime::{LockClient, LockError};
use lock_tests::RedisServer;
use lock_tests::topology::RedisCluster;

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

/// `waiting()` has one meaning for every kind: at least how many tasks wait. Two tasks of one
/// client and one task of another wait: a mutex knows the two subscribed clients (a lower
/// bound), a fair lock's queue knows all three tasks (exact).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_is_a_lower_bound_on_waiting_tasks_exact_for_a_fair_lock() {
    let redis = RedisServer::start();
    let holder = common::client(&redis).await;
    let b = common::client(&redis).await;
    let c = common::client(&redis).await;

    let held = holder.lock("stock:42").acquire().await.unwrap();
    let waiters: Vec<_> = [&b, &b, &c]
        .into_iter()
        .map(|client| {
            let lock = client.lock("stock:42");
            tokio::spawn(async move { lock.acquire().await?.release().await })
        })
        .collect();
    let counted =
        lock_tests::until_info(&holder.lock("stock:42"), |i| i.waiters.subscribed == 2).await;
    assert!(
        counted,
        "the two waiting clients' subscriptions were not counted"
    );
    let info = holder.lock("stock:42").info().await.unwrap().unwrap();
    assert_eq!(info.waiting(), 2, "{info:?}");
    assert!(info.waiting() <= waiters.len());
    held.release().await.unwrap();
    for waiter in waiters {
        lock_tests::granted(waiter).await;
    }

    let turn = holder.fair_lock("drop:1").acquire().await.unwrap();
    let waiters: Vec<_> = [&b, &b, &c]
        .into_iter()
        .map(|client| {
            let lock = client.fair_lock("drop:1");
            tokio::spawn(async move { lock.acquire().await?.release().await })
        })
        .collect();
    let queued =
        lock_tests::until_info(&holder.fair_lock("drop:1"), |i| i.waiters.queued == 3).await;
    assert!(queued, "the three waiting tasks were not queued");
    let info = holder.fair_lock("drop:1").info().await.unwrap().unwrap();
    assert_eq!(info.waiting(), 3, "{info:?}");
    turn.release().await.unwrap();
    for waiter in waiters {
        lock_tests::granted(waiter).await;
    }
}
