//! What no lock can beat: loopback PING round trips, redis-benchmark's throughput, and the
//! floor (the lock's own scripts and `SET`/`DEL` called raw, with no client logic).

use std::time::{Duration, Instant};

use crate::progress;
use crate::stats::{self, quantile};
use lock_runtime::LockClient;
use lock_tests::RedisServer;

/// The limit: loopback PING round trips and redis-benchmark throughput.
#[derive(Debug, Clone, Default)]
pub(crate) struct Limit {
    pub(crate) ping_p50_us: f64,
    pub(crate) ping_p99_us: f64,
    /// (label, requests/s)
    pub(crate) redis_benchmark: Vec<(String, f64)>,
}

/// `samples` PING round trips to the server at `url`, one request at a time on a connection of
/// their own: how the limit times them, and how each uncontended row times its own
/// ([`crate::uncontended::beside_ping`]).
pub(crate) async fn ping_rtts(url: &str, samples: usize) -> Vec<Duration> {
    let mut conn = redis::Client::open(url)
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
    rtts
}

pub(crate) async fn limit(redis: &RedisServer, samples: usize, requests: usize) -> Limit {
    let mut rtts = ping_rtts(&redis.url(), samples).await;
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

/// The name of our library's function `stem` (`acquire`, `release`) on the server at `url`,
/// loaded there as the client loads it: by taking and releasing a lock.
pub(crate) async fn library_function(url: &str, stem: &str) -> String {
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
