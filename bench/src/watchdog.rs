//! The watchdog renewing many held locks: script calls, round trips and client CPU per
//! renewal period.

use std::time::{Duration, Instant};

use lock_runtime::LockClient;
use lock_tests::RedisServer;

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

pub(crate) fn cpu_time() -> Duration {
    // utime + stime in clock ticks (100 Hz on Linux).
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

pub(crate) async fn watchdog(redis: &RedisServer, locks: usize, hold: Duration) -> WatchdogFigures {
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
