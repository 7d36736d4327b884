//! A lock measured in processes of its own (Redisson's `RLock` or `RFencedLock` in a JVM,
//! redsync in a Go binary), in the same scenarios as the Rust locks. The peer's driver runs the workload and
//! prints what it measured; this side reads it, measures the Redis server around it, and
//! summarises it like the others.
//!
//! The protocol, one line per message on the driver's stdout (`PROGRAM… URL SCENARIO ARGS`):
//!
//! ```text
//! URL uncontended WORKERS RUN_MS  "start" after a warm-up, then "result PAIRS ELAPSED_NS P50_NS P99_NS"
//! URL hot TASKS FIRST             "ready" after a warm-up; reads "go BEGIN_NS UNTIL_NS" on stdin, then
//!                                 "AT_NS WORKER WAIT_NS" per acquisition, optionally "failed N" (lock
//!                                 calls that gave up and were made again)
//! URL wake CYCLES                 "WAKE_NS" per cycle
//! ```
//!
//! Times are `CLOCK_MONOTONIC` nanoseconds, shared with the Rust processes.

use std::process::Stdio;
use std::time::Duration;

use lock_tests::mono_ns;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::hot::{Hot, summarize_hot};
use crate::stats;
use crate::uncontended::{Uncontended, server_cost};
use crate::wake::Wake;

/// A built driver: how to start it, and the name of its rows.
#[derive(Debug, Clone)]
pub(crate) struct ProcessPeer {
    /// The name of the rows.
    pub(crate) name: &'static str,
    /// The program, and the arguments that come before the URL.
    program: String,
    args: Vec<String>,
}

impl ProcessPeer {
    /// A driver started as `program args… URL SCENARIO …`.
    pub(crate) fn new(name: &'static str, program: impl Into<String>, args: Vec<String>) -> Self {
        ProcessPeer {
            name,
            program: program.into(),
            args,
        }
    }

    fn command(&self, url: &str, args: &[String]) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .arg(url)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        cmd
    }

    /// `workers` threads or tasks, each locking and unlocking its own key, after the driver's
    /// warm-up; the server's cost is read around the measured part only.
    pub(crate) async fn uncontended(
        &self,
        url: &str,
        workers: usize,
        run: Duration,
    ) -> Uncontended {
        let name = self.name;
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
        let mut child = self
            .command(url, &args)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}'s driver: {e}"));
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
            "{name}'s uncontended bench failed"
        );
        let (Some((cpu_before, commands_before)), Some(result)) = (before, result) else {
            panic!("{name}'s uncontended bench printed no result");
        };
        let f: Vec<f64> = result.split(' ').filter_map(|x| x.parse().ok()).collect();
        let [pairs, elapsed_ns, p50_ns, p99_ns] = f[..] else {
            panic!("{name}'s uncontended bench: bad result `{result}`");
        };
        Uncontended {
            pairs_per_s: pairs / (elapsed_ns / 1e9),
            p50_us: p50_ns / 1e3,
            p99_us: p99_ns / 1e3,
            server_cpu_us: (after.0 - cpu_before) * 1e6 / pairs.max(1.0),
            command_us: (after.1 - commands_before) / pairs.max(1.0),
            ping_p50_us: 0.0,
        }
    }

    /// `procs` driver processes × `tasks` threads or tasks on one key, all starting at one
    /// instant on the shared monotonic clock once every process has started and warmed up.
    pub(crate) async fn hot(&self, url: &str, procs: usize, tasks: usize, run: Duration) -> Hot {
        let name = self.name;
        let mut children = Vec::new();
        for p in 0..procs {
            let args = ["hot".to_owned(), tasks.to_string(), (p * tasks).to_string()];
            let mut cmd = self.command(url, &args);
            children.push(
                cmd.stdin(Stdio::piped())
                    .spawn()
                    .unwrap_or_else(|e| panic!("start {name}'s driver: {e}")),
            );
        }
        let mut outputs = Vec::new();
        for child in &mut children {
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let ready = lines.next_line().await.unwrap();
            assert_eq!(
                ready.as_deref(),
                Some("ready"),
                "{name}'s hot bench did not start"
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
        let mut gave_up = 0;
        for mut lines in outputs {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(n) = line.strip_prefix("failed ") {
                    gave_up += n.trim().parse::<u64>().unwrap_or(0);
                    continue;
                }
                let f: Vec<u64> = line.split(' ').filter_map(|x| x.parse().ok()).collect();
                if let [at, w, wait_ns] = f[..] {
                    acqs.push((at, w as usize, Duration::from_nanos(wait_ns)));
                }
            }
        }
        for mut child in children {
            assert!(
                child.wait().await.unwrap().success(),
                "{name}'s hot bench failed"
            );
        }
        Hot {
            gave_up,
            ..summarize_hot(acqs, procs * tasks, tasks, run)
        }
    }

    /// Delay from the unlock returning to the waiting thread or task holding the lock, in one
    /// driver process.
    pub(crate) async fn wake(&self, url: &str, cycles: usize) -> Wake {
        let name = self.name;
        let out = self
            .command(url, &["wake".into(), cycles.to_string()])
            .output()
            .await
            .unwrap_or_else(|e| panic!("run {name}'s driver: {e}"));
        assert!(out.status.success(), "{name}'s wake bench failed");
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
