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
//! - **one client cut off from the new master**: `SENTINEL FAILOVER`; once the promotion is
//!   seen, the old master re-attached (it grants no more) and one worker process cut off from
//!   the new master (`Peers::of_process`: the other workers still reach it) for two leases, and
//!   at least until another worker was granted meanwhile (bounded). Its
//!   holds cannot be renewed there: any section it started more than a lease into the cut must
//!   have been told of the loss (judged: `lock_tests::failover::Cut`), and the other workers
//!   must have been granted meanwhile;
//! - **one-way stalls**, both directions: the master's answers to its replicas and the
//!   sentinels held (what they send it arrives), or what they send it held (its answers
//!   arrive); healed 1 s after the promotion;
//! - **a lagging replica**: one replica's replication stream held for 2 s under load, the
//!   other's `replica-priority` 0 (so the lagging one is promoted), then the master killed.
//!
//! After each promotion the test re-attaches the old master to the new one (`REPLICAOF`, what the
//! sentinels do themselves about 8 s after they see it back: they wait four hello periods), and
//! any other node that does not replicate from it, waits until the new master has both replicas
//! online, and lets a lease of load run: a fault's window
//! runs from the injection until then. A second of calm load follows before the next fault.
//!
//! Hard invariants, every run: no fenced write accepted out of token order by any store (stale
//! writes accepted: 0; each store committed something), no lost update, no fencing token issued
//! twice and none that is not above the token of a section that had ended before it was asked
//! for (a fenced grant's: when its granting request was sent); outside the fault windows no
//! holder not told of a loss below a section that ended before it began, no overlapping
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
//! A second test promotes a replica with its clock 5 s behind the old master's (in the long
//! form also one 5 s ahead), without the last 2 s of counter writes
//! (`tokens_through_a_failover_to_a_replica_with_a_skewed_clock`; the clock shifted by
//! `lock_tests::topology::clock_skew`): tokens ordered by the failover epoch neither go back
//! nor repeat there (judged); legitimate holders refused are counted.
//!
//! Token regressions are judged in every window, but for the deposed master's grants that rank
//! below its successor's (`Findings::ranked_below`, counted apart): the failover epoch puts
//! them there.
//!
//! Short form (the normal suite): each fault once per `replica_ack` setting. Long form:
//! `FAILOVER_LONG=1` (8 rounds of the 7 faults per setting, three settings: 168 failovers) or
//! `FAILOVER_COUNT=<n>` failovers per setting.
//!
//! The workload, the checker's verdict and the tables are `lock_tests::failover`'s, shared with
//! Redis Cluster's suite (its own binary, `failover_cluster.rs`); this one adds the lock family
//! (`Workload::start_with_family`), the attribution of grants to masters (`Promotion`) and
//! judges token regressions in the fault windows too.

use std::time::{Duration, Instant};

use lock_tests::failover::{
    self, Cut, Findings, PROCESSES, Promotion, SKEW_LAG, SKEW_US, Setting, Skew, WATCHDOG_MS,
    Window, Workload, until,
};
use lock_tests::topology::{PartitionedSentinel, Peer};
use lock_tests::{Peers, PostgresServer, mono_ns};

const WORKER: &str = env!("CARGO_BIN_EXE_lock-worker");
/// Load without a fault after each fault's window, before the next fault.
const CALM: Duration = Duration::from_secs(1);
/// Bound on the wait for a whole topology after a round.
const WHOLE_LIMIT: Duration = Duration::from_secs(30);

/// The faults, in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    SplitBrain,
    Kill,
    Stop,
    ClientCut,
    StallAnswers,
    StallRequests,
    LaggingReplica,
}

const FAULTS: [Fault; 7] = [
    Fault::SplitBrain,
    Fault::Kill,
    Fault::Stop,
    Fault::ClientCut,
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
            Fault::ClientCut => {
                "one client cut off from the new master for 2 leases or more (SENTINEL FAILOVER)"
            }
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
        Fault::SplitBrain => Duration::from_secs(2),
        Fault::ClientCut => 2 * Duration::from_millis(WATCHDOG_MS),
        Fault::StallAnswers | Fault::StallRequests => Duration::from_secs(1),
        _ => Duration::ZERO,
    }
}

