//! Drives the `redisson` crate's fair lock (`AsyncRFairLock`) through the workload of
//! `lock-bench`'s fair-lock scenario: 4 clients × 2 tasks on one lock, each asking again at
//! once after a release.
//!
//! Usage: `peer-redisson-fair <redis-url> <seconds>`. Prints one line per grant,
//! `grant <asked_ns> <granted_ns>` (nanoseconds since this process started), then
//! `failed <n>`: `lock()` calls that returned an error (this fair lock's head-of-queue waiter
//! gives up when the lock is still held, and every waiter after 100 polls of 100 ms); a task
//! whose call failed asks again at once, as a user's retry loop would.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redisson::{AsyncRedissonClient, RedissonConfig};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, seconds] = args.as_slice() else {
        eprintln!("usage: peer-redisson-fair <redis-url> <seconds>");
        std::process::exit(2);
    };
    let run = Duration::from_secs_f64(seconds.parse().expect("seconds: a number"));
    let base = Instant::now();
    let until = base + run;
    let grants: Arc<Mutex<Vec<(u128, u128)>>> = Arc::default();
    let failed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let client = Arc::new(
            AsyncRedissonClient::new(RedissonConfig::single_server(url))
                .await
                .expect("connect"),
        );
        for _ in 0..2 {
            let (client, grants, failed) = (client.clone(), grants.clone(), failed.clone());
            tasks.push(tokio::spawn(async move {
                let lock = client.get_fair_lock("bench-peer:order");
                let mut local = Vec::new();
                while Instant::now() < until {
                    let asked = base.elapsed().as_nanos();
                    if lock.lock().await.is_err() {
                        failed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    local.push((asked, base.elapsed().as_nanos()));
                    let _ = lock.unlock().await;
                }
                grants.lock().unwrap().extend(local);
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    for (asked, granted) in grants.lock().unwrap().iter() {
        println!("grant {asked} {granted}");
    }
    println!("failed {}", failed.load(Ordering::Relaxed));
}
