//! Several OS processes, each with several tasks, take turns on one distributed lock.
//!
//! Run with `cargo run -p example-turns` (starts its own redis-server on a free loopback port
//! unless `REDIS_URL` is set).
//!
//! Every turn checks that nobody else is inside (a marker key in Redis) and prints who holds
//! the lock, with its fencing token and how long it waited. Waiters are woken by the unlock
//! message, not by polling, so the hand-over takes about one round trip.

use std::process::Stdio;
use std::time::{Duration, Instant};

use lock_runtime::LockClient;
use redis::AsyncCommands;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const PROCESSES: usize = 3;
const TASKS: usize = 3;
const TURNS: usize = 3;
const LOCK: &str = "demo:printer";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, mode, url, id] = args.as_slice()
        && mode == "worker"
    {
        return worker(url, id).await;
    }

    let (server, url) = lock_tests::local_redis();
    if server.is_some() {
        println!("started redis-server on {url}");
    }
    let marker = redis::Client::open(url.as_str())?;
    let _: () = marker
        .get_multiplexed_async_connection()
        .await?
        .del(&["demo:inside", "demo:overlaps"])
        .await?;

    println!("{PROCESSES} processes × {TASKS} tasks × {TURNS} turns on lock `{LOCK}`\n");
    let started = Instant::now();
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for p in 0..PROCESSES {
        let mut child = Command::new(&exe)
            .args(["worker", &url, &p.to_string()])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().expect("piped");
        children.push((
            child,
            tokio::spawn(async move {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    println!("{line}");
                }
            }),
        ));
    }
    for (mut child, printer) in children {
        let status = child.wait().await?;
        printer.await?;
        if !status.success() {
            return Err(format!("a worker failed: {status}").into());
        }
    }
    let overlaps: Option<u64> = marker
        .get_multiplexed_async_connection()
        .await?
        .get("demo:overlaps")
        .await?;
    println!(
        "\n{} turns in {:.1?}, overlapping critical sections: {}",
        PROCESSES * TASKS * TURNS,
        started.elapsed(),
        overlaps.unwrap_or(0)
    );
    if overlaps.unwrap_or(0) > 0 {
        return Err("mutual exclusion was violated".into());
    }
    Ok(())
}

async fn worker(url: &str, id: &str) -> Result<(), Box<dyn std::error::Error>> {
    let locks = LockClient::connect(url).await?;
    let redis = redis::Client::open(url)?;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let locks = locks.clone();
        let mut conn = redis.get_multiplexed_async_connection().await?;
        let who = format!("process {id} task {t}");
        tasks.push(tokio::spawn(async move {
            for _ in 0..TURNS {
                let asked = Instant::now();
                let guard = locks.lock(LOCK).acquire().await?;
                let waited = asked.elapsed();
                // Nobody else may be inside: count it if someone is.
                let set: bool = conn.set_nx("demo:inside", &who).await?;
                if !set {
                    let _: () = conn.incr("demo:overlaps", 1).await?;
                }
                println!(
                    "[{who}] holds the lock (fencing token {}) after waiting {:>6.1?}",
                    guard.fencing_token().await?,
                    waited
                );
                tokio::time::sleep(Duration::from_millis(60)).await;
                let _: () = conn.del("demo:inside").await?;
                guard.release().await?;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| e.to_string())?;
    }
    Ok(())
}
