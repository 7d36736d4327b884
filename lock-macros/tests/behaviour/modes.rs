//! `#[distributed_lock]`'s lock kinds against a real `redis-server`: `mode = "read"`,
//! `"write"` and `"fair"`, semaphores (`permits`/`capacity`), and `max_hold`.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, LossReason, distributed_lock};
use lock_tests::RedisServer;
use tokio::sync::Barrier;
use tokio::time::{sleep, timeout};

use common::{AppError, connect};

/// Measures how many bodies run at the same time, and records when each entered (`who`) and
/// left (`/who`).
#[derive(Debug, Default)]
struct Probe {
    inside: AtomicUsize,
    max_inside: AtomicUsize,
    runs: AtomicUsize,
    events: Mutex<Vec<String>>,
}

impl Probe {
    async fn critical_section(&self, who: &'static str, hold: Duration) {
        let now = self.inside.fetch_add(1, SeqCst) + 1;
        self.max_inside.fetch_max(now, SeqCst);
        self.events.lock().unwrap().push(who.to_string());
        sleep(hold).await;
        self.events.lock().unwrap().push(format!("/{who}"));
        self.inside.fetch_sub(1, SeqCst);
        self.runs.fetch_add(1, SeqCst);
    }

    fn max(&self) -> usize {
        self.max_inside.load(SeqCst)
    }

    fn runs(&self) -> usize {
        self.runs.load(SeqCst)
    }

    /// Entries and exits, in order.
    fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }

    /// Who entered, in order.
    fn order(&self) -> Vec<String> {
        self.events()
            .into_iter()
            .filter(|e| !e.starts_with('/'))
            .collect()
    }
}

/// Resolves once `probe` has `n` bodies inside; panics after 5 s.
async fn until_inside(probe: &Probe, n: usize) {
    let inside = async {
        while probe.inside.load(SeqCst) < n {
            sleep(Duration::from_millis(2)).await;
        }
    };
    timeout(Duration::from_secs(5), inside)
        .await
        .unwrap_or_else(|_| panic!("{n} bodies were never inside at once: {:?}", probe.events()));
}

// --- mode = "read" / "write" ---

/// Waits inside the body until `barrier` is full: only possible if the readers overlap.
#[distributed_lock(name = "stock:<id>", mode = "read", client = locks, wait = "5s")]
async fn read_together(locks: LockClient, id: u32, barrier: Arc<Barrier>) -> Result<u32, AppError> {
    timeout(Duration::from_secs(5), barrier.wait())
        .await
        .expect("the readers did not overlap: each waited for the other");
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_mode_calls_run_at_the_same_time() {
    let server = RedisServer::start();
    let clients = [connect(&server).await, connect(&server).await];
    // Three readers: two tasks of one client, one of another client.
    let barrier = Arc::new(Barrier::new(3));
    let tasks: Vec<_> = [0, 0, 1]
        .into_iter()
        .map(|c| tokio::spawn(read_together(clients[c].clone(), 7, barrier.clone())))
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap(), 7);
    }
    assert!(
        !clients[0]
            .rw_lock("stock:7")
            .read()
            .is_locked()
            .await
            .unwrap()
    );
}

#[distributed_lock(name = "stock:<id>", mode = "read", client = locks)]
async fn read_stock(
    locks: LockClient,
    id: u32,
    probe: Arc<Probe>,
    hold: Duration,
) -> Result<(), AppError> {
    let _ = id;
    probe.critical_section("read", hold).await;
    Ok(())
}

