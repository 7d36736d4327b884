//! The chaos suite: several worker processes contend on a few locks while faults are injected,
//! then a checker proves exclusion, fencing and no lost updates from the records. A hot-key
//! phase adds processes whose tasks all take one key, so most hand-overs there are local
//! hand-offs (a release granting the lock to a waiting task of its own process) interleaved
//! with global releases that other processes race for, under the same faults.
//!
//! Short mode (CI): every fault once, about a minute. Long mode: `CHAOS_LONG=1` (10 minutes of
//! faults in a loop) or `CHAOS_SECONDS=<n>`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use lock_tests::chaos::{self, Outcome, Record};
use lock_tests::family::{Section, check_family};
use lock_tests::{RedisServer, TcpProxy, mono_ns};
use tokio::process::{Child, Command};

const WORKER: &str = env!("CARGO_BIN_EXE_lock-worker");
const KEYS: usize = 3;
/// Processes of the hot-key phase (every task on `chaos:0`), and how long it lasts.
const HOT_PROCESSES: usize = 3;
const HOT_PHASE: Duration = Duration::from_secs(20);
const WATCHDOG_MS: u64 = 1500;
/// Processes running the lock family's workload (semaphore, read/write, fair) meanwhile.
const FAMILY_PROCESSES: usize = 3;

#[derive(Debug, Clone, Copy)]
enum Fault {
    ScriptFlush,
    KillCommandConnections,
    KillPubSubConnections,
    ClientPause,
    DebugSleep,
    ProxyLatency,
    ProxyCut,
    ProxyBlackHole,
    KillWorker,
    BlockedThread,
    RestartWithAof,
    RestartEmpty,
}

const FAULTS: [Fault; 12] = [
    Fault::ScriptFlush,
    Fault::KillCommandConnections,
    Fault::KillPubSubConnections,
    Fault::ClientPause,
    Fault::DebugSleep,
    Fault::ProxyLatency,
    Fault::ProxyCut,
    Fault::ProxyBlackHole,
    Fault::KillWorker,
    Fault::BlockedThread,
    Fault::RestartWithAof,
    Fault::RestartEmpty,
];

struct Worker {
    child: Child,
    out: PathBuf,
}

fn spawn_worker(lock_url: &str, store_url: &str, tasks: usize, ms: u64, out: &Path) -> Worker {
    spawn_worker_on(KEYS, lock_url, store_url, tasks, ms, out)
}

/// A worker whose tasks lock `chaos:0` … `chaos:<keys - 1>`.
fn spawn_worker_on(
    keys: usize,
    lock_url: &str,
    store_url: &str,
    tasks: usize,
    ms: u64,
    out: &Path,
) -> Worker {
    let child = Command::new(WORKER)
        .args(["chaos", lock_url, store_url])
        .args([
            keys.to_string(),
            tasks.to_string(),
            ms.to_string(),
            WATCHDOG_MS.to_string(),
        ])
        .arg(out)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn lock-worker");
    Worker {
        child,
        out: out.to_path_buf(),
    }
}