/// One injected fault: the old and the new master, when it was injected and when the
/// promotion was seen (on [`mono_ns`]), and the worker it cut off, if any.
struct Injected {
    old: usize,
    new: usize,
    at: u64,
    promoted: u64,
    cut: Option<Cut>,
}

/// Injects `fault` (the `round`-th) on the current master and waits for the promotion.
async fn inject(
    group: &mut PartitionedSentinel,
    workload: &Workload,
    fault: Fault,
    round: usize,
) -> Injected {
    let old = group.current_master();
    let cut_off = [Peer::Replicas, Peer::Sentinels];
    let others: Vec<usize> = (0..group.len()).filter(|&i| i != old).collect();
    let wait =
        |group: &PartitionedSentinel| tokio::task::block_in_place(|| group.wait_for_failover(old));
    let at;
    let new;
    let promoted;
    let mut cut = None;
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
        Fault::ClientCut => {
            at = mono_ns();
            group.manual_failover().expect("SENTINEL FAILOVER");
            new = wait(group);
            promoted = mono_ns();
            // The deposed master stops granting at once (the sentinels would demote it about
            // 8 s later), so the new master is the only one any client can be granted by.
            // Retried by the round if it fails.
            let _ = group.reattach(old, new);
            // One worker process cut off from the new master, the others still reach it: its
            // holds cannot be renewed there (judged: `failover::Cut`), the others go on.
            let worker = (round / FAULTS.len()) % PROCESSES;
            let proxy = group.proxy(new);
            proxy.isolate(Peers::of_process(workload.worker_pid(worker)));
            let from = mono_ns();
            tokio::time::sleep(hold_after_promotion(fault)).await;
            // And until the others were granted during the cut (bounded; the checker asserts
            // it): with `replica_ack` the clients take up to about 3 s after a `SENTINEL
            // FAILOVER` to be granted by the new master, as long as the whole cut here.
            let others_granted = || {
                (0..PROCESSES)
                    .filter(|&w| w != worker)
                    .any(|w| (workload.worker_records(w).iter()).any(|r| r.start_ns >= from))
            };
            until(WHOLE_LIMIT, others_granted).await;
            let to = mono_ns();
            proxy.heal();
            cut = Some(Cut { worker, from, to });
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
    Injected {
        old,
        new,
        at,
        promoted,
        cut,
    }
}

/// The workers' connection spec for `group`'s master under `setting`.
fn worker_spec(group: &PartitionedSentinel, setting: Setting) -> String {
    format!(
        "sentinel:{}@{}{}",
        group.master_name(),
        group.sentinel_urls().join(","),
        setting.url_suffix()
    )
}

/// Every node but `new` made a replica of it, until the topology is whole (at most
/// `WHOLE_LIMIT`); whether it became whole.
async fn until_whole(group: &mut PartitionedSentinel, new: usize) -> bool {
    until(WHOLE_LIMIT, || {
        (0..group.len())
            .filter(|&i| i != new)
            .for_each(|i| drop(group.reattach(i, new)));
        group.is_whole(new)
    })
    .await
}

/// `failovers` faults (in turn) under load with `setting`: the findings, and why the rounds
/// ended early, if they did.
async fn failovers_under_load(
    setting: Setting,
    failovers: usize,
    postgres: &PostgresServer,
) -> (Findings, Option<String>) {
    let mut group = PartitionedSentinel::start_with(setting.server_args()).await;
    let spec = worker_spec(&group, setting);
    let run = format!("failover-{setting:?}");
    let workload = Workload::start_with_family(WORKER, &run, &spec, postgres).await;
    let mut windows = Vec::new();
    let mut incomplete = None;
    for round in 0..failovers {
        let fault = FAULTS[round % FAULTS.len()];
        let started = Instant::now();
        let Injected {
            old,
            new,
            at,
            promoted,
            cut,
        } = inject(&mut group, &workload, fault, round).await;
        // The old master joins the new one as a replica (the sentinels would, ~8 s later), and
        // so does any other node not replicating from it (seen once after a `SENTINEL
        // FAILOVER`: the old master re-attached, then found replicating from the other
        // replica); `REPLICAOF` of the master a node already follows changes nothing.
        let reattached = until(WHOLE_LIMIT, || group.reattach(old, new).is_ok()).await;
        let whole = reattached && until_whole(&mut group, new).await;
        if !whole {
            incomplete = Some(format!(
                "round {round} ({fault:?}): not whole after {WHOLE_LIMIT:?}: {}",
                group.describe()
            ));
            break;
        }
        // A lease of load after the topology is whole, before the next fault.
        tokio::time::sleep(Duration::from_millis(WATCHDOG_MS)).await;
        windows.push(Window {
            promotion: Some(Promotion {
                at: promoted,
                deposed: format!("127.0.0.1:{}", group.proxy(old).port()),
            }),
            cut,
            ..Window::new(fault.describe(), at, mono_ns())
        });
        eprintln!(
            "{setting:?} round {round} ({fault:?}): node {old} -> {new} in {:?} (promoted after {:?})",
            started.elapsed(),
            Duration::from_nanos(promoted - at)
        );
        // Calm load between the windows, where every promise is judged.
        tokio::time::sleep(CALM).await;
    }
    (workload.finish(&windows).await, incomplete)
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
    let faults: Vec<&'static str> = FAULTS.iter().map(|f| f.describe()).collect();
    let (mut rows, mut family, mut incomplete) = (Vec::new(), Vec::new(), Vec::new());
    let mut failed: Vec<String> = Vec::new();
    for setting in settings {
        let (findings, why) = failovers_under_load(setting, failovers, &postgres).await;
        print_summary(&format!("{setting:?}"), &findings);
        for (i, lags) in findings.switches() {
            eprintln!(
                "{setting:?} window {i} ({}): clients switched at {lags:?} ms from the promotion",
                findings.windows[i].fault
            );
        }
        let family_findings = findings.family.as_ref().expect("the family workload ran");
        eprintln!("{setting:?} family: {}", family_findings.summary());
        // The cut worker's holds stop (judged by `assert_invariants`), the others go on.
        for (i, cut) in (findings.windows.iter().enumerate()).filter_map(|(i, w)| Some((i, w.cut?)))
        {
            let report = findings.cut_report(cut);
            eprintln!(
                "{setting:?} window {i}: worker {} cut off for {:?}: {} of its sections started \
                 meanwhile ({} told of the loss), {} of the other workers'",
                cut.worker,
                Duration::from_nanos(cut.to - cut.from),
                report.cut_sections,
                report.cut_told_lost,
                report.others_granted
            );
            assert!(
                report.others_granted > 0,
                "window {i}: the other workers were not granted while worker {} was cut off",
                cut.worker
            );
        }
        for regression in findings.regressions() {
            eprintln!("{setting:?}: {regression}");
        }
        rows.extend(findings.rows("Sentinel", setting, &faults));
        family.push(family_findings.row(setting));
        // Judged after every setting ran, so that a failing setting does not hide the figures
        // of the others. Through Sentinel no token goes back, in the fault windows either (the
        // Cluster suite counts those in its windows: see SAFETY.md), but for the deposed
        // master's, which its successor's outrank by the failover epoch (`ranked_below`).
        judge(&format!("{setting:?}"), &findings, &mut failed, || {
            let regressions = findings.regressions();
            assert!(
                regressions.is_empty(),
                "{} token regressions:\n{}",
                regressions.len(),
                regressions.join("\n")
            );
            assert!(
                findings.failover.duplicate_tokens.is_empty(),
                "{}",
                findings.failover.duplicate_tokens.join("\n")
            );
            findings.assert_invariants();
        });
        incomplete.extend(why);
    }
    failover::print_table(&rows);
    failover::print_family_table(&family);
    eprintln!("failover suite: {:?}", started.elapsed());
    tokio::task::block_in_place(|| drop(postgres));
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
    assert!(incomplete.is_empty(), "{incomplete:?}");
}

/// Prints a run's summary and, per fault, what its deposed side did.
fn print_summary(label: &str, findings: &Findings) {
    eprintln!("{label}: {}", findings.summary());
    eprintln!(
        "{label}: deposed-side sections per fault (grants, accepted, over a rival with a \
         smaller token, accepted before a rival with a larger one reached the store, new side \
         refused): {:?}",
        (findings.sides().iter().flatten())
            .map(|s| (
                s.deposed,
                s.deposed_accepted,
                s.deposed_won,
                s.deposed_first,
                s.legitimate_refused
            ))
            .collect::<Vec<_>>()
    );
}

/// Runs `assertions` on a run's findings; a failure is kept in `failed` (with where the
/// records are) instead of ending the test, so that every setting's figures are printed before
/// the test fails.
fn judge(label: &str, findings: &Findings, failed: &mut Vec<String>, assertions: impl FnOnce()) {
    let judged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(assertions));
    if let Err(panic) = judged {
        let what = (panic.downcast_ref::<String>().cloned())
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        failed.push(format!(
            "{label} (records kept in {}): {what}",
            findings.records_dir.display()
        ));
    }
}

