//! Cross-process behaviour: exclusion between OS processes, and a holder killed with SIGKILL.

use std::process::Stdio;
use std::time::{Duration, Instant};

use lock_runtime::LockClient;
use lock_tests::RedisServer;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const WORKER: &str = env!("CARGO_BIN_EXE_lock-worker");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_never_lose_an_increment() {
    const PROCESSES: usize = 3;
    const TASKS: usize = 4;
    const PER_TASK: usize = 60;
    let redis = RedisServer::start();
    let mut children = Vec::new();
    for _ in 0..PROCESSES {
        children.push(
            Command::new(WORKER)
                .args(["count", &redis.url(), "shared", "counter"])
                .args([TASKS.to_string(), PER_TASK.to_string()])
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("spawn lock-worker"),
        );
    }
    for child in children {
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("worker finished in time")
            .unwrap();
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("done {}", TASKS * PER_TASK)
        );
    }
    let total = redis.cmd(&["GET", "counter"]);
    assert_eq!(
        total.text().and_then(|t| t.parse::<usize>().ok()),
        Some(PROCESSES * TASKS * PER_TASK)
    );
    assert!(redis.keys("lock:{shared}").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_with_sigkill_frees_the_lock_within_its_lease() {
    let redis = RedisServer::start();
    let mut holder = Command::new(WORKER)
        .args(["hold", &redis.url(), "crash", "1000"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn lock-worker");
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let token: u64 = line.strip_prefix("held ").unwrap().parse().unwrap();

    let locks = LockClient::connect(&redis.url()).await.unwrap();
    // Alive holder: renewed past its 1 s lease.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        locks
            .lock("crash")
            .try_acquire(Duration::ZERO)
            .await
            .unwrap_err()
            .is_busy()
    );

    holder.start_kill().unwrap(); // SIGKILL: no release, no goodbye
    holder.wait().await.unwrap();
    let killed = Instant::now();
    let guard = locks
        .lock("crash")
        .try_acquire(Duration::from_secs(3))
        .await
        .expect("the lease of a dead holder runs out");
    let after = killed.elapsed();
    assert!(after < Duration::from_millis(2000), "took {after:?}"); // lease 1 s + 1 s
    assert!(guard.fencing_token() > token);
    guard.release().await.unwrap();
}
