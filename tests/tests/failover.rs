//! The failover suite (issue 32), Sentinel half: worker processes contend on a few mutexes, a
//! semaphore and a read/write lock through Sentinel (1 master, 2 replicas, 3 sentinels, every
//! data node behind a proxy that can cut or stall each class of link on its own:
//! `lock_tests::topology::PartitionedSentinel`) while faults follow one another under load, with
//! `replica_ack` off and on (and, in the long form or with `FAILOVER_MIN_REPLICAS=1`, without
//! `replica_ack` but with `min-replicas-to-write 1` / `min-replicas-max-lag 1` on every data
//! node). Each mutex section does a fenced read-modify-write on a store that is not part of the
//! failover (`lock_tests::failover::Stores`): `chaos:0` on a separate Redis (the chaos suite's
//! compare-and-set store, `lock_tests::chaos`), `chaos:1` on SQLite and `chaos:2` on PostgreSQL
//! (one server for the whole test), both through `lock-fence`; the family's sections use a
//! fenced resource on that Redis too (`lock_tests::chaos::family_store`: the semaphore's
//! admits its capacity in token order, the read/write lock's is a counter fenced for readers and
//! writers).
//!
//! The faults, in turn (each a failover):
//! - **split brain**: the master cut off (both ways) from its replicas and the sentinels while
//!   the clients still reach it; healed 2 s after the promotion (the deposed master keeps
//!   granting to clients that have not switched yet);
//! - **kill -9** of the master, restarted at once (empty) at its address;
//! - **SIGSTOP** of the master until the sentinels promoted a replica, then SIGCONT;
//! - **clients cut off from the new master**: both replicas black-holed for the clients, then
//!   `SENTINEL FAILOVER`; healed 2 s after the promotion;
//! - **one-way stalls**, both directions: the master's answers to its replicas and the
//!   sentinels held (what they send it arrives), or what they send it held (its answers
//!   arrive); healed 1 s after the promotion;
//! - **a lagging replica**: one replica's replication stream held for 2 s under load, the
//!   other's `replica-priority` 0 (so the lagging one is promoted), then the master killed.
//!
//! After each promotion the test re-attaches the old master to the new one (`REPLICAOF`, what the
//! sentinels do themselves about 8 s after they see it back: they wait four hello periods), waits
//! until the new master has both replicas online, and lets a lease of load run: a fault's window
//! runs from the injection until then. A second of calm load follows before the next fault.
//!
//! Hard invariants, every run: no fenced write accepted out of token order by any store (stale
//! writes accepted: 0; each store committed something), no lost update, no fencing token issued
//! lower than one of a section that had already ended; outside the fault windows no overlapping
//! mutex holds, never more semaphore holders than permits, no writer overlapping another section of
//! the read/write lock; the family store's logs replayed (never more occupants than permits, no use
//! from outside, the writers' tokens increasing, no lost update). Counted and printed per fault,
//! not judged: overlapping holds in the fault windows (expected without acknowledgement), holders
//! that committed after a rival's grant without having been told of the loss, the sections the
//! deposed master granted after the promotion (each grant is attributed to the master its client
//! used at the time, from the client's own Sentinel events), how many of their writes the fenced
//! store accepted, over a rival or not, and how many of the new master's holders it refused
//! (Redis's split-brain limit, which fencing orders but cannot judge), and the longest time without
//! a grant (the outage).
//!
//! Short form (the normal suite): each fault once per `replica_ack` setting. Long form:
//! `FAILOVER_LONG=1` (8 rounds of the 7 faults per setting, three settings: 168 failovers) or
//! `FAILOVER_COUNT=<n>` failovers per setting.
//!
//! Redis Cluster has its own binary (`failover_cluster.rs`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use lock_tests::chaos::family_store::{check_semaphore_log, rw_keys, semaphore_keys};
use lock_tests::chaos::{self, Record, Sides};
use lock_tests::failover::{self, KEYS, Stores};
use lock_tests::family::{PERMITS, Section, check_family};
use lock_tests::topology::{PartitionedSentinel, Peer};
use lock_tests::{PostgresServer, mono_ns};
use tokio::process::{Child, Command};