/// What a Sentinel clock-skew fault is called in the table.
fn describe(skew: Skew) -> &'static str {
    match skew {
        Skew::Behind => {
            "a replica lagging 2 s with its clock 5 s behind the master's promoted, the master killed"
        }
        Skew::Ahead => {
            "a replica lagging 2 s with its clock 5 s ahead of the master's promoted, the master killed"
        }
    }
}

/// One clock-skew fault: a replica restarted with its clock [`SKEW_US`] behind (or ahead of)
/// the master's (`clocks`: each node's offset from this machine's clock, in µs), re-attached
/// and in sync; then, as [`Fault::LaggingReplica`], its replication stream held for
/// [`SKEW_LAG`] under load (the other replica's priority 0, so this one is promoted) and the
/// master killed, restarted empty with the machine's clock.
async fn inject_skewed(
    group: &mut PartitionedSentinel,
    clocks: &mut [i64],
    skew: Skew,
) -> Injected {
    let old = group.current_master();
    let others: Vec<usize> = (0..group.len()).filter(|&i| i != old).collect();
    let (skewed, good) = (others[0], others[1]);
    let offset = skew.offset_from(clocks[old]);
    tokio::task::block_in_place(|| group.restart_with_clock(skewed, offset));
    clocks[skewed] = offset;
    let synced = until(WHOLE_LIMIT, || {
        let _ = group.reattach(skewed, old);
        group.is_whole(old)
    })
    .await;
    assert!(
        synced,
        "the skewed replica never synced: {}",
        group.describe()
    );
    let measured = group.node(skewed).clock_offset_us() - group.node(old).clock_offset_us();
    assert!(
        (measured - (offset - clocks[old])).abs() < 500_000,
        "the replica's clock is {measured} µs off the master's, not {}",
        offset - clocks[old]
    );
    group.set_replica_priority(good, 0);
    let at = mono_ns();
    group.stall(old, &[Peer::Node(skewed)], false, true);
    tokio::time::sleep(SKEW_LAG).await;
    group.kill(old);
    let new = tokio::task::block_in_place(|| group.wait_for_failover(old));
    let promoted = mono_ns();
    group.heal(old, &[Peer::Node(skewed)]);
    tokio::task::block_in_place(|| group.restart(old));
    clocks[old] = 0;
    group.set_replica_priority(good, 100);
    Injected {
        old,
        new,
        at,
        promoted,
        cut: None,
    }
}

