//! Dropping guards and acquire futures leaves nothing behind.

mod common;

use std::time::{Duration, Instant};

use lock_runtime::LockOptions;
use lock_tests::RedisServer;
use rand::Rng;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_gets_the_lock_within_100ms_of_a_guard_drop() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
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
        let dropped = Instant::now();
        drop(guard);
        let got = waiter.await.unwrap();
        assert!(
            got - dropped < Duration::from_millis(100),
            "{:?}",
            got - dropped
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_storm_leaves_no_hold_subscription_or_watchdog_entry() {
    let redis = RedisServer::start();
    let clients = [
        common::client(&redis).await,
        common::client(&redis).await,
        common::client(&redis).await,
    ];
    let acquired = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..1200usize {
        let acquired = acquired.clone();
        let locks = clients[i % clients.len()].clone();
        tasks.push(tokio::spawn(async move {
            let (cancel_after, hold, key) = {
                let mut rng = rand::rng();
                // Mostly very short windows (cancelled inside the acquire), some long enough to
                // get the lock even on a loaded machine.
                let window = if i % 8 == 0 {
                    20_000..100_000
                } else {
                    0..5_000
                };
                (
                    Duration::from_micros(rng.random_range(window)),
                    Duration::from_micros(rng.random_range(0..500)),
                    format!("storm:{}", rng.random_range(0..4)),
                )
            };
            let lock = locks.lock(&key);
            if i % 2 == 0 {
                // Cancelled by a timeout at a random point of the acquire.
                if let Ok(Ok(g)) = tokio::time::timeout(cancel_after, lock.acquire()).await {
                    acquired.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(hold).await;
                    drop(g);
                }
            } else {
                // Cancelled by losing a select!.
                tokio::select! {
                    g = lock.acquire_with(LockOptions::new().wait(Duration::from_secs(5))) => {
                        if let Ok(g) = g {
                            acquired.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            tokio::time::sleep(hold).await;
                            drop(g);
                        }
                    }
                    _ = tokio::time::sleep(cancel_after) => {}
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Both outcomes happened: some acquired, most were cancelled while waiting.
    let acquired = acquired.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        acquired > 0 && acquired < 1200,
        "{acquired} of 1200 acquired"
    );
    let clean = common::eventually(Duration::from_secs(5), || {
        redis.keys("lock:*").iter().all(|k| k.ends_with(":fence"))
            && redis.pubsub_channels("lock:*").is_empty()
    })
    .await;
    assert!(
        clean,
        "left behind: keys {:?}, channels {:?}",
        redis.keys("lock:*"),
        redis.pubsub_channels("lock:*")
    );
    for c in &clients {
        assert_eq!(c.held_locks(), 0);
        assert_eq!(c.subscribed_channels(), 0);
    }
    // And the next acquire succeeds at once.
    for k in 0..4 {
        let _free = clients[0]
            .lock(format!("storm:{k}"))
            .try_acquire(Duration::ZERO)
            .await
            .expect("free after the storm");
    }
}
