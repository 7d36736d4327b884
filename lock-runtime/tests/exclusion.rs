//! Mutual exclusion under contention: many clients and tasks, one lock, a racy counter.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use lock_tests::RedisServer;
use redis::AsyncCommands;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clients_times_eight_tasks_never_lose_an_increment() {
    const CLIENTS: usize = 3;
    const TASKS: usize = 8;
    const PER_TASK: usize = 100;
    let redis = RedisServer::start();
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for _ in 0..CLIENTS {
        let locks = common::client(&redis).await;
        for _ in 0..TASKS {
            let locks = locks.clone();
            let mut conn = common::conn(&redis).await;
            let (inside, max_inside) = (inside.clone(), max_inside.clone());
            handles.push(tokio::spawn(async move {
                for _ in 0..PER_TASK {
                    let guard = locks.lock("counter").acquire().await.unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_inside.fetch_max(now, Ordering::SeqCst);
                    // Non-atomic read-modify-write: only the lock keeps it correct.
                    let n: Option<u64> = conn.get("counter").await.unwrap();
                    tokio::task::yield_now().await;
                    let _: () = conn.set("counter", n.unwrap_or(0) + 1).await.unwrap();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            }));
        }
    }
    for h in handles {
        h.await.unwrap();
    }
    let mut conn = common::conn(&redis).await;
    let total: u64 = conn.get("counter").await.unwrap();
    assert_eq!(total, (CLIENTS * TASKS * PER_TASK) as u64);
    assert_eq!(
        max_inside.load(Ordering::SeqCst),
        1,
        "two holders overlapped"
    );
    assert!(redis.keys("lock:{counter}").is_empty(), "lock left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_strictly_increase_across_holders() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let mut last = 0;
    for i in 0..50 {
        let locks = if i % 2 == 0 { &a } else { &b };
        let guard = locks.lock("fenced").acquire().await.unwrap();
        assert!(guard.fencing_token() > last, "token went backwards");
        last = guard.fencing_token();
        guard.release().await.unwrap();
    }
    // The counter expires after its retention, but restarts from the server clock, so tokens
    // still increase after it is gone.
    redis.cmd(&["DEL", "lock:{fenced}:fence"]);
    let guard = a.lock("fenced").acquire().await.unwrap();
    assert!(guard.fencing_token() > last);
    let ttl = redis.cmd(&["PTTL", "lock:{fenced}:fence"]).int().unwrap();
    assert!(
        ttl > 0,
        "the fencing counter must carry a retention TTL, got {ttl}"
    );
}