const WORKER: &str = env!("CARGO_BIN_EXE_lock-worker");
const PROCESSES: usize = 3;
const TASKS: usize = 3;
/// The lease (the workers' watchdog timeout), as in issue 32's adopter run.
const WATCHDOG_MS: u64 = 1500;
/// Load without a fault after each fault's window, before the next fault.
const CALM: Duration = Duration::from_secs(1);
/// Bound on the wait for a whole topology after a round.
const WHOLE_LIMIT: Duration = Duration::from_secs(30);

/// The lock choice of the workload, in one place: the default mutex, half the sections with
/// the token taken eagerly (`fenced()`), half asking for it on demand (see lock-worker).
const WORKLOAD: &str = "chaos";

fn spawn_worker(lock_spec: &str, store_url: &str, out: &Path) -> Child {
    Command::new(WORKER)
        .args([WORKLOAD, lock_spec, store_url])
        .args([
            KEYS.to_string(),
            TASKS.to_string(),
            // Ended by the test (killed) once the faults are over.
            (3_600_000u64).to_string(),
            WATCHDOG_MS.to_string(),
        ])
        .arg(out)
        .arg("family")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn lock-worker")
}

fn read_records(path: &Path) -> Vec<Record> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        // A worker killed mid-write may leave a torn last line.
        .filter_map(Record::parse)
        .collect()
}

/// A worker's masters over time (`chaos::read_masters`).
type MasterLog = Vec<(u64, String)>;

fn beside(out: &Path, suffix: &str) -> PathBuf {
    let mut name = out.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The lock family's sections of one run (`<out>.family`), with whether the store refused them.
fn read_family(outs: &[PathBuf]) -> Vec<(Section, bool)> {
    outs.iter()
        .flat_map(|o| {
            std::fs::read_to_string(beside(o, ".family"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| Some((Section::parse(l)?, l.contains("Rejected"))))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// What the lock family showed in one run.
struct FamilyRow {
    ack: Setting,
    sections: [usize; 4],
    refused: usize,
    /// Findings (over capacity, a writer overlapping) in fault windows: counted, not judged.
    in_windows: usize,
    most_permits: usize,
    evicted: usize,
    writes: usize,
}

impl std::fmt::Display for FamilyRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [sem, read, write, _] = self.sections;
        write!(
            f,
            "| {} | {sem} / {read} / {write} | {} | {} | {} of {PERMITS} | {} | {} | 0 | 0 |",
            self.ack, self.in_windows, self.refused, self.most_permits, self.evicted, self.writes,
        )
    }
}

const FAMILY_HEAD: &str = "| replica_ack | semaphore / read / write sections | over capacity or writer overlaps in fault windows | refused by the store | most occupants the store admitted | permits fenced off by the store | writes committed | stale writes accepted | violations outside fault windows |\n|---|---|---|---|---|---|---|---|---|";

/// Waits (bounded) until `cond` holds; whether it did.
async fn until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cond()
}

/// The faults, in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    SplitBrain,
    Kill,
    Stop,
    ClientsCut,
    StallAnswers,
    StallRequests,
    LaggingReplica,
}

const FAULTS: [Fault; 7] = [
    Fault::SplitBrain,
    Fault::Kill,
    Fault::Stop,
    Fault::ClientsCut,
    Fault::StallAnswers,
    Fault::StallRequests,
    Fault::LaggingReplica,
];

impl Fault {
    fn describe(self) -> &'static str {
        match self {
            Fault::SplitBrain => {
                "split brain: master cut from replicas and sentinels, clients still reach it"
            }
            Fault::Kill => "kill -9 of the master, restarted empty",
            Fault::Stop => "SIGSTOP of the master past the failover, then SIGCONT",
            Fault::ClientsCut => "clients cut off from the new master (SENTINEL FAILOVER)",
            Fault::StallAnswers => "one-way stall: the master's answers to replicas and sentinels",
            Fault::StallRequests => {
                "one-way stall: replicas' and sentinels' requests to the master"
            }
            Fault::LaggingReplica => "a replica lagging 2 s promoted, the master killed",
        }
    }
}

