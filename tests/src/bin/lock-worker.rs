//! A separate OS process that uses the lock, for multi-process and crash tests.
//!
//! ```text
//! lock-worker count <redis-url> <lock> <counter-key> <tasks> <increments-per-task>
//!     increments <counter-key> with a non-atomic GET → yield → SET under <lock>; prints
//!     `done <n>` and exits.
//! lock-worker hold <redis-url> <lock> <watchdog-ms>
//!     takes <lock> with the watchdog, prints `held <fencing-token>`, then sleeps until killed.
//! ```

use std::time::Duration;

use lock_runtime::LockClient;
use redis::AsyncCommands;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["count", url, lock, key, tasks, n] => {
            let tasks: usize = tasks.parse().expect("tasks");
            let n: usize = n.parse().expect("increments");
            let locks = LockClient::connect(url).await.expect("connect");
            let redis = redis::Client::open(*url).expect("url");
            let mut handles = Vec::new();
            for _ in 0..tasks {
                let locks = locks.clone();
                let mut conn = redis
                    .get_multiplexed_async_connection()
                    .await
                    .expect("conn");
                let (lock, key) = (lock.to_string(), key.to_string());
                handles.push(tokio::spawn(async move {
                    for _ in 0..n {
                        let guard = locks.lock(&lock).acquire().await.expect("acquire");
                        let v: Option<u64> = conn.get(&key).await.expect("get");
                        tokio::task::yield_now().await;
                        let _: () = conn.set(&key, v.unwrap_or(0) + 1).await.expect("set");
                        guard.release().await.expect("release");
                    }
                }));
            }
            for h in handles {
                h.await.expect("task");
            }
            println!("done {}", tasks * n);
        }
        ["hold", url, lock, watchdog_ms] => {
            let locks = LockClient::builder(url)
                .watchdog_timeout(Duration::from_millis(watchdog_ms.parse().expect("ms")))
                .build()
                .await
                .expect("connect");
            let guard = locks.lock(lock).acquire().await.expect("acquire");
            println!("held {}", guard.fencing_token());
            std::future::pending::<()>().await;
        }
        _ => {
            eprintln!(
                "usage: lock-worker count <url> <lock> <key> <tasks> <n> | hold <url> <lock> <watchdog-ms>"
            );
            std::process::exit(2);
        }
    }
}