/// `rounds` clock-skew faults of one kind under load with `setting`.
async fn skewed_failovers_under_load(
    skew: Skew,
    setting: Setting,
    rounds: usize,
    postgres: &PostgresServer,
) -> (Findings, Option<String>) {
    let mut group = PartitionedSentinel::start_with(setting.server_args()).await;
    let spec = worker_spec(&group, setting);
    let workload = Workload::start(
        WORKER,
        &format!("skew-{skew:?}-{setting:?}"),
        &spec,
        postgres,
    )
    .await;
    let mut clocks = vec![0i64; group.len()];
    let mut windows = Vec::new();
    let mut incomplete = None;
    for round in 0..rounds {
        let started = Instant::now();
        let Injected {
            old,
            new,
            at,
            promoted,
            ..
        } = inject_skewed(&mut group, &mut clocks, skew).await;
        let whole = until_whole(&mut group, new).await;
        if !whole {
            incomplete = Some(format!(
                "round {round} ({skew:?}): not whole after {WHOLE_LIMIT:?}: {}",
                group.describe()
            ));
            break;
        }
        // The window lasts until the promoted clock behind has caught up with every token the
        // old master issued (its clock, at most the lag past the last synced write), and a
        // lease more, and at least a lease past the whole topology.
        let caught_up = promoted
            + (SKEW_US as u64 + SKEW_LAG.as_nanos() as u64 / 1_000 + WATCHDOG_MS * 1_000) * 1_000;
        tokio::time::sleep(Duration::from_millis(WATCHDOG_MS)).await;
        let now = mono_ns();
        if now < caught_up {
            tokio::time::sleep(Duration::from_nanos(caught_up - now)).await;
        }
        windows.push(Window {
            promotion: Some(Promotion {
                at: promoted,
                deposed: format!("127.0.0.1:{}", group.proxy(old).port()),
            }),
            ..Window::new(describe(skew), at, mono_ns())
        });
        eprintln!(
            "{skew:?} {setting:?} round {round}: node {old} -> {new} in {:?} (promoted after {:?}; \
             clocks now {clocks:?} µs)",
            started.elapsed(),
            Duration::from_nanos(promoted - at)
        );
        tokio::time::sleep(CALM).await;
    }
    (workload.finish(&windows).await, incomplete)
}

