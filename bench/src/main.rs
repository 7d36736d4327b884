//! Benchmarks: lock-runtime against rslock, a naive `SET NX` + 100 ms polling lock, Redisson's
//! `RLock` in JVMs, redsync in Go processes, and the Redis round-trip limit, all against one
//! local redis-server in one run.
//!
//! Run with `bash scripts/bench.sh` (short mode, about 2 minutes) or
//! `bash scripts/bench.sh --full` (3 repetitions per figure, medians reported). Writes
//! `BENCHMARKS.md` and `bench/chart.svg`.

mod family;
mod impls;
mod process_peer;
mod redisson_jvm;
mod redsync;
mod report;
mod stats;
mod tower;

use std::collections::HashMap;
use std::io::Write;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use impls::{Kind, Locker};
use lock_runtime::LockClient;
use lock_tests::{RedisServer, mono_ns};
use stats::{jain, quantile};

/// How long and how often.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) full: bool,
    pub(crate) reps: usize,
    pub(crate) run: Duration,
    pub(crate) wake_cycles: usize,
    pub(crate) watchdog_hold: Duration,
}

fn progress(msg: &str) {
    eprint!("\r\x1b[2K{msg}");
    let _ = std::io::stderr().flush();
}

/// Uncontended: each worker locks and unlocks its own key.
#[derive(Debug, Clone, Default)]
pub(crate) struct Uncontended {
    pub(crate) pairs_per_s: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    /// Redis server CPU (`INFO cpu`, user + system of the main thread) per pair, in µs.
    pub(crate) server_cpu_us: f64,
    /// Command time (`INFO commandstats`, every command but INFO) per pair, in µs.
    pub(crate) command_us: f64,
}

