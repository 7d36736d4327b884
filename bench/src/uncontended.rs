//! Uncontended: each worker locks and unlocks its own key; what a pair costs the client and
//! the Redis server. Also the `uncontended` command (one run against a server of your own).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::contenders::{self, Contender};
use crate::impls::{Kind, Locker};
use crate::stats::{self, quantile};

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
    /// The server's PING round trip p50 in µs, timed beside this run ([`beside_ping`]); 0 when
    /// it was not.
    pub(crate) ping_p50_us: f64,
}

/// How many PINGs [`beside_ping`] times per run: half right before it, half right after.
pub(crate) const PING_BESIDE: usize = 2_000;

/// `run` (a future not started yet) with the server's PING p50 timed beside it: half the PINGs
/// right before the run, half right after, on the same server and the same way as the limit's,
/// and their p50 taken together. The pair p50 is then compared with the round trip over the
/// run's own span (on a busy machine a short window of PINGs alone swings by 2×), not with
/// one PING figure of the whole benchmark.
pub(crate) async fn beside_ping(
    url: &str,
    run: impl std::future::Future<Output = Uncontended>,
) -> Uncontended {
    let mut rtts = crate::limit::ping_rtts(url, PING_BESIDE / 2).await;
    let u = run.await;
    rtts.extend(crate::limit::ping_rtts(url, PING_BESIDE / 2).await);
    Uncontended {
        ping_p50_us: stats::us(quantile(&mut rtts, 0.5)),
        ..u
    }
}

/// The Redis server's CPU seconds (main thread) and total command µs so far.
pub(crate) async fn server_cost(conn: &mut redis::aio::MultiplexedConnection) -> (f64, f64) {
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

pub(crate) async fn uncontended(
    kind: Kind,
    url: &str,
    workers: usize,
    run: Duration,
) -> Uncontended {
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
        ping_p50_us: 0.0,
    }
}

/// `lock-bench uncontended <impl> <url> <workers> <seconds>`: one uncontended run against a
/// server of your own, with the PING p50 timed beside it, printed as one line (to compare
/// builds or settings side by side). `<impl>` is a row's name: a Rust lock's, or a built peer's
/// (`redisson (JVM)`, `redisson RFencedLock (JVM)`, `redsync`).
pub(crate) async fn uncontended_only(args: &[String]) {
    let [name, url, workers, secs] = args else {
        panic!("usage: lock-bench uncontended <impl> <url> <workers> <seconds>");
    };
    let peers = contenders::peers_for(name);
    let lock = Contender::named(name, &peers).unwrap_or_else(|| panic!("no lock named {name:?}"));
    let workers: usize = workers.parse().expect("workers");
    let run = Duration::from_secs_f64(secs.parse().expect("seconds"));
    let u = lock.uncontended(url, workers, run).await;
    println!(
        "{} workers={workers} pairs/s={:.0} p50={:.0}us p99={:.0}us ping_p50={:.0}us p50/ping={:.2} redis_cpu_per_pair={:.2}us command_us_per_pair={:.2}us",
        lock.name(),
        u.pairs_per_s,
        u.p50_us,
        u.p99_us,
        u.ping_p50_us,
        u.p50_us / u.ping_p50_us,
        u.server_cpu_us,
        u.command_us
    );
}
