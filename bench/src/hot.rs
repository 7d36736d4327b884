//! The hot key: many workers on one key, in one process or in several (the `hot-child`
//! processes), their acquisitions summarised as throughput, owner changes, waits and fairness.
//! Also the `hot` command (one run against a server of your own).

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::contenders::{self, Contender};
use crate::impls::{Kind, Locker};
use crate::stats::{self, jain, quantile};
use lock_tests::mono_ns;

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
pub(crate) type Acq = (u64, usize, Duration);

pub(crate) async fn hot_workers(
    kind: Kind,
    url: &str,
    tasks: usize,
    first: usize,
    until_ns: u64,
) -> Vec<Acq> {
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

pub(crate) fn summarize_hot(
    mut acqs: Vec<Acq>,
    workers: usize,
    per_process: usize,
    run: Duration,
) -> Hot {
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

pub(crate) async fn hot_in_process(kind: Kind, url: &str, workers: usize, run: Duration) -> Hot {
    let until = mono_ns() + run.as_nanos() as u64;
    let acqs = hot_workers(kind, url, workers, 0, until).await;
    summarize_hot(acqs, workers, workers, run)
}

pub(crate) async fn hot_processes(
    kind: Kind,
    url: &str,
    procs: usize,
    tasks: usize,
    run: Duration,
) -> Hot {
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

pub(crate) async fn hot_child(args: &[String]) {
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

/// `lock-bench hot <impl> <url> <tasks> <seconds>`: one hot-key run of `tasks` tasks in one
/// process (this one, or a peer's driver) against a server of your own, printed as one line.
/// `<impl>` is a row's name: a Rust lock's, or a built peer's (`redisson (JVM)`,
/// `redisson RFencedLock (JVM)`, `redsync`).
pub(crate) async fn hot_only(args: &[String]) {
    let [name, url, tasks, secs] = args else {
        panic!("usage: lock-bench hot <impl> <url> <tasks> <seconds>");
    };
    let peers = contenders::peers_for(name);
    let lock = Contender::named(name, &peers).unwrap_or_else(|| panic!("no lock named {name:?}"));
    let tasks: usize = tasks.parse().expect("tasks");
    let run = Duration::from_secs_f64(secs.parse().expect("seconds"));
    let h = lock.hot(url, 1, tasks, run).await;
    println!(
        "{} tasks={tasks} acq/s={:.0} owner_changes/s={:.0} wait_p50={:.0}us wait_p99={:.0}us jain={:.3} gave_up={}",
        lock.name(),
        h.acq_per_s,
        h.owner_changes_per_s,
        h.wait_p50_us,
        h.wait_p99_us,
        h.jain,
        h.gave_up
    );
}