fn read_records(path: &Path) -> Vec<Record> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        // A worker killed mid-write may leave a torn last line.
        .filter_map(Record::parse)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusion_and_fencing_hold_under_faults() {
    let long = std::env::var("CHAOS_LONG").is_ok();
    let seconds: u64 = std::env::var("CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if long { 600 } else { 50 });
    let (processes, tasks) = if long { (4, 6) } else { (3, 4) };
    let dir = std::env::temp_dir().join(format!("lock-chaos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let mut locks = RedisServer::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--enable-debug-command",
        "yes",
    ]);
    let store = RedisServer::start();
    let proxy = TcpProxy::start(([127, 0, 0, 1], locks.port()).into())
        .await
        .unwrap();
    let lock_url = proxy.url();
    let store_url = store.url();

    let started = tokio::time::Instant::now();
    let total = Duration::from_secs(seconds);
    let mut workers: Vec<Worker> = (0..processes)
        .map(|i| {
            spawn_worker(
                &lock_url,
                &store_url,
                tasks,
                total.as_millis() as u64,
                &dir.join(format!("w{i}.tsv")),
            )
        })
        .collect();
    // The lock family, under the same faults, for the whole run.
    let family: Vec<(Child, PathBuf)> = (0..FAMILY_PROCESSES)
        .map(|i| {
            let out = dir.join(format!("family{i}.tsv"));
            let child = Command::new(WORKER)
                .args(["family-chaos", &lock_url])
                .arg(total.as_millis().to_string())
                .arg(WATCHDOG_MS.to_string())
                .arg(&out)
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("spawn lock-worker");
            (child, out)
        })
        .collect();
    let mut wiped: Vec<(u64, u64)> = Vec::new();
    let mut injected: Vec<(Fault, u64, u64)> = Vec::new();
    let mut kills: Vec<u64> = Vec::new();
    let mut blockers: Vec<(Child, PathBuf)> = Vec::new();

    // Faults one after another, each while the workload runs, ending at least 9 s before it
    // does: in the short mode every fault once (the pauses between them shrink to fit when a
    // loaded machine makes faults slow), in the long mode in a loop until then.
    let ends = mono_ns() + total.as_nanos() as u64;
    let mut n = 0;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The hot-key phase, under whatever faults come next.
    let hot: Vec<Worker> = (0..HOT_PROCESSES)
        .map(|i| {
            spawn_worker_on(
                1,
                &lock_url,
                &store_url,
                tasks,
                HOT_PHASE.min(total / 2).as_millis() as u64,
                &dir.join(format!("hot{i}.tsv")),
            )
        })
        .collect();
    let margin = Duration::from_secs(9);
    while if long {
        started.elapsed() + margin < total
    } else {
        n < FAULTS.len()
    } {
        let fault = FAULTS[n % FAULTS.len()];
        n += 1;
        let from = mono_ns();
        match fault {
            Fault::ScriptFlush => {
                // The lock scripts, as scripts and as the functions of their library.
                locks.cmd(&["SCRIPT", "FLUSH"]);
                locks.cmd(&["FUNCTION", "FLUSH"]);
            }
            Fault::KillCommandConnections => {
                locks.kill_clients("normal");
            }
            Fault::KillPubSubConnections => {
                locks.kill_clients("pubsub");
            }
            Fault::ClientPause => {
                locks.pause_clients(Duration::from_secs(2));
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Fault::DebugSleep => {
                let port = locks.port();
                tokio::task::spawn_blocking(move || {
                    let probe = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
                    let mut c = probe.get_connection().unwrap();
                    let _: () = redis::cmd("DEBUG")
                        .arg("SLEEP")
                        .arg(1)
                        .query(&mut c)
                        .unwrap();
                })
                .await
                .unwrap();
            }
            Fault::ProxyLatency => {
                proxy.set_latency(Duration::from_millis(50));
                tokio::time::sleep(Duration::from_secs(2)).await;
                proxy.set_latency(Duration::ZERO);
            }
            Fault::ProxyCut => proxy.cut_all(),
            Fault::ProxyBlackHole => {
                proxy.set_black_hole(true);
                tokio::time::sleep(Duration::from_millis(1500)).await;
                proxy.cut_all();
                proxy.set_black_hole(false);
            }
            Fault::KillWorker => {
                let victim = workers.remove(0);
                let mut child = victim.child;
                child.start_kill().unwrap(); // SIGKILL
                child.wait().await.unwrap();
                kills.push(mono_ns());
                let left = total.saturating_sub(started.elapsed());
                let out = dir.join(format!("w-respawn-{n}.tsv"));
                workers.push(spawn_worker(
                    &lock_url,
                    &store_url,
                    tasks,
                    left.as_millis() as u64,
                    &out,
                ));
                // Keep the victim's records: its completed sections count too.
                workers.push(Worker {
                    child,
                    out: victim.out,
                });
            }
            Fault::BlockedThread => {
                let out = dir.join(format!("blocker-{n}.tsv"));
                let child = Command::new(WORKER)
                    .args(["block", &lock_url, &store_url, "chaos:0"])
                    .args([(2 * WATCHDOG_MS).to_string(), WATCHDOG_MS.to_string()])
                    .arg(&out)
                    .stdout(Stdio::piped())
                    .kill_on_drop(true)
                    .spawn()
                    .unwrap();
                blockers.push((child, out));
            }
            Fault::RestartWithAof => locks.restart(),
            Fault::RestartEmpty => {
                let at = mono_ns();
                locks.restart_empty();
                // Exclusion is not promised until every old holder has heard of the loss.
                wiped.push((at, mono_ns() + (WATCHDOG_MS + 1000) * 1_000_000));
            }
        }
        injected.push((fault, from, mono_ns()));
        // The time left before the margin, shared with the faults still to come.
        let to_come = FAULTS.len().saturating_sub(n) as u32 + 1;
        let left = total.saturating_sub(started.elapsed() + margin);
        let pause = (left / to_come).clamp(Duration::from_millis(500), Duration::from_millis(2500));
        tokio::time::sleep(pause).await;
    }

    // The workload ends by itself; collect the workers' leak reports.
    let mut records = Vec::new();
    let mut cancellations = 0usize;
    let mut handoffs = 0usize;
    let hot_processes = hot.len();
    let mut hot_handoffs = 0usize;
    for (is_hot, w) in hot
        .into_iter()
        .map(|w| (true, w))
        .chain(workers.into_iter().map(|w| (false, w)))
    {
        let was_killed = w.child.id().is_none();
        let out = tokio::time::timeout(total + Duration::from_secs(60), w.child.wait_with_output())
            .await
            .expect("worker finished")
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !was_killed && out.status.success() {
            assert!(
                stdout.contains("exit held=0 subscribed=0"),
                "a worker leaked watchdog entries or subscriptions: {stdout}"
            );
            let figure = |name: &str| {
                stdout
                    .split(name)
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or(0)
            };
            cancellations += figure("cancelled=");
            handoffs += figure("handoffs=");
            if is_hot {
                hot_handoffs += figure("handoffs=");
            }
        }
        records.extend(read_records(&w.out));
    }
    if std::env::var("CHAOS_SECONDS").is_err() {
        assert!(injected.len() >= FAULTS.len(), "only {injected:?} ran");
    }
    // Every fault ended while the workload still ran (with time to see its effects).
    let late: Vec<_> = (injected.iter())
        .filter(|(_, _, to)| *to + margin.as_nanos() as u64 / 3 > ends)
        .collect();
    assert!(
        late.is_empty(),
        "faults that ended too late to judge: {late:?}"
    );
    assert!(!blockers.is_empty() || std::env::var("CHAOS_SECONDS").is_ok());
    for (blocker_child, blocker_out) in blockers {
        let out = blocker_child.wait_with_output().await.unwrap();
        let blocker_stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let blocked = read_records(&blocker_out);
        assert_eq!(blocked.len(), 1, "blocker: {blocker_stdout}");
        assert!(
            blocked[0].lost,
            "a holder blocked past its lease must see lost(): {blocker_stdout}"
        );
        assert!(
            matches!(
                blocked[0].outcome,
                Outcome::RejectedRead | Outcome::RejectedWrite
            ),
            "its late write must be fenced off: {blocker_stdout}"
        );
        records.extend(blocked);
    }

    let mut sections = Vec::new();
    // Semaphore sections whose permit passed in memory between the two tasks of a process.
    let mut passed_permits = 0;
    for (child, out) in family {
        let done = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("family worker finished")
            .unwrap();
        let stdout = String::from_utf8_lossy(&done.stdout);
        assert!(done.status.success(), "family worker: {stdout}");
        assert!(
            stdout.contains("exit held=0 subscribed=0"),
            "a family worker leaked holds or subscriptions: {stdout}"
        );
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        sections.extend(text.lines().filter_map(Section::parse));
        passed_permits += text.lines().filter(|l| l.ends_with(" passed")).count();
    }

    // Nothing leaked on the lock server.
    let settled = {
        let mut ok = false;
        for _ in 0..100 {
            if locks.keys("lock:*").iter().all(|k| k.ends_with(":fence"))
                && locks.pubsub_channels("lock:*").is_empty()
            {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        ok
    };
    assert!(
        settled,
        "left behind: {:?} {:?}",
        locks.keys("lock:*"),
        locks.pubsub_channels("lock:*")
    );

    // Recovery after SIGKILL: every key was taken again once the dead holder's lease ran out.
    // The bound catches a hold that outlives its holder (renewed by nobody, it would block the
    // key for the rest of the run), with room for a loaded machine's slow workload: how soon
    // a key is taken again is a figure (printed), not a verdict.
    let mut max_recovery = Duration::ZERO;
    for &kill in &kills {
        for k in 0..KEYS {
            let key = format!("chaos:{k}");
            let next = records
                .iter()
                .filter(|r| r.key == key && r.start_ns > kill)
                .map(|r| r.start_ns)
                .min()
                .expect("the key was used after the kill");
            let recovery = Duration::from_nanos(next - kill);
            max_recovery = max_recovery.max(recovery);
        }
    }
    println!("after kill -9 every key was taken again within {max_recovery:?}");
    assert!(
        max_recovery <= Duration::from_millis(WATCHDOG_MS + 10_000),
        "after kill -9 a key stayed blocked for {max_recovery:?}"
    );

    let state = chaos::read_store(&store, KEYS);
    let report = chaos::check(&records, &state, &wiped);
    // The fair order is judged away from faults (and 2 s after each, for waiters to settle).
    let fault_windows: Vec<(u64, u64)> = injected
        .iter()
        .map(|&(_, from, to)| (from, to + 2_000_000_000))
        .chain(kills.iter().map(|&at| (at, at + 2_000_000_000)))
        .collect();
    let family_report = check_family(&sections, &wiped, &fault_windows);
    println!("chaos, lock family: {family_report}; {passed_permits} permits passed in memory");
    println!(
        "chaos: {seconds} s, {processes} processes × {tasks} tasks, {} faults injected ({:?}), \
         {} critical sections, {} commits, {} fenced off, {} saw lost(), {} overlaps excused \
         (lost or wiped), {cancellations} operations cancelled at random points, {handoffs} local \
         hand-offs ({hot_handoffs} in the hot-key phase of {hot_processes} processes), max \
         recovery after kill -9 {:?}, violations {}",
        injected.len(),
        {
            let mut counts: Vec<(String, usize)> = Vec::new();
            for (fault, ..) in &injected {
                let name = format!("{fault:?}");
                match counts.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, c)) => *c += 1,
                    None => counts.push((name, 1)),
                }
            }
            counts
        },
        report.records,
        report.commits,
        report.rejected,
        report.lost,
        report.excused_overlaps,
        max_recovery,
        report.violations.len()
    );
    assert!(
        report.violations.is_empty(),
        "violations:\n{}",
        report.violations.join("\n")
    );
    assert!(
        family_report.violations.is_empty(),
        "lock family violations:\n{}",
        family_report.violations.join("\n")
    );
    // What proves each part of the workload ran, not how much of it a loaded machine got
    // through: the figures are printed above and belong in the benchmark (`bench/`).
    let [sem, read, write, fair] = family_report.sections;
    assert!(
        sem > 0 && read > 0 && write > 0 && fair > 0,
        "a primitive of the lock family never got a section: {family_report}"
    );
    assert_eq!(family_report.most_permits, 2, "{family_report}");
    // The semaphore's checks above covered permits passed in memory too.
    assert!(
        passed_permits > 0,
        "no permit passed in memory: {family_report}"
    );
    assert!(report.commits > 0, "no fenced write was committed");
    assert!(cancellations > 0, "no operation was cancelled");
    assert!(
        hot_handoffs > 0,
        "no local hand-off in the hot-key phase of {hot_processes} processes"
    );
    if std::env::var("CHAOS_KEEP").is_ok() {
        println!(
            "records kept in {}; wiped windows {wiped:?}; faults {injected:?}",
            dir.display()
        );
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