#[distributed_lock(name = "stock:<id>", mode = "write", client = locks)]
async fn write_stock(
    locks: LockClient,
    id: u32,
    probe: Arc<Probe>,
    hold: Duration,
) -> Result<(), AppError> {
    let _ = id;
    probe.critical_section("write", hold).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_mode_call_excludes_read_mode_calls() {
    let server = RedisServer::start();
    let (locks, other) = (connect(&server).await, connect(&server).await);
    let probe = Arc::new(Probe::default());
    let hold = Duration::from_millis(300);

    let writer = tokio::spawn(write_stock(locks.clone(), 1, probe.clone(), hold));
    until_inside(&probe, 1).await;
    let readers: Vec<_> = [&locks, &other]
        .into_iter()
        .map(|c| tokio::spawn(read_stock(c.clone(), 1, probe.clone(), Duration::ZERO)))
        .collect();
    writer.await.unwrap().unwrap();
    for reader in readers {
        reader.await.unwrap().unwrap();
    }

    assert_eq!(probe.runs(), 3);
    let events = probe.events();
    assert_eq!(
        events[..2],
        ["write", "/write"],
        "a reader ran while the writer held the lock: {events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_mode_calls_exclude_a_write_mode_call() {
    let server = RedisServer::start();
    let (locks, other) = (connect(&server).await, connect(&server).await);
    let probe = Arc::new(Probe::default());
    let hold = Duration::from_millis(300);

    let readers: Vec<_> = [&locks, &other]
        .into_iter()
        .map(|c| tokio::spawn(read_stock(c.clone(), 2, probe.clone(), hold)))
        .collect();
    until_inside(&probe, 2).await;
    let start = Instant::now();
    write_stock(other.clone(), 2, probe.clone(), Duration::ZERO)
        .await
        .unwrap();
    let waited = start.elapsed();
    for reader in readers {
        reader.await.unwrap().unwrap();
    }

    assert_eq!(probe.max(), 2, "the readers did not overlap");
    let events = probe.events();
    assert_eq!(
        events[4..],
        ["write", "/write"],
        "the writer ran while readers held the lock: {events:?}"
    );
    assert!(waited >= hold / 2, "the writer waited only {waited:?}");
}

#[distributed_lock(name = "ledger", mode = "write", client = locks, wait = "0s")]
async fn write_then_read(locks: &LockClient) -> Result<&'static str, AppError> {
    // Same lock, read side, inside the writer's body: re-enters at once.
    read_ledger(locks).await
}

#[distributed_lock(name = "ledger", mode = "read", client = locks, wait = "0s")]
async fn read_ledger(locks: &LockClient) -> Result<&'static str, AppError> {
    Ok("read")
}

#[distributed_lock(name = "ledger", mode = "read", client = locks, wait = "0s")]
async fn read_then_write(locks: &LockClient) -> Result<&'static str, AppError> {
    // An upgrade would wait for itself: refused at once.
    write_ledger(locks).await
}

#[distributed_lock(name = "ledger", mode = "write", client = locks, wait = "0s")]
async fn write_ledger(locks: &LockClient) -> Result<&'static str, AppError> {
    Ok("write")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_calls_reenter_a_writer_but_cannot_upgrade_a_reader() {
    let server = RedisServer::start();
    let locks = connect(&server).await;

    assert_eq!(write_then_read(&locks).await.unwrap(), "read");
    match read_then_write(&locks).await {
        Err(AppError::Lock(LockError::WouldDeadlock { name, .. })) => assert_eq!(name, "ledger"),
        other => panic!("expected WouldDeadlock, got {other:?}"),
    }
    // Both released: the write side is free for another client.
    let other = connect(&server).await;
    let guard = other
        .rw_lock("ledger")
        .write()
        .try_acquire(Duration::ZERO)
        .await
        .unwrap();
    guard.release().await.unwrap();
}

// --- mode = "fair" ---