/// How long a partition stays after the promotion.
fn hold_after_promotion(fault: Fault) -> Duration {
    match fault {
        Fault::SplitBrain | Fault::ClientsCut => Duration::from_secs(2),
        Fault::StallAnswers | Fault::StallRequests => Duration::from_secs(1),
        _ => Duration::ZERO,
    }
}

/// One failover: its fault, the nodes, and when it was injected, the promotion seen and the
/// window ended (on [`mono_ns`]).
struct Round {
    fault: Fault,
    at: u64,
    promoted: u64,
    end: u64,
    deposed_addr: String,
}

/// Injects `fault` on the current master and waits for the promotion; returns (old, new, at,
/// promoted).
async fn inject(group: &mut PartitionedSentinel, fault: Fault) -> (usize, usize, u64, u64) {
    let old = group.current_master();
    let cut_off = [Peer::Replicas, Peer::Sentinels];
    let others: Vec<usize> = (0..group.len()).filter(|&i| i != old).collect();
    let wait =
        |group: &PartitionedSentinel| tokio::task::block_in_place(|| group.wait_for_failover(old));
    let at;
    let new;
    let promoted;
    match fault {
        Fault::SplitBrain | Fault::StallAnswers | Fault::StallRequests => {
            let (to_node, from_node) = match fault {
                Fault::SplitBrain => (true, true),
                Fault::StallAnswers => (false, true),
                _ => (true, false),
            };
            at = mono_ns();
            group.stall(old, &cut_off, to_node, from_node);
            new = wait(group);
            promoted = mono_ns();
            tokio::time::sleep(hold_after_promotion(fault)).await;
            group.heal(old, &cut_off);
        }
        Fault::Kill => {
            at = mono_ns();
            group.kill(old);
            new = wait(group);
            promoted = mono_ns();
            group.restart(old);
        }
        Fault::Stop => {
            at = mono_ns();
            group.node(old).freeze();
            new = wait(group);
            promoted = mono_ns();
            group.node(old).thaw();
        }
        Fault::ClientsCut => {
            at = mono_ns();
            for &i in &others {
                group.stall(i, &[Peer::Clients], true, true);
            }
            group.manual_failover().expect("SENTINEL FAILOVER");
            new = wait(group);
            promoted = mono_ns();
            tokio::time::sleep(hold_after_promotion(fault)).await;
            for &i in &others {
                group.heal(i, &[Peer::Clients]);
            }
        }
        Fault::LaggingReplica => {
            let (lagging, good) = (others[0], others[1]);
            group.set_replica_priority(good, 0);
            at = mono_ns();
            // The lagging replica's stream is held; its acknowledgements still arrive (of what
            // it has), so only the other replica acknowledges the grants of these 2 s.
            group.stall(old, &[Peer::Node(lagging)], false, true);
            tokio::time::sleep(Duration::from_secs(2)).await;
            group.kill(old);
            new = wait(group);
            promoted = mono_ns();
            group.heal(old, &[Peer::Node(lagging)]);
            group.restart(old);
            group.set_replica_priority(good, 100);
        }
    }
    (old, new, at, promoted)
}

/// What protects the grants: nothing, `replica_ack(1, 100 ms)` on the clients, or
/// `min-replicas-to-write 1` / `min-replicas-max-lag 1` on every data node (the recommended
/// production setting: a master cut off from its replicas refuses writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setting {
    Plain,
    Ack,
    MinReplicas,
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Setting::Plain => "off",
            Setting::Ack => "replica_ack(1, 100 ms)",
            Setting::MinReplicas => "off; min-replicas-to-write 1, max-lag 1 on the masters",
        })
    }
}

