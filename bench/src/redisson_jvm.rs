//! Redisson's `RLock` in a JVM, in the same scenarios as the Rust locks: the `Bench` class of
//! the interop driver (`interop/redisson`, built with Maven by `lock_tests::redisson`) runs the
//! workload and prints what it measured; this side reads it, measures the Redis server around
//! it, and summarises it like the others. Needs `java` and `mvn` (`scripts/bench.sh` installs
//! them where missing); without them the rows are left out.

use std::process::Stdio;
use std::time::Duration;

use lock_tests::mono_ns;
use lock_tests::redisson::{REDISSON_4, classpath, try_build};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::{Hot, Uncontended, Wake, server_cost, stats, summarize_hot};

/// The name of the rows.
pub(crate) const NAME: &str = "redisson (JVM)";

/// A built driver.
#[derive(Debug, Clone)]
pub(crate) struct Jvm {
    classpath: String,
}

impl Jvm {
    /// Builds (or finds) the driver with the newest Redisson 4.x; `None`, with the reason on
    /// stderr, when it cannot.
    pub(crate) fn find() -> Option<Jvm> {
        match try_build(REDISSON_4) {
            Ok(dir) => Some(Jvm {
                classpath: classpath(&dir),
            }),
            Err(e) => {
                eprintln!("bench: Redisson's rows are left out: {e}");
                None
            }
        }
    }

    fn command(&self, url: &str, args: &[String]) -> Command {
        let mut cmd = Command::new("java");
        cmd.args(["-cp", &self.classpath, "lockinterop.Bench", url])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        cmd
    }

    /// `workers` threads, each locking and unlocking its own key, after a 1 s warm-up; the
    /// server's cost is read around the measured part only.
    pub(crate) async fn uncontended(
        &self,
        url: &str,
        workers: usize,
        run: Duration,
    ) -> Uncontended {
        let mut probe = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let args = [
            "uncontended".into(),
            workers.to_string(),
            run.as_millis().to_string(),
        ];
        let mut child = self.command(url, &args).spawn().expect("start java");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut before = None;
        let mut result = None;
        while let Some(line) = lines.next_line().await.unwrap() {
            if line == "start" {
                before = Some(server_cost(&mut probe).await);
            } else if let Some(rest) = line.strip_prefix("result ") {
                result = Some(rest.to_owned());
            }
        }
        let after = server_cost(&mut probe).await;
        assert!(
            child.wait().await.unwrap().success(),
            "Redisson bench failed"
        );
        let (Some((cpu_before, commands_before)), Some(result)) = (before, result) else {
            panic!("Redisson bench printed no result");
        };
        let f: Vec<f64> = result.split(' ').filter_map(|x| x.parse().ok()).collect();
        let [pairs, elapsed_ns, p50_ns, p99_ns] = f[..] else {
            panic!("Redisson bench: bad result `{result}`");
        };
        Uncontended {
            pairs_per_s: pairs / (elapsed_ns / 1e9),
            p50_us: p50_ns / 1e3,
            p99_us: p99_ns / 1e3,
            server_cpu_us: (after.0 - cpu_before) * 1e6 / pairs.max(1.0),
            command_us: (after.1 - commands_before) / pairs.max(1.0),
        }
    }

    /// `procs` JVMs × `tasks` threads on one key, all starting at one instant on the shared
    /// monotonic clock once every JVM has started and warmed up.
    pub(crate) async fn hot(&self, url: &str, procs: usize, tasks: usize, run: Duration) -> Hot {
        let mut children = Vec::new();
        for p in 0..procs {
            let args = ["hot".to_owned(), tasks.to_string(), (p * tasks).to_string()];
            let mut cmd = self.command(url, &args);
            children.push(cmd.stdin(Stdio::piped()).spawn().expect("start java"));
        }
        let mut outputs = Vec::new();
        for child in &mut children {
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let ready = lines.next_line().await.unwrap();
            assert_eq!(
                ready.as_deref(),
                Some("ready"),
                "Redisson hot bench did not start"
            );
            outputs.push(lines);
        }
        let begin = mono_ns() + 200_000_000;
        let until = begin + run.as_nanos() as u64;
        for child in &mut children {
            let mut stdin = child.stdin.take().unwrap();
            stdin
                .write_all(format!("go {begin} {until}\n").as_bytes())
                .await
                .unwrap();
        }
        let mut acqs = Vec::new();
        for mut lines in outputs {
            while let Some(line) = lines.next_line().await.unwrap() {
                let f: Vec<u64> = line.split(' ').filter_map(|x| x.parse().ok()).collect();
                if let [at, w, wait_ns] = f[..] {
                    acqs.push((at, w as usize, Duration::from_nanos(wait_ns)));
                }
            }
        }
        for mut child in children {
            assert!(
                child.wait().await.unwrap().success(),
                "Redisson hot bench failed"
            );
        }
        summarize_hot(acqs, procs * tasks, tasks, run)
    }

    /// Delay from `unlock` returning to the waiting thread holding the lock, in one JVM.
    pub(crate) async fn wake(&self, url: &str, cycles: usize) -> Wake {
        let out = self
            .command(url, &["wake".into(), cycles.to_string()])
            .output()
            .await
            .expect("run java");
        assert!(out.status.success(), "Redisson wake bench failed");
        let mut delays: Vec<Duration> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .map(Duration::from_nanos)
            .collect();
        Wake {
            p50_us: stats::us(stats::quantile(&mut delays, 0.5)),
            p99_us: stats::us(stats::quantile(&mut delays, 0.99)),
            cycles,
        }
    }
}