#[distributed_lock(name = "drop:<item>", mode = "fair", client = locks)]
async fn queue_for(
    locks: LockClient,
    item: &'static str,
    who: &'static str,
    probe: Arc<Probe>,
) -> Result<&'static str, AppError> {
    probe.critical_section(who, Duration::from_millis(20)).await;
    Ok(who)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fair_mode_calls_exclude_each_other_and_go_in_arrival_order() {
    let server = RedisServer::start();
    let clients = [connect(&server).await, connect(&server).await];
    let probe = Arc::new(Probe::default());

    // Held elsewhere while the calls arrive, one every 100 ms, from two clients.
    let held = clients[1].fair_lock("drop:shoe").acquire().await.unwrap();
    let mut tasks = Vec::new();
    for (i, who) in ["a", "b", "c", "d", "e"].into_iter().enumerate() {
        let locks = clients[i % 2].clone();
        tasks.push(tokio::spawn(queue_for(locks, "shoe", who, probe.clone())));
        sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(probe.runs(), 0, "a call ran while the lock was held");
    held.release().await.unwrap();
    for task in tasks {
        task.await.unwrap().unwrap();
    }

    assert_eq!(probe.max(), 1, "two fair-mode bodies overlapped");
    assert_eq!(probe.order(), ["a", "b", "c", "d", "e"]);
    assert!(!clients[0].fair_lock("drop:shoe").is_locked().await.unwrap());
}

// --- semaphores: permits / capacity ---

/// One permit per call (`capacity` alone).
#[distributed_lock(name = "supplier:<name>", capacity = 2, client = locks)]
async fn call_supplier(
    locks: LockClient,
    name: &'static str,
    probe: Arc<Probe>,
) -> Result<(), AppError> {
    probe
        .critical_section(name, Duration::from_millis(100))
        .await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_semaphore_with_capacity_2_runs_at_most_2_bodies_at_once() {
    let server = RedisServer::start();
    let clients = [connect(&server).await, connect(&server).await];
    let probe = Arc::new(Probe::default());

    let tasks: Vec<_> = (0..6)
        .map(|i| tokio::spawn(call_supplier(clients[i % 2].clone(), "acme", probe.clone())))
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }

    assert_eq!(probe.runs(), 6);
    assert!(probe.max() <= 2, "{} bodies ran at once", probe.max());
    assert_eq!(probe.max(), 2, "the permits were never used together");
    let semaphore = clients[0].semaphore("supplier:acme", 2);
    assert_eq!(semaphore.available().await.unwrap(), 2);
}

/// Two permits per call out of five: at most two calls at a time.
#[distributed_lock(name = "bulk", permits = 2, capacity = 5, client = locks)]
async fn bulk_job(
    locks: LockClient,
    probe: Arc<Probe>,
    observed_free: Arc<Mutex<Vec<u32>>>,
) -> Result<(), AppError> {
    let free = locks.semaphore("bulk", 5).available().await?;
    observed_free.lock().unwrap().push(free);
    probe
        .critical_section("bulk", Duration::from_millis(100))
        .await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_call_takes_its_permits() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let probe = Arc::new(Probe::default());
    let observed_free = Arc::new(Mutex::new(Vec::new()));

    let tasks: Vec<_> = (0..6)
        .map(|_| {
            tokio::spawn(bulk_job(
                locks.clone(),
                probe.clone(),
                observed_free.clone(),
            ))
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }

    assert_eq!(probe.runs(), 6);
    assert_eq!(probe.max(), 2, "5 permits fit two calls of 2 at once");
    // Inside a body at least its own two permits are taken.
    let observed = observed_free.lock().unwrap().clone();
    assert!(observed.iter().all(|&free| free <= 3), "{observed:?}");
    assert_eq!(locks.semaphore("bulk", 5).available().await.unwrap(), 5);
}

#[distributed_lock(name = "tight", capacity = 1, client = locks, wait = "0s")]
async fn tight(locks: &LockClient, depth: u32) -> Result<u32, AppError> {
    if depth == 0 {
        return Ok(0);
    }
    // Nested calls re-enter without taking another permit.
    Ok(Box::pin(tight(locks, depth - 1)).await? + 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_semaphore_call_reenters_and_a_full_one_times_out() {
    let server = RedisServer::start();
    let (locks, other) = (connect(&server).await, connect(&server).await);

    assert_eq!(tight(&locks, 3).await.unwrap(), 3);

    let held = other.semaphore("tight", 1).acquire().await.unwrap();
    assert!(matches!(
        tight(&locks, 0).await,
        Err(AppError::Lock(LockError::WaitTimeout { .. }))
    ));
    held.release().await.unwrap();
    assert_eq!(tight(&locks, 0).await.unwrap(), 0);
}

/// Someone lowered the capacity in Redis below this fn's `permits`: the call fails with
/// `InvalidPermits` rather than waiting forever.
#[distributed_lock(name = "shrunk", permits = 3, capacity = 4, client = locks)]
async fn wants_three(locks: &LockClient) -> Result<(), AppError> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_above_a_capacity_lowered_at_run_time_are_an_error() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    wants_three(&locks).await.unwrap();

    locks.semaphore("shrunk", 4).set_capacity(2).await.unwrap();
    match timeout(Duration::from_secs(5), wants_three(&locks)).await {
        Ok(Err(AppError::Lock(LockError::InvalidPermits {
            requested,
            capacity,
            ..
        }))) => assert_eq!((requested, capacity), (3, 2)),
        other => panic!("expected InvalidPermits, got {other:?}"),
    }
}

// --- max_hold ---

#[distributed_lock(name = "stuck-job", client = locks, max_hold = "400ms")]
async fn stuck_job(
    locks: &LockClient,
    body: Duration,
    finished: &AtomicBool,
) -> Result<(), AppError> {
    sleep(body).await;
    finished.store(true, SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_ends_a_body_that_runs_too_long() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let other = connect(&server).await;
    let finished = AtomicBool::new(false);

    let start = Instant::now();
    let result = stuck_job(&locks, Duration::from_secs(5), &finished).await;
    let took = start.elapsed();

    match result {
        Err(AppError::Lock(LockError::Lost { name, reason })) => {
            assert_eq!(name, "stuck-job");
            assert_eq!(reason, LossReason::MaxHoldExceeded);
        }
        other => panic!("expected the lost error, got {other:?}"),
    }
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(2),
        "took {took:?}"
    );
    assert!(!finished.load(SeqCst), "the body ran on after max_hold");
    // The lock was given back when the hold ended.
    let guard = other
        .lock("stuck-job")
        .try_acquire(Duration::from_secs(1))
        .await
        .expect("the lock was not released after max_hold");
    guard.release().await.unwrap();

    // A body that finishes within max_hold is not affected.
    stuck_job(&locks, Duration::from_millis(50), &finished)
        .await
        .unwrap();
    assert!(finished.load(SeqCst));
}

#[distributed_lock(name = "slow-reader", mode = "read", client = locks, max_hold = "300ms", on_lost = ignore)]
async fn slow_reader(locks: &LockClient) -> Result<bool, AppError> {
    sleep(Duration::from_millis(800)).await;
    // With `on_lost = ignore` the body finishes; the read side was given back meanwhile.
    Ok(locks.rw_lock("slow-reader").read().is_locked().await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_applies_to_every_kind_and_on_lost_ignore_finishes_the_body() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    assert!(!slow_reader(&locks).await.unwrap());
}

// --- fenced ---

/// Re-enters the hold it runs under and reads its token: `(issued before asking, the token)`.
#[distributed_lock(name = "fence:<id>", client = locks, fenced)]
async fn fenced_body(locks: LockClient, id: u32) -> Result<(Option<u64>, u64), AppError> {
    let held = locks.lock(format!("fence:{id}")).acquire().await?;
    assert!(held.is_reentrant());
    Ok((held.issued_token(), held.fencing_token().await?))
}

/// The same without `fenced`: tokens on demand.
#[distributed_lock(name = "fence:<id>", client = locks)]
async fn lazy_body(locks: LockClient, id: u32) -> Result<(Option<u64>, u64), AppError> {
    let held = locks.lock(format!("fence:{id}")).acquire().await?;
    assert!(held.is_reentrant());
    Ok((held.issued_token(), held.fencing_token().await?))
}

#[tokio::test]
async fn fenced_takes_the_token_with_the_grant_and_the_default_asks_for_it() {
    let redis = RedisServer::start();
    let locks = connect(&redis).await;
    let mut last = 0;
    for round in 0..3 {
        let (issued, token) = fenced_body(locks.clone(), 1).await.unwrap();
        assert_eq!(
            issued,
            Some(token),
            "round {round}: fenced, issued with the grant"
        );
        assert!(token > last, "round {round}: {token} after {last}");
        last = token;
        let (issued, token) = lazy_body(locks.clone(), 1).await.unwrap();
        assert_eq!(
            issued, None,
            "round {round}: on demand, none before the ask"
        );
        assert!(token > last, "round {round}: {token} after {last}");
        last = token;
    }
}