/// One row of the published table: one fault with one setting.
struct Row {
    ack: Setting,
    fault: Fault,
    failovers: usize,
    overlaps: usize,
    unaware: usize,
    /// Of the whole run (all faults): stale writes accepted, token regressions.
    stale: usize,
    regressions: usize,
    sides: Sides,
    recovery_p50: Duration,
    recovery_max: Duration,
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per100 = |n: usize| n as f64 * 100.0 / self.failovers.max(1) as f64;
        let ack = self.ack;
        write!(
            f,
            "| {} | {ack} | {} | {:.0} ({}) | {} | {} | {} | {} / {} / {} / {} | {:.2} s / {:.2} s |",
            self.fault.describe(),
            self.failovers,
            per100(self.overlaps),
            self.overlaps,
            self.unaware,
            self.stale,
            self.regressions,
            self.sides.deposed,
            self.sides.deposed_accepted,
            self.sides.deposed_won,
            self.sides.legitimate_refused,
            self.recovery_p50.as_secs_f64(),
            self.recovery_max.as_secs_f64(),
        )
    }
}

const TABLE_HEAD: &str = "| fault | replica_ack | failovers | overlaps per 100 failovers (pairs) | unaware writes | stale writes accepted (run) | token regressions (run) | deposed master after promotion: grants / writes accepted / of which over a rival / new master's holders refused | longest pause in grants p50 / max |\n|---|---|---|---|---|---|---|---|---|";