/// A failover to a replica whose clock is behind the old master's by more than a lease (and
/// one ahead), with the last counter writes lost in the failover. With tokens floored by the
/// clock alone, a clock behind handed out tokens *lower* than ones already issued (a regression
/// and a legitimate holder the fenced store refused in the first run of this test) until it
/// caught up; ordered by the failover epoch first, they cannot. Judged: no token regression
/// (the deposed master's grants ranking below its successor's are counted apart), no token
/// issued twice, and `Findings::assert_invariants` (no stale write accepted, no lost update,
/// nothing outside the windows); the new master's holders the store refused are counted in the
/// table. One fault, the clock behind (the kind that sends clock-floored tokens back), with
/// `replica_ack` off; `FAILOVER_LONG=1`: four of each kind, with `replica_ack` off and on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_through_a_failover_to_a_replica_with_a_skewed_clock() {
    let long = std::env::var("FAILOVER_LONG").is_ok();
    let rounds = if long { 4 } else { 1 };
    let settings: &[Setting] = if long {
        &[Setting::Plain, Setting::Ack]
    } else {
        &[Setting::Plain]
    };
    let skews: &[Skew] = if long {
        &[Skew::Behind, Skew::Ahead]
    } else {
        &[Skew::Behind]
    };
    let started = Instant::now();
    let postgres = tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .expect("start PostgreSQL");
    let (mut rows, mut failed, mut incomplete) = (Vec::new(), Vec::new(), Vec::new());
    for &setting in settings {
        for &skew in skews {
            let (findings, why) =
                skewed_failovers_under_load(skew, setting, rounds, &postgres).await;
            print_summary(&format!("{skew:?} {setting:?}"), &findings);
            for regression in findings.regressions() {
                eprintln!("{skew:?} {setting:?}: {regression}");
            }
            for duplicate in &findings.failover.duplicate_tokens {
                eprintln!("{skew:?} {setting:?}: {duplicate}");
            }
            rows.extend(findings.rows("Sentinel", setting, &[describe(skew)]));
            // Tokens ordered by the failover epoch: the promoted replica's clock and lagging
            // counter do not send them back (the deposed master's last grants rank below its
            // successor's: `ranked_below`, not regressions), nor issue one twice.
            judge(
                &format!("{skew:?} {setting:?}"),
                &findings,
                &mut failed,
                || {
                    let regressions = findings.regressions();
                    assert!(regressions.is_empty(), "{}", regressions.join("\n"));
                    assert!(
                        findings.failover.duplicate_tokens.is_empty(),
                        "{}",
                        findings.failover.duplicate_tokens.join("\n")
                    );
                    findings.assert_invariants();
                },
            );
            incomplete.extend(why);
        }
    }
    failover::print_table(&rows);
    eprintln!("clock-skew failovers: {:?}", started.elapsed());
    tokio::task::block_in_place(|| drop(postgres));
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
    assert!(incomplete.is_empty(), "{incomplete:?}");
}
