//! `lock-bench growth <url> [max]`: cost as the work grows. Each measure runs in a fresh
//! `growth-child` process (so one cannot reuse another's freed memory), against a server of
//! your own, for 1k, 10k and 100k (up to `max`):
//!
//! - **held**: that many locks held by one client, the watchdog renewing them (lease 3 s, a
//!   round every second): the client's resident memory and Redis's `used_memory` per lock,
//!   renewal requests and the locks each carries per round, and the client's CPU per round;
//! - **waiters, one name** and **waiters, as many names**: that many tasks waiting: the client's
//!   memory per waiter and the channels it subscribed;
//! - **names over time**: a million distinct names (or `max` × 10), each locked and released
//!   once, 64 tasks at a time: the client's memory after, against before, and what it still
//!   tracks (held locks, subscribed channels).

use std::time::{Duration, Instant};

use lock_runtime::LockClient;

use crate::memory::rss_bytes;

/// `growth` (the command): one line per measure.
pub(crate) async fn growth_only(args: &[String]) {
    let (url, max) = match args {
        [url] => (url.as_str(), 100_000),
        [url, max] => (url.as_str(), max.parse().expect("max")),
        _ => panic!("usage: lock-bench growth <url> [max]"),
    };
    for (what, n, figures) in run(url, max) {
        println!("{what}\t{n}\t{figures}");
    }
}

