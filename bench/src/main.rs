//! Benchmarks: lock-runtime against rslock, a naive `SET NX` + 100 ms polling lock, Redisson's
//! `RLock` and `RFencedLock` in JVMs, redsync in Go processes, and the Redis round-trip limit,
//! all against one local redis-server in one run.
//!
//! Run with `bash scripts/bench.sh` (short mode, about 2 minutes) or
//! `bash scripts/bench.sh --full` (3 repetitions per figure, medians reported). Writes
//! `BENCHMARKS.md` and `bench/chart.svg`.
//!
//! This file holds the command line and the order of the run; each scenario has a file of its
//! own (`limit`, `uncontended`, `hot`, `wake`, `watchdog`, `memory`, `tower`, `family`), and
//! `contenders` runs the common ones for each lock under comparison; `servers` runs the
//! uncontended ones again on the compatibility table's newer servers.

mod contenders;
mod family;
mod growth;
mod hot;
mod impls;
mod limit;
mod memory;
mod process_peer;
mod redisson_jvm;
mod redsync;
mod report;
mod servers;
mod stats;
mod tower;
mod uncontended;
mod wake;
mod watchdog;

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use contenders::{Contender, contenders};
use hot::Hot;
use impls::Kind;
use limit::Limit;
use lock_tests::RedisServer;
use memory::Memory;
use uncontended::Uncontended;
use wake::Wake;
use watchdog::WatchdogFigures;

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
    /// The uncontended runs again on the compatibility table's newer servers.
    pub(crate) servers: Vec<servers::ServerRun>,
    /// The redsync driver's versions, when it was built (its rows say "not built" otherwise).
    pub(crate) redsync: Option<String>,
    /// Cost as the work grows (`growth.rs`): measure, count, figures.
    pub(crate) growth: Vec<(&'static str, usize, String)>,
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
    match args.first().map(String::as_str) {
        Some("hot-child") => return hot::hot_child(&args[1..]).await,
        Some("mem-child") => return memory::mem_child(&args[1..]).await,
        Some("uncontended") => return uncontended::uncontended_only(&args[1..]).await,
        Some("hot") => return hot::hot_only(&args[1..]).await,
        Some("tower") => return tower::tower_only(&args[1..]).await,
        Some("growth") => return growth::growth_only(&args[1..]).await,
        Some("growth-child") => return growth::growth_child(&args[1..]).await,
        _ => {}
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
    let r = run_all(plan).await;
    progress("");
    eprintln!("\rdone in {:.0?}", started.elapsed());
    write_report(&args, &r);
}

/// Every scenario, in the order of the run, on one redis-server of its own.
async fn run_all(plan: Plan) -> Results {
    let full = plan.full;
    let redis = RedisServer::start();
    let url = redis.url();
    let mut r = Results {
        plan: Some(plan),
        ..Results::default()
    };

    progress("limit: PING round trips");
    r.limit = limit::limit(
        &redis,
        if full { 20_000 } else { 5_000 },
        if full { 200_000 } else { 50_000 },
    )
    .await;

    progress("floor: raw scripts and SET/DEL, 1 worker");
    r.floor = limit::floor(&url, plan.run).await;

    for kind in Kind::ALL {
        contenders(&mut r, plan, &url, Contender::Rust(kind)).await;
    }
    variants(&mut r, plan, &url).await;
    for jvm in redisson_jvm::find() {
        contenders(&mut r, plan, &url, Contender::Process(&jvm)).await;
    }
    if let Some((go, version)) = redsync::find() {
        contenders(&mut r, plan, &url, Contender::Process(&go)).await;
        r.redsync = Some(version);
    }
    r.tower = tower_runs(plan, &url).await;
    r.family = family::run(&url, plan.run, plan.wake_cycles).await;
    r.servers = servers::run(plan).await;
    progress("watchdog: 10,000 locks, 1 s watchdog");
    r.watchdog = watchdog::watchdog(&redis, 10_000, plan.watchdog_hold).await;
    progress("memory: 10,000 waiting tasks, 10,000 held locks");
    r.memory = memory::memory(&url, 10_000, plan.reps).await;
    progress("growth: 1k to 100k held locks and waiters, a million names");
    r.growth = growth::run(&url, if full { 100_000 } else { 10_000 });
    r
}

/// lock-runtime fenced (every grant issues its token): uncontended, and on the hot key in one
/// process.
async fn variants(r: &mut Results, plan: Plan, url: &str) {
    // Eager tokens: every grant issues its token (uncontended, and the hot key in one process).
    for (workers, map) in [(1, &mut r.uncontended_1), (64, &mut r.uncontended_64)] {
        progress(&format!(
            "uncontended, {workers} worker(s): {}",
            impls::FENCED
        ));
        let u = median_of(
            plan.reps,
            |u: &Uncontended| u.pairs_per_s,
            || Contender::Rust(Kind::OursFenced).uncontended(url, workers, plan.run),
        )
        .await;
        map.insert(impls::FENCED, u);
    }
    progress(&format!("hot key, 1 process × 16 tasks: {}", impls::FENCED));
    let h = median_of(
        plan.reps,
        |h: &Hot| h.acq_per_s,
        || hot::hot_in_process(Kind::OursFenced, url, 16, plan.run),
    )
    .await;
    r.hot_tasks.insert(impls::FENCED, h);
}

/// The tower scenarios: distinct ids and one hot id, each bare, with the handler locking
/// itself, and under `LockLayer`.
async fn tower_runs(plan: Plan, url: &str) -> Vec<(&'static str, tower::TowerRuns)> {
    let mut out = Vec::new();
    let bare = tower::app(tower::Mode::Bare).await;
    let manual = tower::app(tower::Mode::Manual(tower::client(url).await)).await;
    let layered = tower::app(tower::Mode::Layer(tower::client(url).await)).await;
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
        out.push((
            scenario,
            tower::TowerRuns {
                bare,
                manual,
                layer,
            },
        ));
    }
    out
}

/// BENCHMARKS.md (or the file after `--out`) and the chart beside it, in `bench/chart.svg`.
fn write_report(args: &[String], r: &Results) {
    let versions = report::Versions::collect();
    let md = report::markdown(r, &versions);
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
    std::fs::write(&svg_path, report::svg(r)).expect("write chart");
    println!("{md}");
    eprintln!("wrote {out_md} and {}", svg_path.display());
}
