//! Cross-process behaviour: exclusion between OS processes, and a holder killed with SIGKILL.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use lock_runtime::LockClient;
use lock_tests::RedisServer;
use lock_tests::family::{Section, most_at_once};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const WORKER: &str = env!("CARGO_BIN_EXE_lock-worker");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_never_lose_an_increment() {
    const PROCESSES: usize = 3;
    const TASKS: usize = 4;
    const PER_TASK: usize = 60;
    let redis = RedisServer::start();
    let mut children = Vec::new();
    for _ in 0..PROCESSES {
        children.push(
            Command::new(WORKER)
                .args(["count", &redis.url(), "shared", "counter"])
                .args([TASKS.to_string(), PER_TASK.to_string()])
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("spawn lock-worker"),
        );
    }
    for child in children {
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("worker finished in time")
            .unwrap();
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("done {}", TASKS * PER_TASK)
        );
    }
    let total = redis.cmd(&["GET", "counter"]);
    assert_eq!(
        total.text().and_then(|t| t.parse::<usize>().ok()),
        Some(PROCESSES * TASKS * PER_TASK)
    );
    assert!(redis.keys("lock:{shared}").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_with_sigkill_frees_the_lock_within_its_lease() {
    let redis = RedisServer::start();
    let mut holder = Command::new(WORKER)
        .args(["hold", &redis.url(), "crash", "1000"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn lock-worker");
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let token: u64 = line.strip_prefix("held ").unwrap().parse().unwrap();

    let locks = LockClient::connect(&redis.url()).await.unwrap();
    // Alive holder: renewed past its 1 s lease.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        locks
            .lock("crash")
            .try_acquire(Duration::ZERO)
            .await
            .unwrap_err()
            .is_busy()
    );

    holder.start_kill().unwrap(); // SIGKILL: no release, no goodbye
    holder.wait().await.unwrap();
    let killed = Instant::now();
    let guard = locks
        .lock("crash")
        .try_acquire(Duration::from_secs(3))
        .await
        .expect("the lease of a dead holder runs out");
    let after = killed.elapsed();
    assert!(after < Duration::from_millis(2000), "took {after:?}"); // lease 1 s + 1 s
    assert!(guard.fencing_token().await.unwrap() > token);
    guard.release().await.unwrap();
}

/// Runs `processes` workers of `lock-worker family` on one primitive and collects their
/// sections (CLOCK_MONOTONIC, comparable across processes).
async fn family_sections(
    redis: &RedisServer,
    kind: &str,
    name: &str,
    processes: usize,
    tasks: usize,
    rounds: usize,
    hold_ms: u64,
) -> Vec<Section> {
    let mut children = Vec::new();
    for _ in 0..processes {
        children.push(
            Command::new(WORKER)
                .args(["family", &redis.url(), kind, name])
                .args([tasks, rounds].map(|n| n.to_string()))
                .arg(hold_ms.to_string())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("spawn lock-worker"),
        );
    }
    let mut sections = Vec::new();
    for child in children {
        let out = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
            .await
            .expect("worker finished in time")
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(text.lines().last(), Some("done"), "{text}");
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("section ") {
                sections.push(Section::parse(&format!("{rest} false")).expect("a section line"));
            }
        }
    }
    assert_eq!(sections.len(), processes * tasks * rounds);
    sections
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_never_hold_more_permits_than_the_capacity() {
    let redis = RedisServer::start();
    let sections = family_sections(&redis, "semaphore:3", "supplier", 3, 4, 15, 5).await;
    let most = most_at_once(&sections.iter().collect::<Vec<_>>());
    assert!(most <= 3, "{most} permit holders at once");
    assert_eq!(most, 3, "the capacity was used in full");
    assert!(redis.keys("lock:{supplier}").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_never_overlap_a_writer_with_anyone() {
    let redis = RedisServer::start();
    let sections = family_sections(&redis, "rw", "stock", 3, 4, 12, 4).await;
    let writes: Vec<&Section> = sections.iter().filter(|s| s.kind == "write").collect();
    assert!(!writes.is_empty());
    for w in &writes {
        for other in &sections {
            if std::ptr::eq(*w, other) {
                continue;
            }
            assert!(
                other.end <= w.start || other.start >= w.end,
                "writer {w:?} overlaps {other:?}"
            );
        }
    }
    let readers: Vec<&Section> = sections.iter().filter(|s| s.kind == "read").collect();
    assert!(most_at_once(&readers) > 1, "readers ran in parallel");
    assert!(
        redis
            .keys("lock:{stock}*")
            .iter()
            .all(|k| k.ends_with(":fence"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_take_a_fair_lock_in_the_order_they_asked() {
    // Everybody waits: each process's tasks ask again right after their turn, so the queue is
    // never empty. The order is judged by what Redis saw (`MONITOR`: the commands in the order
    // it ran them), not by a stamp the client takes before a request that a loaded scheduler
    // can delay by tens of milliseconds.
    let redis = RedisServer::start();
    let mut monitor = Monitor::start(&redis).await;
    let mut sections = family_sections(&redis, "fair", "drop", 3, 3, 12, 3).await;
    let calls = monitor.fair_acquires(&redis).await;
    sections.sort_by_key(|s| s.start);
    assert!(
        most_at_once(&sections.iter().collect::<Vec<_>>()) == 1,
        "exclusive"
    );
    // Per acquisition (its owner id is its own): the first call (it joined the queue, or was
    // granted at once) and the last (the grant: it does not ask again once it holds).
    let mut asks: HashMap<&str, FairAsk> = HashMap::new();
    for (i, call) in calls.iter().enumerate() {
        let ask = asks.entry(&call.owner).or_insert(FairAsk {
            first: i,
            granted: i,
            last_us: call.us,
            longest_gap_us: 0,
        });
        ask.granted = i;
        ask.longest_gap_us = ask.longest_gap_us.max(call.us - ask.last_us);
        ask.last_us = call.us;
    }
    assert_eq!(asks.len(), sections.len(), "one owner id per section");
    // A waiter whose place was not refreshed for 5 s (`PLACE_TTL`: its process froze) is
    // dropped from the queue by design and asks again at the back.
    const PLACE_TTL_US: u64 = 5_000_000;
    let mut pairs = 0u64;
    let mut lapsed = 0u64;
    let mut inversions = Vec::new();
    let asks: Vec<(&str, FairAsk)> = asks.into_iter().collect();
    for (owner_a, a) in &asks {
        for (owner_b, b) in &asks {
            // `b` asked after `a` and while `a` was still waiting: contention between them.
            if !(a.first < b.first && b.first < a.granted) {
                continue;
            }
            if a.longest_gap_us > PLACE_TTL_US {
                lapsed += 1;
                continue;
            }
            pairs += 1;
            if b.granted < a.granted {
                inversions.push((*owner_a, *owner_b));
            }
        }
    }
    println!(
        "fair order: {pairs} contended pairs in Redis's order, {} inversions, {lapsed} excused \
         (a place not refreshed for {PLACE_TTL_US} µs)",
        inversions.len()
    );
    assert!(
        pairs > 100,
        "too little contention to judge the order: {pairs}"
    );
    assert!(
        inversions.is_empty(),
        "granted before a waiter that asked earlier: {:?}",
        &inversions[..inversions.len().min(5)]
    );
}

/// One fair acquisition as Redis saw it: indexes into the `MONITOR` log.
#[derive(Clone, Copy)]
struct FairAsk {
    first: usize,
    granted: usize,
    last_us: u64,
    longest_gap_us: u64,
}

/// One fair-lock acquire call as `MONITOR` showed it.
struct FairCall {
    /// The server's clock when it ran the call, in microseconds.
    us: u64,
    owner: String,
}

/// `redis-cli MONITOR` on a server: every command it runs, in the order it ran them, with the
/// server's time.
struct Monitor {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Monitor {
    async fn start(redis: &RedisServer) -> Monitor {
        let url = redis.url();
        let port = url
            .rsplit(':')
            .next()
            .expect("a port")
            .trim_end_matches('/');
        let mut child = Command::new("redis-cli")
            .args(["-p", port, "monitor"])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn redis-cli");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // `OK` once it is watching.
        assert_eq!(next_line(&mut lines).await, "OK");
        Monitor { child, lines }
    }

    /// The fair-lock acquire calls it saw, up to a marker sent now.
    async fn fair_acquires(&mut self, redis: &RedisServer) -> Vec<FairCall> {
        const MARKER: &str = "end-of-the-fair-run";
        redis.cmd(&["ECHO", MARKER]);
        let mut calls = Vec::new();
        // The first calls fail until a client loads the library (`FUNCTION LOAD`): they did not
        // join the queue; the client loads it and calls again.
        let mut loaded = false;
        loop {
            let line = next_line(&mut self.lines).await;
            if line.contains(MARKER) {
                break;
            }
            loaded |=
                line.contains(r#""FUNCTION" "LOAD""#) || line.contains(r#""function" "load""#);
            if let Some(call) = parse_fair_acquire(&line).filter(|_| loaded) {
                calls.push(call);
            }
        }
        assert!(loaded, "no client loaded the library");
        self.child.start_kill().unwrap();
        calls
    }
}

/// `1732612345.123456 [0 127.0.0.1:5555] "FCALL" "<..>fair_acquire" "4" <keys> "<owner>" …`
fn parse_fair_acquire(line: &str) -> Option<FairCall> {
    let (stamp, rest) = line.split_once(' ')?;
    let (secs, micros) = stamp.split_once('.')?;
    let us = secs.parse::<u64>().ok()? * 1_000_000 + micros.parse::<u64>().ok()?;
    let args = quoted(rest.split_once("] ")?.1);
    if !args.first()?.eq_ignore_ascii_case("fcall") || !args.get(1)?.ends_with("fair_acquire") {
        return None;
    }
    let keys: usize = args.get(2)?.parse().ok()?;
    let owner = args.get(3 + keys)?.clone();
    Some(FairCall { us, owner })
}

/// The `"…"` arguments of a `MONITOR` line (backslash escapes kept as they are).
fn quoted(text: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    arg.push(c);
                    arg.extend(chars.next());
                }
                '"' => break,
                c => arg.push(c),
            }
        }
        args.push(arg);
    }
    args
}

/// Spawns `lock-worker hold-family` and returns it with its stdout lines.
async fn hold_family(
    redis: &RedisServer,
    kind: &str,
    name: &str,
    watchdog_ms: u64,
) -> (
    tokio::process::Child,
    tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) {
    let mut child = Command::new(WORKER)
        .args(["hold-family", &redis.url(), kind, name])
        .arg(watchdog_ms.to_string())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn lock-worker");
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

async fn next_line(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> String {
    tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("a line in time")
        .unwrap()
        .expect("a line")
}

/// The worker's line once it holds: `held <token>`, after `waiting` when its acquire took more
/// than 50 ms (the worker says so for the tests that wait for it to queue; on a loaded machine
/// a free lock can take that long too).
async fn held_line(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> String {
    match next_line(lines).await {
        waiting if waiting == "waiting" => next_line(lines).await,
        line => line,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_holder_killed_with_sigkill_gives_its_permit_back_within_its_lease() {
    let redis = RedisServer::start();
    let (mut holder, mut lines) = hold_family(&redis, "semaphore:1", "crash", 1000).await;
    let held = held_line(&mut lines).await;
    assert!(held.starts_with("held "), "{held}");
    let locks = LockClient::connect(&redis.url()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let sem = locks.semaphore("crash", 1);
    assert_eq!(sem.available().await.unwrap(), 0, "renewed past its lease");
    holder.start_kill().unwrap();
    holder.wait().await.unwrap();
    let killed = Instant::now();
    let permit = sem.try_acquire(Duration::from_secs(3)).await.unwrap();
    assert!(
        killed.elapsed() < Duration::from_millis(2000),
        "{:?}",
        killed.elapsed()
    );
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_killed_with_sigkill_blocks_a_writer_for_its_lease_only() {
    let redis = RedisServer::start();
    let (mut holder, mut lines) = hold_family(&redis, "read", "crash", 1000).await;
    let held = held_line(&mut lines).await;
    assert!(held.starts_with("held "), "{held}");
    holder.start_kill().unwrap();
    holder.wait().await.unwrap();
    let killed = Instant::now();
    let locks = LockClient::connect(&redis.url()).await.unwrap();
    let w = locks
        .rw_lock("crash")
        .write()
        .try_acquire(Duration::from_secs(3))
        .await
        .unwrap();
    assert!(
        killed.elapsed() < Duration::from_millis(2000),
        "{:?}",
        killed.elapsed()
    );
    w.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_killed_with_sigkill_stops_blocking_the_queue_within_its_place() {
    let redis = RedisServer::start();
    let locks = LockClient::connect(&redis.url()).await.unwrap();
    let held = locks.fair_lock("queue").acquire().await.unwrap();
    let (mut waiter, mut lines) = hold_family(&redis, "fair", "queue", 1000).await;
    assert_eq!(next_line(&mut lines).await, "waiting");
    assert_eq!(redis.cmd(&["ZCARD", "lock:{queue}:queue"]).int(), Some(1));
    // A live waiter of this process queues behind the one about to die.
    let other = locks.clone();
    let behind = tokio::spawn(async move {
        let g = other.fair_lock("queue").acquire().await.unwrap();
        let at = Instant::now();
        (g, at)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    waiter.start_kill().unwrap();
    waiter.wait().await.unwrap();
    let killed = Instant::now();
    held.release().await.unwrap();
    let (g, at) = tokio::time::timeout(Duration::from_secs(10), behind)
        .await
        .expect("the queue healed")
        .unwrap();
    // The dead waiter's place lasts at most 5 s from its last refresh.
    assert!(
        at - killed < Duration::from_millis(5500),
        "{:?}",
        at - killed
    );
    g.release().await.unwrap();
}

/// SAFETY.md "Paused processes": a process stopped (`SIGSTOP`) past its 1 s lease while a
/// rival takes its mutex, its semaphore permit and the write side over its read hold never
/// acts on the lost holds once resumed (`SIGCONT`): none of its tasks, which check
/// `is_lost()` before every use, sees a hold as held at a check made after the rival's grant,
/// even when they run before its watchdog task does; `lost()` resolves too, and a fencing token
/// asked for after it (the mutex was taken without one) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_process_never_acts_on_a_lost_hold() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    const ROUNDS: usize = 5;
    const TASKS: usize = 16;
    let redis = RedisServer::start();
    let rival = LockClient::connect(&redis.url()).await.unwrap();
    let mut failed_rounds = Vec::new();
    for round in 0..ROUNDS {
        let prefix = format!("paused{round}");
        let mut child = Command::new(WORKER)
            .args(["paused", &redis.url(), &prefix, "1000"])
            .arg(TASKS.to_string())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn lock-worker");
        let pid = Pid::from_raw(child.id().unwrap() as i32);
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(next_line(&mut lines).await, "held");
        // Let the tasks use the holds for a moment (they spin: kept short, the machine is shared).
        tokio::time::sleep(Duration::from_millis(50)).await;
        kill(pid, Signal::SIGSTOP).unwrap();

        // The rival gets each of them once the stopped process' leases ran out in Redis.
        let (lock, sem, rw) = (
            rival.lock(format!("{prefix}:mutex")),
            rival.semaphore(format!("{prefix}:sem"), 1),
            rival.rw_lock(format!("{prefix}:rw")),
        );
        let (mutex, permit, write) = tokio::join!(
            rival_grant(lock.acquire()),
            rival_grant(sem.acquire()),
            rival_grant(rw.write().acquire()),
        );
        let granted = |kind: &str| match kind {
            "mutex" => mutex.1,
            "permit" => permit.1,
            _ => write.1,
        };
        kill(pid, Signal::SIGCONT).unwrap();

        let (mut tasks, mut signals, mut violations) = (0, 0, Vec::new());
        loop {
            let line = next_line(&mut lines).await;
            let fields: Vec<&str> = line.split(' ').collect();
            match fields.as_slice() {
                ["done"] => break,
                ["uses", kind, last_held, first_lost] => {
                    tasks += 1;
                    let last_held: u64 = last_held.parse().unwrap();
                    let first_lost: u64 = first_lost.parse().unwrap();
                    assert!(first_lost > 0);
                    if last_held > granted(kind) {
                        violations.push(format!(
                            "{kind}: held at a check {} µs after the rival's grant",
                            (last_held - granted(kind)) / 1000
                        ));
                    }
                }
                ["signal", kind, _, token] => {
                    signals += 1;
                    assert_eq!(*token, "refused", "{kind}: a token issued after the loss");
                }
                _ => panic!("unexpected line {line:?}"),
            }
        }
        assert_eq!(tasks, 3 * TASKS);
        assert_eq!(signals, 3, "lost() resolved for each hold");
        tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .expect("the worker exits")
            .unwrap();
        for (guard, _) in [mutex, permit, write] {
            guard.release().await.unwrap();
        }
        if !violations.is_empty() {
            eprintln!(
                "round {round}: {} stale checks, first: {}",
                violations.len(),
                violations[0]
            );
            failed_rounds.push(round);
        }
    }
    assert!(
        failed_rounds.is_empty(),
        "rounds {failed_rounds:?} of {ROUNDS} acted on a lost hold"
    );
}

/// The rival's grant, stamped after it: a check stamped later came after it.
async fn rival_grant(
    acquire: impl std::future::Future<Output = Result<lock_runtime::LockGuard, lock_runtime::LockError>>,
) -> (lock_runtime::LockGuard, u64) {
    let guard = tokio::time::timeout(Duration::from_secs(10), acquire)
        .await
        .expect("the rival's grant in time")
        .unwrap();
    (guard, lock_tests::mono_ns())
}
