//! What Redisson fair waiters cost Redis while they wait: a measurement, not a check (run it
//! with `cargo test -p lock-runtime --test redisson -- --ignored --nocapture cost::`).
//!
//! A waiter's refresh runs a fixed number of commands (11) wherever it is in the queue; the
//! first waiter's also moves every deadline behind it (2 commands per waiter), which spread
//! over all refreshes is 2 more per call. So the commands per call stay at 13 whatever the
//! queue's length, and Redis's time grows linearly with the number of waiters (on a loaded
//! 2-core machine: about 8 ms of CPU per second for 500 waiters, about 30 ms for 2000).

use std::time::Duration;

use lock_runtime::{Layout, LockClient};
use lock_tests::RedisServer;

/// The `usec` and `calls` of `cmd` in `INFO commandstats`.
fn command_stats(redis: &RedisServer, cmd: &str) -> (u64, u64) {
    let info = redis.cmd(&["INFO", "commandstats"]);
    let text = info.text().unwrap_or_default().to_owned();
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("cmdstat_{cmd}:")))
        .unwrap_or_default()
        .to_owned();
    let field = |name: &str| {
        line.split(&[':', ','][..])
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("usec"), field("calls"))
}

/// The CPU seconds Redis's main thread used so far (user and system): what the commands cost,
/// however loaded the machine (unlike `usec`, which counts time the thread was preempted).
fn main_thread_cpu(redis: &RedisServer) -> f64 {
    let info = redis.cmd(&["INFO", "cpu"]);
    info.text()
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.starts_with("used_cpu_user_main_thread:")
                || l.starts_with("used_cpu_sys_main_thread:")
        })
        .filter_map(|l| l.split_once(':')?.1.trim().parse::<f64>().ok())
        .sum()
}

/// Every command's calls in `INFO commandstats` (those a script runs included).
fn all_calls(redis: &RedisServer) -> Vec<(String, u64)> {
    let info = redis.cmd(&["INFO", "commandstats"]);
    let text = info.text().unwrap_or_default().to_owned();
    text.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// `n` Rust waiters queue for a Redisson fair lock that a Java service holds for the whole
/// run; for 10 s only their refreshes run (and the holder's renewals, 2 per second). Prints
/// the Redis time the scripts cost per second.
async fn refresh_cost(n: usize) {
    let redis = RedisServer::start();
    let rust = LockClient::builder(&redis.url())
        .layout(Layout::Redisson)
        .build()
        .await
        .unwrap();
    let name = "fair:cost";
    // A Java holder whose watchdog keeps a short lease renewed: the queue's deadlines start
    // near `now + 300 s`, so the first waiter keeps raising its own (and those behind it) at
    // every refresh, as it does once any lock has been held for a while.
    redis.cmd(&["HSET", name, "0b1c2d3e-0000-4000-8000-000000000001:1", "1"]);
    redis.cmd(&["PEXPIRE", name, "2000"]);
    let holder = {
        let url = redis.url();
        tokio::spawn(async move {
            let mut conn = redis::Client::open(url)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            loop {
                let _: () = redis::cmd("PEXPIRE")
                    .arg(name)
                    .arg(2000)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let waiters: Vec<_> = (0..n)
        .map(|_| {
            let rust = rust.clone();
            tokio::spawn(async move { rust.fair_lock(name).acquire().await })
        })
        .collect();
    let queue = format!("redisson_lock_queue:{{{name}}}");
    while redis.cmd(&["LLEN", &queue]).int() != Some(n as i64) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Past the first refreshes of the ones that queued last.
    tokio::time::sleep(Duration::from_secs(2)).await;
    redis.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "500"]);
    redis.cmd(&["CONFIG", "SET", "slowlog-max-len", "10000"]);
    redis.cmd(&["SLOWLOG", "RESET"]);
    redis.cmd(&["CONFIG", "RESETSTAT"]);
    let cpu = main_thread_cpu(&redis);
    let run = Duration::from_secs(10);
    tokio::time::sleep(run).await;
    let cpu = main_thread_cpu(&redis) - cpu;
    let (usec, calls) = command_stats(&redis, "evalsha");
    // The commands the scripts ran (the holder's PEXPIREs and this test's own left out): work
    // that does not depend on how loaded the machine is.
    let inner: u64 = all_calls(&redis)
        .iter()
        .filter(|(name, _)| {
            !["evalsha", "pexpire", "config", "slowlog", "info"].contains(&name.as_str())
        })
        .map(|(_, calls)| calls)
        .sum();
    // The first waiter's refreshes (its owner id is the script's first argument).
    let head = redis
        .cmd(&["LINDEX", &queue, "0"])
        .text()
        .unwrap()
        .to_owned();
    let mut head_calls: Vec<i64> = redis
        .cmd(&["SLOWLOG", "GET", "10000"])
        .items()
        .iter()
        .filter(|entry| {
            entry.items()[3]
                .items()
                .iter()
                .any(|arg| arg.text() == Some(&head))
        })
        .filter_map(|entry| entry.items()[2].int())
        .collect();
    head_calls.sort_unstable();
    eprintln!(
        "{n} fair waiters: Redis main thread {:.1} ms CPU per second; scripts {:.1} ms per \
         second (usec), {:.0} script calls/s running \
         {:.0} commands/s ({:.1} per call), {:.1} µs per call; the first waiter's refreshes \
         over 0.5 ms: {head_calls:?} µs",
        cpu * 1000.0 / run.as_secs_f64(),
        usec as f64 / 1000.0 / run.as_secs_f64(),
        calls as f64 / run.as_secs_f64(),
        inner as f64 / run.as_secs_f64(),
        inner as f64 / calls.max(1) as f64,
        usec as f64 / calls.max(1) as f64,
    );
    holder.abort();
    for w in waiters {
        w.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: prints the Redis time fair waiters cost"]
async fn fair_refresh_cost() {
    for n in [500, 2000] {
        refresh_cost(n).await;
    }
}
