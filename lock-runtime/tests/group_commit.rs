//! Group commit: acquires and releases of one client that queue while others are in flight go
//! to Redis as one script call, with every caller getting its own answer.

mod common;

use std::time::Duration;

use lock_runtime::{LockError, LockOptions};
use lock_tests::RedisServer;

/// `EVALSHA` calls the server has run since the last `CONFIG RESETSTAT`.
fn evalsha_calls(redis: &RedisServer) -> u64 {
    let info = redis.cmd(&["INFO", "commandstats"]);
    let text = info.text().unwrap_or_default().to_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acquires_and_releases_go_out_in_batches() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    redis.cmd(&["CONFIG", "RESETSTAT"]);
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let locks = locks.clone();
            tokio::spawn(async move {
                let guard = locks.lock(format!("g{i}")).acquire().await.unwrap();
                let token = guard.fencing_token();
                let owner = guard.owner().to_owned();
                tokio::time::sleep(Duration::from_millis(5)).await;
                (guard, token, owner)
            })
        })
        .collect();
    let mut guards = Vec::new();
    for t in tasks {
        guards.push(t.await.unwrap());
    }
    // Each lock is held by its own caller's owner id, whichever call carried it.
    for (i, (guard, token, owner)) in guards.iter().enumerate() {
        assert!(*token > 0);
        let fields = redis.cmd(&["HKEYS", &format!("lock:{{g{i}}}")]);
        assert_eq!(fields.items().len(), 1, "g{i}");
        assert_eq!(fields.items()[0].text(), Some(owner.as_str()));
        assert!(!guard.is_lost());
    }
    let releases: Vec<_> = guards
        .into_iter()
        .map(|(guard, ..)| tokio::spawn(guard.release()))
        .collect();
    for r in releases {
        r.await.unwrap().unwrap();
    }
    assert!(redis.keys("lock:{g*").iter().all(|k| k.ends_with(":fence")));
    let calls = evalsha_calls(&redis);
    eprintln!("400 operations in {calls} script calls");
    assert!(
        calls < 400,
        "400 operations in {calls} script calls: nothing was grouped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_cancelled_while_queued_or_in_a_batch_leave_no_lock() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let other = common::client(&redis).await;
    for round in 0..5u64 {
        let tasks: Vec<_> = (0..100u64)
            .map(|i| {
                let locks = locks.clone();
                tokio::spawn(async move {
                    // Cancelled anywhere from before the request is queued to after its batch.
                    let cancel_at = Duration::from_micros((i * 37 + round * 101) % 3000);
                    let lock = locks.lock(format!("c{i}"));
                    if let Ok(guard) = tokio::time::timeout(cancel_at, lock.acquire()).await {
                        drop(guard);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let clean = common::eventually(Duration::from_secs(2), || {
            redis.keys("lock:{c*").iter().all(|k| k.ends_with(":fence"))
        })
        .await;
        assert!(
            clean,
            "round {round}: left behind: {:?}",
            redis.keys("lock:{c*")
        );
        assert!(common::eventually(Duration::from_secs(2), || locks.held_locks() == 0).await);
    }
    for i in 0..100 {
        let guard = other
            .lock(format!("c{i}"))
            .try_acquire(Duration::ZERO)
            .await
            .unwrap_or_else(|e| panic!("c{i} is not free: {e}"));
        guard.release().await.unwrap();
    }
}

/// One request of a batch that meets foreign data gets the typed error; the others in the same
/// call are granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_fails_only_its_own_request_in_a_batch() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    redis.cmd(&["SET", "lock:{f7}", "not a lock"]);
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let locks = locks.clone();
            tokio::spawn(async move {
                locks
                    .lock(format!("f{i}"))
                    .acquire_with(LockOptions::new().wait(Duration::ZERO))
                    .await
            })
        })
        .collect();
    let mut granted = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            Ok(guard) => {
                granted += 1;
                guard.release().await.unwrap();
            }
            Err(LockError::ForeignData { key, found }) => {
                assert_eq!(i, 7);
                assert_eq!(key, "lock:{f7}");
                assert_eq!(found, "string");
            }
            Err(e) => panic!("f{i}: {e:?}"),
        }
    }
    assert_eq!(granted, 49);
    assert_eq!(redis.cmd(&["GET", "lock:{f7}"]).text(), Some("not a lock"));
}