/// Every measure for 1k, 10k and 100k (up to `max`), and the names over time (`max` × 10):
/// (measure, n, its figures as `key=value` pairs).
pub(crate) fn run(url: &str, max: usize) -> Vec<(&'static str, usize, String)> {
    let exe = std::env::current_exe().expect("own path");
    let child = |what: &str, n: usize| {
        let out = std::process::Command::new(&exe)
            .args(["growth-child", what, url, &n.to_string()])
            .output()
            .expect("run growth-child");
        assert!(
            out.status.success(),
            "growth-child {what} {n}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let mut lines = Vec::new();
    for what in ["held", "waiters-one-name", "waiters-many-names"] {
        for n in [1_000, 10_000, 100_000].into_iter().filter(|&n| n <= max) {
            lines.push((what, n, child(what, n)));
        }
    }
    lines.push(("names-over-time", max * 10, child("names", max * 10)));
    lines
}

/// The report's section.
pub(crate) fn markdown(lines: &[(&'static str, usize, String)]) -> String {
    use std::fmt::Write as _;
    if lines.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\n## Cost as the work grows\n\nEach row in a fresh process (`lock-bench growth <url>`, \
         `src/growth.rs`): **held**, that many locks held by one client, renewed by the \
         watchdog (lease 3 s, a round a second: three rounds measured); **waiters**, that many \
         tasks waiting on one name, or each on a name of its own; **names over time**, that many \
         distinct names locked and released once each, 64 tasks at a time, and what the client \
         keeps after. Memory is the client's resident size (and Redis's `used_memory`) over \
         the count.\n\n| measure | count | figures |\n|---|---|---|\n",
    );
    for (what, n, figures) in lines {
        let _ = writeln!(s, "| {what} | {n} | {} |", figures.replace('\t', ", "));
    }
    s
}

/// The client's CPU time so far (user + system, from `/proc/self/stat`), in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // After the command name in parentheses: fields 14 and 15 (utime, stime) in clock ticks.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

async fn used_memory(conn: &mut redis::aio::MultiplexedConnection) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(conn)
        .await
        .expect("INFO memory");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// `growth-child <what> <url> <n>`: prints its figures, tab-separated `key=value`.
pub(crate) async fn growth_child(args: &[String]) {
    let [what, url, n] = args else {
        panic!("usage: lock-bench growth-child <what> <url> <n>");
    };
    let n: usize = n.parse().expect("n");
    let lease = Duration::from_secs(3);
    let client = LockClient::builder(url.as_str())
        .prefix(format!("bench-growth-{}", std::process::id()))
        .watchdog_timeout(lease)
        .build()
        .await
        .expect("connect");
    let mut probe = redis::Client::open(url.as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    // Warm up: connections, scripts, the runtime's worker threads, allocator pools.
    for i in 0..200 {
        let g = client
            .lock(format!("warm:{i}"))
            .acquire()
            .await
            .expect("warm");
        g.release().await.expect("warm");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let base = rss_bytes() as f64;
    match what.as_str() {
        "held" => held(&client, &mut probe, n, base).await,
        "waiters-one-name" => waiters(&client, url, n, true).await,
        "waiters-many-names" => waiters(&client, url, n, false).await,
        "names" => names(&client, n, base).await,
        other => panic!("unknown measure {other}"),
    }
}

/// `n` locks held, renewed by the watchdog: memory per lock (client and Redis), renewal
/// requests per round, client CPU per round.
async fn held(
    client: &LockClient,
    probe: &mut redis::aio::MultiplexedConnection,
    n: usize,
    base: f64,
) {
    let redis_before = used_memory(probe).await;
    let mut guards = Vec::with_capacity(n);
    for i in 0..n {
        guards.push(
            client
                .lock(format!("h:{i}"))
                .acquire()
                .await
                .expect("acquire"),
        );
    }
    // Two rounds to settle, then three measured.
    let rounds = |c: &LockClient| c.stats().renewal_round_trips;
    let settle = client.stats().renewals;
    renewed(client, settle + 2 * n as u64).await;
    let calls = |info: String| -> f64 {
        (info.lines())
            .filter(|l| l.starts_with("cmdstat_fcall:") || l.starts_with("cmdstat_evalsha:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
            .sum()
    };
    let script_calls = async |probe: &mut redis::aio::MultiplexedConnection| {
        let info: String = (redis::cmd("INFO")
            .arg("commandstats")
            .query_async(probe)
            .await)
            .expect("INFO commandstats");
        calls(info)
    };
    let calls_before = script_calls(probe).await;
    let (requests, renewals, cpu, started) = (
        rounds(client),
        client.stats().renewals,
        cpu_seconds(),
        Instant::now(),
    );
    renewed(client, renewals + 3 * n as u64).await;
    let per_round = |x: f64| x / 3.0;
    let requests = per_round((rounds(client) - requests) as f64);
    let calls = per_round(script_calls(probe).await - calls_before);
    let cpu_ms = per_round(cpu_seconds() - cpu) * 1000.0;
    let took = started.elapsed();
    let client_bytes = (rss_bytes() as f64 - base) / n as f64;
    let redis_bytes = (used_memory(probe).await - redis_before) / n as f64;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    println!(
        "client_bytes_per_lock={client_bytes:.0}\tredis_bytes_per_lock={redis_bytes:.0}\tround_trips_per_round={requests:.1}\tscript_calls_per_round={calls:.0}\tlocks_per_call={:.0}\tclient_cpu_ms_per_round={cpu_ms:.1}\tthree_rounds_took={took:.1?}\tlost={lost}",
        n as f64 / calls.max(1.0),
    );
    for g in guards {
        g.release().await.expect("release");
    }
}

/// Waits until `client` has confirmed `target` renewals in all. Fails the measure when the
/// client loses a lock meanwhile (its renewals stop for good: a loaded machine that missed a
/// round) or after 120 s, rather than waiting for renewals that cannot come. (The client's
/// counters, not each guard's state: this process's CPU per round is one of the figures.)
async fn renewed(client: &LockClient, target: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let losses = client.stats().losses;
    while client.stats().renewals < target {
        let lost = client.stats().losses - losses;
        assert!(
            lost == 0 && Instant::now() < deadline,
            "held: renewals stopped at {} of {target}, {lost} locks lost",
            client.stats().renewals
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `n` tasks waiting, on one name or on as many: memory per waiter, channels subscribed.
async fn waiters(client: &LockClient, url: &str, n: usize, one: bool) {
    let holder = LockClient::builder(url)
        .prefix(format!("bench-growth-{}", std::process::id()))
        .build()
        .await
        .expect("connect");
    let name = |i: usize| {
        if one {
            "w".to_owned()
        } else {
            format!("w:{i}")
        }
    };
    let mut held = Vec::new();
    for i in 0..if one { 1 } else { n } {
        held.push(holder.lock(name(i)).acquire().await.expect("hold"));
    }
    let before = rss_bytes() as f64;
    let mut waiters = Vec::with_capacity(n);
    for i in 0..n {
        let lock = client.lock(name(i));
        waiters.push(tokio::spawn(async move {
            let _ = lock.acquire().await;
        }));
    }
    let want = if one { 1 } else { n };
    let deadline = Instant::now() + Duration::from_secs(120);
    while client.subscribed_channels() < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let per = (rss_bytes() as f64 - before) / n as f64;
    println!(
        "client_bytes_per_waiter={per:.0}\tchannels={}",
        client.subscribed_channels()
    );
    for w in &waiters {
        w.abort();
    }
    for g in held {
        g.release().await.expect("release");
    }
}

/// `n` distinct names locked and released once each, 64 tasks at a time: what is left.
async fn names(client: &LockClient, n: usize, base: f64) {
    let tasks = 64;
    let per_task = n / tasks;
    let mut handles = Vec::new();
    for t in 0..tasks {
        let client = client.clone();
        handles.push(tokio::spawn(async move {
            for i in 0..per_task {
                let g = (client.lock(format!("n:{t}:{i}")).acquire().await).expect("acquire");
                g.release().await.expect("release");
            }
        }));
    }
    for h in handles {
        h.await.expect("task");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!(
        "client_bytes_after_vs_before={:.0}\theld_locks={}\tchannels={}",
        rss_bytes() as f64 - base,
        client.held_locks(),
        client.subscribed_channels()
    );
}
