//! Resident memory per waiting task and per held lock, each measured in a fresh `mem-child`
//! process.

use std::time::Duration;

use lock_runtime::LockClient;

/// Resident memory per waiting task and per held lock.
#[derive(Debug, Clone, Default)]
pub(crate) struct Memory {
    pub(crate) per_waiter_bytes: f64,
    pub(crate) per_held_bytes: f64,
}

pub(crate) fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096
}

pub(crate) async fn memory(url: &str, n: usize, reps: usize) -> Memory {
    // Each measure in a fresh process, so one cannot reuse the other's freed memory; the median
    // of `reps` processes (a process's resident size after the same work varies by a tenth from
    // run to run: the allocator's arenas).
    let exe = std::env::current_exe().unwrap();
    let once = |what: &str| {
        let out = std::process::Command::new(&exe)
            .args(["mem-child", what, url, &n.to_string()])
            .output()
            .expect("run mem-child");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<f64>()
            .unwrap_or(f64::NAN)
    };
    let per = |what: &str| {
        let mut runs: Vec<f64> = (0..reps.max(1)).map(|_| once(what)).collect();
        runs.sort_by(f64::total_cmp);
        runs[runs.len() / 2]
    };
    Memory {
        per_waiter_bytes: per("waiters"),
        per_held_bytes: per("held"),
    }
}

pub(crate) async fn mem_child(args: &[String]) {
    let [what, url, n] = args else {
        panic!("mem-child <waiters|held> <url> <n>");
    };
    let n: usize = n.parse().unwrap();
    let holder = LockClient::connect(url).await.unwrap();
    let client = LockClient::builder(url)
        .prefix("bench-mem")
        .build()
        .await
        .unwrap();
    // Warm up: connections, scripts, the runtime's worker threads, allocator pools.
    for i in 0..200 {
        let g = client.lock(format!("warm:{i}")).acquire().await.unwrap();
        g.release().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let base = rss_bytes();
    let per = if what == "waiters" {
        let _hold = holder.lock("mem:hot").acquire().await.unwrap();
        let mut waiters = Vec::with_capacity(n);
        for _ in 0..n {
            let c = client.clone();
            waiters.push(tokio::spawn(async move {
                let _ = c.lock("mem:hot").acquire().await;
            }));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let per = rss_bytes().saturating_sub(base) as f64 / n as f64;
        for w in &waiters {
            w.abort();
        }
        per
    } else {
        let mut guards = Vec::with_capacity(n);
        for i in 0..n {
            guards.push(
                client
                    .lock(format!("mem:{i}"))
                    .acquire_with(lock_runtime::LockOptions::new().lease(Duration::from_secs(60)))
                    .await
                    .unwrap(),
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let per = rss_bytes().saturating_sub(base) as f64 / n as f64;
        drop(guards);
        per
    };
    println!("{per:.0}");
}