/// The rows of one `replica_ack` setting, and why its rounds ended early, if they did.
async fn failovers_under_load(
    setting: Setting,
    failovers: usize,
    postgres: &PostgresServer,
) -> (Vec<Row>, FamilyRow, Option<String>) {
    let ack = setting == Setting::Ack;
    let dir =
        std::env::temp_dir().join(format!("lock-failover-{}-{setting:?}", std::process::id(),));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut group = if setting == Setting::MinReplicas {
        PartitionedSentinel::start_with(&[
            "--min-replicas-to-write",
            "1",
            "--min-replicas-max-lag",
            "1",
        ])
        .await
    } else {
        PartitionedSentinel::start().await
    };
    let stores = Stores::start(&dir, postgres, &format!("chaos_{setting:?}").to_lowercase()).await;
    let store = stores.redis();
    let spec = format!(
        "sentinel:{}@{}{}",
        group.master_name(),
        group.sentinel_urls().join(","),
        if ack { "+ack" } else { "" }
    );
    let outs: Vec<_> = (0..PROCESSES)
        .map(|i| dir.join(format!("w{i}.tsv")))
        .collect();
    let mut workers: Vec<Child> = outs
        .iter()
        .map(|out| spawn_worker(&spec, &stores.urls(), out))
        .collect();
    // Load first: every worker has committed something.
    let loaded = until(Duration::from_secs(30), || {
        outs.iter().all(|o| !read_records(o).is_empty())
    })
    .await;
    assert!(loaded, "the workers never got going");

    let mut rounds: Vec<Round> = Vec::new();
    let mut incomplete = None;
    for round in 0..failovers {
        let fault = FAULTS[round % FAULTS.len()];
        let started = Instant::now();
        let (old, new, at, promoted) = inject(&mut group, fault).await;
        // The old master joins the new one as a replica (the sentinels would, ~8 s later).
        let reattached = until(WHOLE_LIMIT, || group.reattach(old, new).is_ok()).await;
        let whole = reattached && until(WHOLE_LIMIT, || group.is_whole(new)).await;
        if !whole {
            incomplete = Some(format!(
                "round {round} ({fault:?}): not whole after {WHOLE_LIMIT:?}: {}",
                group.describe()
            ));
            break;
        }
        // A lease of load after the topology is whole, before the next fault.
        tokio::time::sleep(Duration::from_millis(WATCHDOG_MS)).await;
        let end = mono_ns();
        rounds.push(Round {
            fault,
            at,
            promoted,
            end,
            deposed_addr: format!("127.0.0.1:{}", group.proxy(old).port()),
        });
        eprintln!(
            "{setting:?} round {round} ({fault:?}): node {old} -> {new} in {:?} (promoted after {:?})",
            started.elapsed(),
            Duration::from_nanos(promoted - at)
        );
        // Calm load between the windows, where every promise is judged.
        tokio::time::sleep(CALM).await;
    }
    // Quiet load after the last fault, then stop the workers.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for w in &mut workers {
        let _ = w.start_kill();
    }
    for w in &mut workers {
        let _ = tokio::time::timeout(Duration::from_secs(10), w.wait()).await;
    }

    let per_worker: Vec<(Vec<Record>, MasterLog)> = outs
        .iter()
        .map(|o| (read_records(o), chaos::read_masters(&beside(o, ".masters"))))
        .collect();
    let records: Vec<Record> = per_worker.iter().flat_map(|(r, _)| r.clone()).collect();
    let attributed: Vec<(&Record, Option<&str>)> = per_worker
        .iter()
        .flat_map(|(recs, log)| recs.iter().map(|r| (r, chaos::master_at(log, r.start_ns))))
        .collect();
    let states = stores.read(KEYS).await;
    let per_store = failover::per_store(&states);
    let state: std::collections::HashMap<_, _> = states.into_iter().flatten().collect();
    let windows: Vec<(u64, u64)> = rounds.iter().map(|r| (r.at, r.end)).collect();
    let checked = chaos::check(&records, &state, &windows);
    let failover = chaos::failover_report(&records, &windows);
    let stale = chaos::stale_writes_accepted(&state);
    let sides: Vec<Sides> = rounds
        .iter()
        .map(|r| chaos::sides(&attributed, &r.deposed_addr, r.promoted, r.end))
        .collect();
    eprintln!(
        "{setting:?}: {} sections, {} commits, {} rejected by the store, {} told lost; \
         overlapping pairs {} (in fault windows, excused: {}), per fault {:?}, unaware writes {}, \
         stale writes accepted {stale} (per store, commits / stale: {}), token regressions {}, \
         deposed-side sections per fault {:?}",
        checked.records,
        checked.commits,
        checked.rejected,
        checked.lost,
        failover.overlaps,
        checked.excused_overlaps,
        failover.overlaps_per_fault,
        failover.unaware_writes,
        failover::describe_stores(&per_store),
        failover.token_regressions.len(),
        sides
            .iter()
            .map(|s| (
                s.deposed,
                s.deposed_accepted,
                s.deposed_won,
                s.legitimate_refused
            ))
            .collect::<Vec<_>>(),
    );
    assert_eq!(stale, 0, "a fenced store accepted a stale write");
    failover::assert_stores(&per_store);
    assert!(
        checked.violations.is_empty(),
        "{}",
        checked.violations.join("\n")
    );
    assert!(
        failover.token_regressions.is_empty(),
        "{}",
        failover.token_regressions.join("\n")
    );
    assert!(checked.commits > 0, "nothing was committed");
    assert!(
        failover.recovery_ns.iter().all(Option::is_some),
        "no grant after a fault: {:?}",
        failover.recovery_ns
    );
    assert!(
        per_worker.iter().all(|(_, log)| !log.is_empty()),
        "every worker noted its master"
    );
    // When each client switched to the new master, from the promotion the test saw (negative:
    // before it), in ms: the split brain lasts that long for the client.
    for (i, r) in rounds.iter().enumerate() {
        let lags: Vec<Option<i64>> = per_worker
            .iter()
            .map(|(_, log)| {
                log.iter()
                    .find(|(t, addr)| *t >= r.at && *addr != r.deposed_addr)
                    .map(|(t, _)| (*t as i64 - r.promoted as i64) / 1_000_000)
            })
            .collect();
        eprintln!(
            "{setting:?} round {i} ({:?}): clients switched at {lags:?} ms from the promotion",
            r.fault
        );
    }
    // The lock family: exclusion outside the fault windows, and the fenced store's own logs.
    let family = read_family(&outs);
    let sections: Vec<Section> = family.iter().map(|(s, _)| *s).collect();
    let away = check_family(&sections, &windows, &windows);
    let everywhere = check_family(&sections, &[], &[]);
    let sem_log: Vec<String> = store
        .cmd(&["LRANGE", &semaphore_keys("family:sem")[1], "0", "-1"])
        .items()
        .iter()
        .filter_map(|e| e.text().map(str::to_owned))
        .collect();
    let sem = check_semaphore_log(&sem_log, PERMITS);
    let [_, _, value_key, log_key] = rw_keys("family:rw");
    let rw = chaos::StoreState {
        value: store
            .cmd(&["GET", &value_key])
            .text()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        log: store
            .cmd(&["LRANGE", &log_key, "0", "-1"])
            .items()
            .iter()
            .filter_map(|t| t.text().and_then(|t| t.parse().ok()))
            .collect(),
    };
    let rw_checked = chaos::check(
        &[],
        &std::collections::HashMap::from([("family:rw".to_string(), rw.clone())]),
        &[],
    );
    eprintln!(
        "{setting:?} family: {away}; in fault windows: {} findings; store: {sem:?} (log of {}), \
         rw writes {}",
        everywhere.violations.len(),
        sem_log.len(),
        rw.log.len()
    );
    assert!(away.violations.is_empty(), "{:?}", away.violations);
    assert!(sem.violations.is_empty(), "{:?}", sem.violations);
    assert!(
        rw_checked.violations.is_empty(),
        "{:?}",
        rw_checked.violations
    );
    assert!(
        sem.used > 0 && !rw.log.is_empty(),
        "the family workload ran"
    );
    let family_row = FamilyRow {
        ack: setting,
        sections: away.sections,
        refused: family.iter().filter(|(_, refused)| *refused).count(),
        in_windows: everywhere.violations.len(),
        most_permits: sem.most,
        evicted: sem.evicted,
        writes: rw.log.len(),
    };
    let _ = std::fs::remove_dir_all(&dir);
    let rows = FAULTS
        .iter()
        .map(|&fault| {
            let mine: Vec<usize> = (rounds.iter().enumerate())
                .filter(|(_, r)| r.fault == fault)
                .map(|(i, _)| i)
                .collect();
            let mut recoveries: Vec<u64> = mine
                .iter()
                .filter_map(|&i| failover.recovery_ns[i])
                .collect();
            recoveries.sort_unstable();
            let pick = |i: usize| Duration::from_nanos(recoveries.get(i).copied().unwrap_or(0));
            let sides = mine.iter().fold(Sides::default(), |acc, &i| Sides {
                deposed: acc.deposed + sides[i].deposed,
                deposed_accepted: acc.deposed_accepted + sides[i].deposed_accepted,
                deposed_won: acc.deposed_won + sides[i].deposed_won,
                legitimate_refused: acc.legitimate_refused + sides[i].legitimate_refused,
            });
            Row {
                ack: setting,
                fault,
                failovers: mine.len(),
                overlaps: mine.iter().map(|&i| failover.overlaps_per_fault[i]).sum(),
                unaware: mine.iter().map(|&i| failover.unaware_per_fault[i]).sum(),
                stale,
                regressions: failover.token_regressions.len(),
                sides,
                recovery_p50: pick(recoveries.len() / 2),
                recovery_max: pick(recoveries.len().saturating_sub(1)),
            }
        })
        .filter(|row| row.failovers > 0)
        .collect();
    (rows, family_row, incomplete)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_holds_through_sentinel_faults_with_and_without_replica_ack() {
    let failovers: usize = std::env::var("FAILOVER_COUNT")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if std::env::var("FAILOVER_LONG").is_ok() {
            8 * FAULTS.len()
        } else {
            FAULTS.len()
        });
    let started = Instant::now();
    // One PostgreSQL server for the whole test (a database per setting).
    let postgres = tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .expect("start PostgreSQL");
    let long = std::env::var("FAILOVER_LONG").is_ok();
    let mut settings = vec![Setting::Plain, Setting::Ack];
    if long || std::env::var("FAILOVER_MIN_REPLICAS").is_ok() {
        settings.push(Setting::MinReplicas);
    }
    let (mut rows, mut family, mut incomplete) = (Vec::new(), Vec::new(), Vec::new());
    for setting in settings {
        let (mine, lock_family, why) = failovers_under_load(setting, failovers, &postgres).await;
        rows.extend(mine);
        family.push(lock_family);
        incomplete.extend(why);
    }
    eprintln!("{TABLE_HEAD}");
    for row in &rows {
        eprintln!("{row}");
    }
    eprintln!("{FAMILY_HEAD}");
    for row in &family {
        eprintln!("{row}");
    }
    eprintln!("failover suite: {:?}", started.elapsed());
    tokio::task::block_in_place(|| drop(postgres));
    assert!(incomplete.is_empty(), "{incomplete:?}");
}