/// The Redis server's CPU seconds (main thread) and total command µs so far.
async fn server_cost(conn: &mut redis::aio::MultiplexedConnection) -> (f64, f64) {
    let info: String = redis::cmd("INFO")
        .arg("everything")
        .query_async(conn)
        .await
        .unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let cpu = match (
        field("used_cpu_user_main_thread"),
        field("used_cpu_sys_main_thread"),
    ) {
        (Some(u), Some(s)) => u + s,
        _ => field("used_cpu_user").unwrap_or(0.0) + field("used_cpu_sys").unwrap_or(0.0),
    };
    let commands: f64 = info
        .lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
        .filter_map(|l| {
            l.split("usec=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<f64>()
                .ok()
        })
        .sum();
    (cpu, commands)
}

async fn uncontended(kind: Kind, url: &str, workers: usize, run: Duration) -> Uncontended {
    let locker = Locker::connect(kind, url).await;
    let mut probe = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let (cpu_before, commands_before) = server_cost(&mut probe).await;
    let samples = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let mut handles = Vec::new();
    for w in 0..workers {
        let locker = locker.clone();
        let samples = samples.clone();
        handles.push(tokio::spawn(async move {
            // The same names for every contender (runs take turns on one server, each leaving
            // every lock free): no contender's commands carry longer keys than another's.
            let key = format!("u:{w}");
            let mut local = Vec::new();
            while start.elapsed() < run {
                let t = Instant::now();
                let held = locker.acquire(&key).await;
                locker.release(held).await;
                local.push(t.elapsed());
            }
            samples.lock().unwrap().extend(local);
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let elapsed = start.elapsed();
    let (cpu_after, commands_after) = server_cost(&mut probe).await;
    let mut s = std::mem::take(&mut *samples.lock().unwrap());
    let pairs = s.len().max(1) as f64;
    Uncontended {
        pairs_per_s: s.len() as f64 / elapsed.as_secs_f64(),
        p50_us: stats::us(quantile(&mut s, 0.5)),
        p99_us: stats::us(quantile(&mut s, 0.99)),
        server_cpu_us: (cpu_after - cpu_before) * 1e6 / pairs,
        command_us: (commands_after - commands_before) / pairs,
    }
}

/// Hot key: many workers on one key, empty critical section.
#[derive(Debug, Clone, Default)]
pub(crate) struct Hot {
    pub(crate) acq_per_s: f64,
    pub(crate) owner_changes_per_s: f64,
    pub(crate) wait_p50_us: f64,
    pub(crate) wait_p99_us: f64,
    pub(crate) wait_max_us: f64,
    pub(crate) jain: f64,
    /// Jain's index over processes (their workers' acquisitions summed); 1 process: 1.
    pub(crate) jain_processes: f64,
    pub(crate) min_per_worker: u64,
    pub(crate) max_per_worker: u64,
    /// Lock calls that gave up (a peer's bounded retries) and were made again; the wait counts
    /// from the first.
    pub(crate) gave_up: u64,
}

/// One acquisition: when (shared clock), by whom, after waiting how long.
type Acq = (u64, usize, Duration);

async fn hot_workers(kind: Kind, url: &str, tasks: usize, first: usize, until_ns: u64) -> Vec<Acq> {
    let locker = Locker::connect(kind, url).await;
    let acqs = Arc::new(Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for w in 0..tasks {
        let locker = locker.clone();
        let acqs = acqs.clone();
        handles.push(tokio::spawn(async move {
            let key = "hot";
            let mut local = Vec::new();
            while mono_ns() < until_ns {
                let t = Instant::now();
                let held = locker.acquire(key).await;
                let at = mono_ns();
                if at < until_ns {
                    local.push((at, first + w, t.elapsed()));
                }
                locker.release(held).await;
            }
            acqs.lock().unwrap().extend(local);
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    std::mem::take(&mut *acqs.lock().unwrap())
}

fn summarize_hot(mut acqs: Vec<Acq>, workers: usize, per_process: usize, run: Duration) -> Hot {
    acqs.sort_by_key(|a| a.0);
    let changes = acqs.windows(2).filter(|w| w[0].1 != w[1].1).count();
    let mut counts = vec![0u64; workers];
    for a in &acqs {
        counts[a.1] += 1;
    }
    let per_proc: Vec<u64> = counts
        .chunks(per_process.max(1))
        .map(|c| c.iter().sum())
        .collect();
    let mut waits: Vec<Duration> = acqs.iter().map(|a| a.2).collect();
    let secs = run.as_secs_f64();
    Hot {
        acq_per_s: acqs.len() as f64 / secs,
        owner_changes_per_s: changes as f64 / secs,
        wait_p50_us: stats::us(quantile(&mut waits, 0.5)),
        wait_p99_us: stats::us(quantile(&mut waits, 0.99)),
        wait_max_us: stats::us(quantile(&mut waits, 1.0)),
        jain: jain(&counts),
        jain_processes: jain(&per_proc),
        min_per_worker: counts.iter().copied().min().unwrap_or(0),
        max_per_worker: counts.iter().copied().max().unwrap_or(0),
        gave_up: 0,
    }
}

async fn hot_in_process(kind: Kind, url: &str, workers: usize, run: Duration) -> Hot {
    let until = mono_ns() + run.as_nanos() as u64;
    let acqs = hot_workers(kind, url, workers, 0, until).await;
    summarize_hot(acqs, workers, workers, run)
}

async fn hot_processes(kind: Kind, url: &str, procs: usize, tasks: usize, run: Duration) -> Hot {
    // Every child starts at the same instant on the shared clock.
    let begin = mono_ns() + 500_000_000;
    let until = begin + run.as_nanos() as u64;
    let exe = std::env::current_exe().unwrap();
    let mut children = Vec::new();
    for p in 0..procs {
        children.push(
            tokio::process::Command::new(&exe)
                .args(["hot-child", kind.name(), url])
                .args([tasks, p * tasks].map(|n| n.to_string()))
                .args([begin, until].map(|n| n.to_string()))
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .unwrap(),
        );
    }
    let mut acqs = Vec::new();
    for child in children {
        let out = child.wait_with_output().await.unwrap();
        assert!(out.status.success(), "hot child failed");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let f: Vec<u64> = line.split(' ').filter_map(|x| x.parse().ok()).collect();
            if let [at, w, wait_ns] = f[..] {
                acqs.push((at, w as usize, Duration::from_nanos(wait_ns)));
            }
        }
    }
    summarize_hot(acqs, procs * tasks, tasks, run)
}

async fn hot_child(args: &[String]) {
    let [kind, url, tasks, first, begin, until] = args else {
        panic!("hot-child <kind> <url> <tasks> <first> <begin-ns> <until-ns>");
    };
    let kind = Kind::parse(kind).expect("kind");
    let begin: u64 = begin.parse().unwrap();
    let locker_warmup = Locker::connect(kind, url).await;
    drop(locker_warmup);
    tokio::time::sleep(Duration::from_nanos(begin.saturating_sub(mono_ns()))).await;
    let acqs = hot_workers(
        kind,
        url,
        tasks.parse().unwrap(),
        first.parse().unwrap(),
        until.parse().unwrap(),
    )
    .await;
    let mut out = String::new();
    for (at, w, wait) in acqs {
        out.push_str(&format!("{at} {w} {}\n", wait.as_nanos()));
    }
    print!("{out}");
}

/// Wake-up: delay from `release` returning to the (already waiting) waiter holding the lock.
#[derive(Debug, Clone, Default)]
pub(crate) struct Wake {
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) cycles: usize,
}

async fn wake(kind: Kind, url: &str, cycles: usize) -> Wake {
    let holder = Locker::connect(kind, url).await;
    let waiter = Locker::connect(kind, url).await;
    let key = "wake";
    let mut delays = Vec::new();
    for _ in 0..cycles {
        let held = holder.acquire(key).await;
        let acquired = Instant::now();
        let w = waiter.clone();
        let task = tokio::spawn(async move {
            let g = w.acquire(key).await;
            let got = Instant::now();
            w.release(g).await;
            got
        });
        tokio::time::sleep(Duration::from_millis(50).saturating_sub(acquired.elapsed())).await;
        holder.release(held).await;
        let released = Instant::now();
        let got = task.await.unwrap();
        delays.push(got.saturating_duration_since(released));
    }
    Wake {
        p50_us: stats::us(quantile(&mut delays, 0.5)),
        p99_us: stats::us(quantile(&mut delays, 0.99)),
        cycles,
    }
}

/// The watchdog renewing many held locks.
#[derive(Debug, Clone, Default)]
pub(crate) struct WatchdogFigures {
    pub(crate) locks: usize,
    pub(crate) periods: f64,
    pub(crate) commands_per_period: f64,
    pub(crate) round_trips_per_period: f64,
    pub(crate) renewed_per_period: f64,
    pub(crate) cpu_percent: f64,
}

fn cpu_time() -> Duration {
    // utime + stime in clock ticks (100 Hz on Linux).
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096
}

async fn watchdog(redis: &RedisServer, locks: usize, hold: Duration) -> WatchdogFigures {
    let timeout = Duration::from_secs(1);
    let client = LockClient::builder(&redis.url())
        .prefix("bench-wd")
        .watchdog_timeout(timeout)
        .build()
        .await
        .unwrap();
    let mut guards = Vec::with_capacity(locks);
    let ids: Vec<usize> = (0..locks).collect();
    for chunk in ids.chunks(256) {
        let futs: Vec<_> = chunk
            .iter()
            .map(|&i| {
                let c = client.clone();
                tokio::spawn(async move { c.lock(format!("wd:{i}")).acquire().await.unwrap() })
            })
            .collect();
        for f in futs {
            guards.push(f.await.unwrap());
        }
    }
    let before = (
        redis.script_calls(),
        client.stats(),
        cpu_time(),
        Instant::now(),
    );
    tokio::time::sleep(hold).await;
    let after = (
        redis.script_calls(),
        client.stats(),
        cpu_time(),
        Instant::now(),
    );
    let elapsed = after.3 - before.3;
    let periods = elapsed.as_secs_f64() / (timeout.as_secs_f64() / 3.0);
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    assert_eq!(lost, 0, "the watchdog lost locks under load");
    drop(guards);
    WatchdogFigures {
        locks,
        periods,
        commands_per_period: (after.0 - before.0) as f64 / periods,
        round_trips_per_period: (after.1.renewal_round_trips - before.1.renewal_round_trips) as f64
            / periods,
        renewed_per_period: (after.1.renewals - before.1.renewals) as f64 / periods,
        cpu_percent: (after.2 - before.2).as_secs_f64() / elapsed.as_secs_f64() * 100.0,
    }
}

/// Resident memory per waiting task and per held lock.
#[derive(Debug, Clone, Default)]
pub(crate) struct Memory {
    pub(crate) per_waiter_bytes: f64,
    pub(crate) per_held_bytes: f64,
}

async fn memory(url: &str, n: usize, reps: usize) -> Memory {
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

/// `lock-bench uncontended <impl> <url> <workers> <seconds>`: one uncontended run against a
/// server of your own, printed as one line (to compare builds or settings side by side).
async fn uncontended_only(args: &[String]) {
    let [kind, url, workers, secs] = args else {
        panic!("usage: lock-bench uncontended <impl> <url> <workers> <seconds>");
    };
    let kind = Kind::parse(kind).expect("lock-runtime, rslock or naive");
    let workers: usize = workers.parse().expect("workers");
    let run = Duration::from_secs_f64(secs.parse().expect("seconds"));
    let u = uncontended(kind, url, workers, run).await;
    println!(
        "{} workers={workers} pairs/s={:.0} p50={:.0}us p99={:.0}us redis_cpu_per_pair={:.2}us command_us_per_pair={:.2}us",
        kind.name(),
        u.pairs_per_s,
        u.p50_us,
        u.p99_us,
        u.server_cpu_us,
        u.command_us
    );
}

/// `lock-bench hot <impl> <url> <tasks> <seconds>`: one hot-key run of `tasks` tasks in this
/// process against a server of your own, printed as one line.
async fn hot_only(args: &[String]) {
    let [kind, url, tasks, secs] = args else {
        panic!("usage: lock-bench hot <impl> <url> <tasks> <seconds>");
    };
    let kind = Kind::parse(kind).expect("lock-runtime, rslock or naive");
    let tasks: usize = tasks.parse().expect("tasks");
    let run = Duration::from_secs_f64(secs.parse().expect("seconds"));
    let h = hot_in_process(kind, url, tasks, run).await;
    println!(
        "{} tasks={tasks} acq/s={:.0} owner_changes/s={:.0} wait_p50={:.0}us wait_p99={:.0}us jain={:.3}",
        kind.name(),
        h.acq_per_s,
        h.owner_changes_per_s,
        h.wait_p50_us,
        h.wait_p99_us,
        h.jain
    );
}

async fn mem_child(args: &[String]) {
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

/// The limit: loopback PING round trips and redis-benchmark throughput.
#[derive(Debug, Clone, Default)]
pub(crate) struct Limit {
    pub(crate) ping_p50_us: f64,
    pub(crate) ping_p99_us: f64,
    /// (label, requests/s)
    pub(crate) redis_benchmark: Vec<(String, f64)>,
}

async fn limit(redis: &RedisServer, samples: usize, requests: usize) -> Limit {
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut rtts = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
        rtts.push(t.elapsed());
    }
    // The acquire function, loaded as the client loads it, on random keys so every call takes
    // a free lock.
    let acquire = library_function(&redis.url(), "acquire").await;
    let mut rb = Vec::new();
    for (label, args) in [
        ("PING -c 1", vec!["-c", "1", "PING"]),
        ("PING -c 64", vec!["-c", "64", "PING"]),
        ("PING -c 64 -P 16", vec!["-c", "64", "-P", "16", "PING"]),
        ("FCALL acquire -c 1", vec!["-c", "1", "FCALL"]),
        ("FCALL acquire -c 64", vec!["-c", "64", "FCALL"]),
        (
            "FCALL acquire -c 64 -P 16",
            vec!["-c", "64", "-P", "16", "FCALL"],
        ),
    ] {
        progress(&format!("limit: redis-benchmark {label}"));
        let mut cmd = std::process::Command::new("redis-benchmark");
        cmd.args([
            "-h",
            "127.0.0.1",
            "-p",
            &redis.port().to_string(),
            "-q",
            "--csv",
        ])
        .args(["-n", &requests.to_string(), "-r", "1000000"]);
        let (opts, command) = args.split_at(args.len() - 1);
        cmd.args(opts);
        if command[0] == "PING" {
            cmd.args(["PING"]);
        } else {
            // The script a waiting or fenced attempt runs (an uncontended one is a plain
            // `SET`), for this crate's mutex string (`s`), without a token.
            cmd.args([
                "FCALL",
                acquire.as_str(),
                "3",
                "rb:{__rand_int__}",
                "rb:{__rand_int__}:fence",
                "rb:{__rand_int__}:unlock",
                "0a:1",
                "10000",
                "604800000",
                "0",
                "0",
                "s",
            ]);
        }
        let out = cmd
            .output()
            .expect("run redis-benchmark (package redis-tools)");
        let text = String::from_utf8_lossy(&out.stdout);
        // CSV: "test","rps",…
        let rps = text
            .lines()
            .filter(|l| !l.starts_with("\"test\""))
            .find_map(|l| l.split(',').nth(1))
            .and_then(|v| v.trim_matches('"').parse::<f64>().ok())
            .unwrap_or(0.0);
        rb.push((label.to_string(), rps));
    }
    redis.cmd(&["FLUSHALL"]);
    Limit {
        ping_p50_us: stats::us(quantile(&mut rtts, 0.5)),
        ping_p99_us: stats::us(quantile(&mut rtts, 0.99)),
        redis_benchmark: rb,
    }
}

/// All figures of one run.
#[derive(Debug, Default)]
pub(crate) struct Results {
    pub(crate) plan: Option<Plan>,
    pub(crate) limit: Limit,
    pub(crate) floor: Vec<(String, f64, f64)>,
    pub(crate) uncontended_1: HashMap<&'static str, Uncontended>,
    pub(crate) uncontended_64: HashMap<&'static str, Uncontended>,
    pub(crate) hot_tasks: HashMap<&'static str, Hot>,
    pub(crate) hot_procs: HashMap<&'static str, Hot>,
    pub(crate) wake: HashMap<&'static str, Wake>,
    pub(crate) watchdog: WatchdogFigures,
    pub(crate) memory: Memory,
    /// Per scenario: the bare handler, the handler locking itself, the handler under LockLayer.
    pub(crate) tower: Vec<(&'static str, tower::TowerRuns)>,
    pub(crate) family: family::FamilyFigures,
    /// The redsync driver's versions, when it was built (its rows say "not built" otherwise).
    pub(crate) redsync: Option<String>,
}

/// Runs `f` `reps` times and keeps the run with the median of `key`.
async fn median_of<T: Clone, F, Fut>(reps: usize, key: impl Fn(&T) -> f64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut runs = Vec::new();
    for _ in 0..reps {
        runs.push(f().await);
    }
    runs.sort_by(|a, b| key(a).total_cmp(&key(b)));
    runs[runs.len() / 2].clone()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("hot-child") {
        return hot_child(&args[1..]).await;
    }
    if args.first().map(String::as_str) == Some("mem-child") {
        return mem_child(&args[1..]).await;
    }
    if args.first().map(String::as_str) == Some("uncontended") {
        return uncontended_only(&args[1..]).await;
    }
    if args.first().map(String::as_str) == Some("hot") {
        return hot_only(&args[1..]).await;
    }
    let full = args.iter().any(|a| a == "--full");
    let plan = Plan {
        full,
        reps: if full { 3 } else { 1 },
        run: Duration::from_millis(if full { 3000 } else { 1500 }),
        wake_cycles: if full { 200 } else { 100 },
        watchdog_hold: Duration::from_secs(if full { 10 } else { 5 }),
    };
    let started = Instant::now();
    let redis = RedisServer::start();
    let url = redis.url();
    let mut r = Results {
        plan: Some(plan),
        ..Results::default()
    };

    progress("limit: PING round trips");
    r.limit = limit(
        &redis,
        if full { 20_000 } else { 5_000 },
        if full { 200_000 } else { 50_000 },
    )
    .await;

    progress("floor: raw scripts and SET/DEL, 1 worker");
    r.floor = floor(&url, plan.run).await;

    for kind in Kind::ALL {
        contenders(&mut r, plan, &url, Contender::Rust(kind)).await;
    }
    // What group commit does: the same client with it on.
    for (workers, map) in [(1, &mut r.uncontended_1), (64, &mut r.uncontended_64)] {
        progress(&format!(
            "uncontended, {workers} worker(s): {}",
            impls::GROUPED
        ));
        let u = median_of(
            plan.reps,
            |u: &Uncontended| u.pairs_per_s,
            || uncontended(Kind::OursGrouped, &url, workers, plan.run),
        )
        .await;
        map.insert(impls::GROUPED, u);
    }
    // Eager tokens: every grant issues its token (uncontended, and the hot key in one process).
    for (workers, map) in [(1, &mut r.uncontended_1), (64, &mut r.uncontended_64)] {
        progress(&format!(
            "uncontended, {workers} worker(s): {}",
            impls::FENCED
        ));
        let u = median_of(
            plan.reps,
            |u: &Uncontended| u.pairs_per_s,
            || uncontended(Kind::OursFenced, &url, workers, plan.run),
        )
        .await;
        map.insert(impls::FENCED, u);
    }
    progress(&format!("hot key, 1 process × 16 tasks: {}", impls::FENCED));
    let h = median_of(
        plan.reps,
        |h: &Hot| h.acq_per_s,
        || hot_in_process(Kind::OursFenced, &url, 16, plan.run),
    )
    .await;
    r.hot_tasks.insert(impls::FENCED, h);
    if let Some(jvm) = redisson_jvm::find() {
        contenders(&mut r, plan, &url, Contender::Process(&jvm)).await;
    }
    if let Some((go, version)) = redsync::find() {
        contenders(&mut r, plan, &url, Contender::Process(&go)).await;
        r.redsync = Some(version);
    }
    let tower_client = || async {
        LockClient::builder(&url)
            .prefix("bench-tower")
            .build()
            .await
            .unwrap()
    };
    let bare = tower::app(tower::Mode::Bare).await;
    let manual = tower::app(tower::Mode::Manual(tower_client().await)).await;
    let layered = tower::app(tower::Mode::Layer(tower_client().await)).await;
    for (scenario, hot) in [
        ("distinct ids, 64 connections", false),
        ("one hot id, 64 connections", true),
    ] {
        let mut runs = Vec::new();
        for (what, addr) in [
            ("bare handler", bare),
            ("handler locking itself", manual),
            ("with LockLayer", layered),
        ] {
            progress(&format!("tower: {scenario}, {what}"));
            runs.push(
                median_of(
                    plan.reps,
                    |t: &tower::TowerRun| t.req_per_s,
                    || tower::load(addr, 64, plan.run, hot),
                )
                .await,
            );
        }
        let [bare, manual, layer] = <[tower::TowerRun; 3]>::try_from(runs).unwrap();
        r.tower.push((
            scenario,
            tower::TowerRuns {
                bare,
                manual,
                layer,
            },
        ));
    }
    r.family = family::run(&url, plan.run, plan.wake_cycles).await;
    progress("watchdog: 10,000 locks, 1 s watchdog");
    r.watchdog = watchdog(&redis, 10_000, plan.watchdog_hold).await;
    progress("memory: 10,000 waiting tasks, 10,000 held locks");
    r.memory = memory(&url, 10_000, plan.reps).await;
    progress("");
    eprintln!("\rdone in {:.0?}", started.elapsed());

    let versions = report::Versions::collect();
    let md = report::markdown(&r, &versions);
    let out_md = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| "BENCHMARKS.md".into());
    if let Some(dir) = std::path::Path::new(&out_md).parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    std::fs::write(&out_md, &md).expect("write report");
    let svg_path = std::path::Path::new(&out_md)
        .with_file_name("bench")
        .join("chart.svg");
    let _ = std::fs::create_dir_all(svg_path.parent().unwrap());
    std::fs::write(&svg_path, report::svg(&r)).expect("write chart");
    println!("{md}");
    eprintln!("wrote {out_md} and {}", svg_path.display());
}

/// A lock under comparison: one of the Rust locks in this process (and its children), or a
/// peer's in driver processes of its own (Redisson's in JVMs, redsync's in Go binaries).
#[derive(Clone, Copy)]
enum Contender<'a> {
    Rust(Kind),
    Process(&'a process_peer::ProcessPeer),
}

impl Contender<'_> {
    fn name(self) -> &'static str {
        match self {
            Contender::Rust(kind) => kind.name(),
            Contender::Process(peer) => peer.name,
        }
    }

    async fn uncontended(self, url: &str, workers: usize, run: Duration) -> Uncontended {
        match self {
            Contender::Rust(kind) => uncontended(kind, url, workers, run).await,
            Contender::Process(peer) => peer.uncontended(url, workers, run).await,
        }
    }

    /// `procs` processes × `tasks` tasks on one key (one process: this one, for the Rust locks).
    async fn hot(self, url: &str, procs: usize, tasks: usize, run: Duration) -> Hot {
        match self {
            Contender::Rust(kind) if procs == 1 => hot_in_process(kind, url, tasks, run).await,
            Contender::Rust(kind) => hot_processes(kind, url, procs, tasks, run).await,
            Contender::Process(peer) => peer.hot(url, procs, tasks, run).await,
        }
    }

    async fn wake(self, url: &str, cycles: usize) -> Wake {
        match self {
            Contender::Rust(kind) => wake(kind, url, cycles).await,
            Contender::Process(peer) => peer.wake(url, cycles).await,
        }
    }
}

/// The scenarios every lock runs: uncontended with 1 and 64 workers, the hot key in one and in
/// four processes, and wake-up; medians of `plan.reps` runs go into `r` under its name.
async fn contenders(r: &mut Results, plan: Plan, url: &str, lock: Contender<'_>) {
    let n = lock.name();
    for (workers, map) in [(1, &mut r.uncontended_1), (64, &mut r.uncontended_64)] {
        progress(&format!("uncontended, {workers} worker(s): {n}"));
        let u = median_of(
            plan.reps,
            |u: &Uncontended| u.pairs_per_s,
            || lock.uncontended(url, workers, plan.run),
        )
        .await;
        map.insert(n, u);
    }
    for (procs, tasks, map) in [(1, 16, &mut r.hot_tasks), (4, 4, &mut r.hot_procs)] {
        progress(&format!(
            "hot key, {procs} process(es) × {tasks} tasks: {n}"
        ));
        let h = median_of(
            plan.reps,
            |h: &Hot| h.acq_per_s,
            || lock.hot(url, procs, tasks, plan.run),
        )
        .await;
        map.insert(n, h);
    }
    progress(&format!("wake-up, {} cycles: {n}", plan.wake_cycles));
    let w = median_of(
        plan.reps,
        |w: &Wake| w.p50_us,
        || lock.wake(url, plan.wake_cycles),
    )
    .await;
    r.wake.insert(n, w);
}

/// The name of our library's function `stem` (`acquire`, `release`) on the server at `url`,
/// loaded there as the client loads it: by taking and releasing a lock.
async fn library_function(url: &str, stem: &str) -> String {
    let client = LockClient::connect(url).await.unwrap();
    let guard = client.lock("bench:load").acquire().await.unwrap();
    guard.release().await.unwrap();
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let libraries: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg("lockrt_*")
        .query_async(&mut conn)
        .await
        .unwrap();
    let names = format!("{libraries:?}");
    // `lockrt_<hash>_<stem>` exactly (`release` is not `fair_release`).
    names
        .split(['"', '\''])
        .find(|s| {
            s.strip_prefix("lockrt_")
                .and_then(|rest| rest.split_once('_'))
                .is_some_and(|(_, function)| function == stem)
        })
        .unwrap_or_else(|| panic!("no function {stem} in {names}"))
        .to_owned()
}

/// The floor for one lock/unlock pair: our uncontended pair called raw (no client logic: the
/// plain `SET NX PX GET` of a first attempt and the release function) on the two connection
/// types, and plain `SET NX` + `DEL` for comparison. (label, pairs/s, p50 µs)
pub(crate) async fn floor(url: &str, run: Duration) -> Vec<(String, f64, f64)> {
    let client = redis::Client::open(url).unwrap();
    let mut cm = redis::aio::ConnectionManager::new(client.clone())
        .await
        .unwrap();
    let mut mc = client.get_multiplexed_async_connection().await.unwrap();
    let release = library_function(url, "release").await;
    let mut out = Vec::new();
    for (label, which) in [
        (
            "our plain acquire + release function, raw, on a ConnectionManager",
            0,
        ),
        (
            "our plain acquire + release function, raw, on a MultiplexedConnection",
            1,
        ),
        ("SET NX PX + DEL (no script), on a ConnectionManager", 2),
    ] {
        let mut samples = Vec::new();
        let start = Instant::now();
        while start.elapsed() < run {
            let t = Instant::now();
            match which {
                0 | 1 => {
                    let mut a = redis::cmd("SET");
                    a.arg("f:{k}")
                        .arg("0a:1")
                        .arg("NX")
                        .arg("PX")
                        .arg(10_000)
                        .arg("GET");
                    let mut r = redis::cmd("FCALL");
                    r.arg(&release)
                        .arg(3)
                        .arg(&["f:{k}", "f:{k}:unlock", "f:{k}:fence"])
                        .arg("0a:1")
                        .arg("s");
                    if which == 0 {
                        let _: redis::Value = a.query_async(&mut cm).await.unwrap();
                        let _: redis::Value = r.query_async(&mut cm).await.unwrap();
                    } else {
                        let _: redis::Value = a.query_async(&mut mc).await.unwrap();
                        let _: redis::Value = r.query_async(&mut mc).await.unwrap();
                    }
                }
                _ => {
                    let _: redis::Value = redis::cmd("SET")
                        .arg("f:s")
                        .arg("o")
                        .arg("NX")
                        .arg("PX")
                        .arg(10_000)
                        .query_async(&mut cm)
                        .await
                        .unwrap();
                    let _: redis::Value = redis::cmd("DEL")
                        .arg("f:s")
                        .query_async(&mut cm)
                        .await
                        .unwrap();
                }
            }
            samples.push(t.elapsed());
        }
        let pairs = samples.len() as f64 / start.elapsed().as_secs_f64();
        out.push((
            label.to_string(),
            pairs,
            stats::us(quantile(&mut samples, 0.5)),
        ));
    }
    out
}
