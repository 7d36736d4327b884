//! `#[distributed_lock]` against a real `redis-server`: exclusion, reentrancy, waiting,
//! renewal, loss, release on drop and panic, key formatting and the tracing span (the tests in
//! this file stay at the root of the binary: the span's target is the module path,
//! `behaviour`). The modules were test binaries of their own: lock names over a collection
//! (`many`), the lock kinds (`modes`) and the process-wide default client (`default_client`);
//! and `ui_pass`, the forms of the macro that must keep compiling.

mod common;
mod default_client;
mod many;
mod modes;
/// The forms that must keep compiling (`ui/pass`), each run once (public: see its docs).
#[path = "../ui/pass/mod.rs"]
pub mod ui_pass;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, distributed_lock};
use lock_tests::{RedisServer, TcpProxy};
use tokio::time::sleep;

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Body(&'static str),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

async fn connect(server: &RedisServer) -> LockClient {
    lock_tests::client(server).await
}

/// A client whose watchdog lease is 1 s (renewed every ~333 ms).
async fn connect_fast_watchdog(server: &RedisServer) -> LockClient {
    lock_tests::client_with(server, |b| b.watchdog_timeout(Duration::from_secs(1))).await
}

/// Measures how many bodies run at the same time.
#[derive(Debug, Default)]
struct Probe {
    inside: AtomicUsize,
    max_inside: AtomicUsize,
    runs: AtomicUsize,
}

impl Probe {
    async fn critical_section(&self, hold: Duration) {
        let now = self.inside.fetch_add(1, SeqCst) + 1;
        self.max_inside.fetch_max(now, SeqCst);
        sleep(hold).await;
        self.inside.fetch_sub(1, SeqCst);
        self.runs.fetch_add(1, SeqCst);
    }

    fn max(&self) -> usize {
        self.max_inside.load(SeqCst)
    }

    fn runs(&self) -> usize {
        self.runs.load(SeqCst)
    }
}

#[distributed_lock(name = "counter:<id>", client = locks)]
async fn guarded(
    locks: LockClient,
    id: u32,
    probe: Arc<Probe>,
    hold: Duration,
) -> Result<u32, AppError> {
    probe.critical_section(hold).await;
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_key_calls_serialise_across_tasks() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let probe = Arc::new(Probe::default());

    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (locks, probe) = (locks.clone(), probe.clone());
            tokio::spawn(guarded(locks, 1, probe, Duration::from_millis(30)))
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap(), 1);
    }

    assert_eq!(probe.runs(), 8);
    assert_eq!(probe.max(), 1, "two bodies with the same key overlapped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_key_calls_serialise_across_two_clients() {
    let server = RedisServer::start();
    let clients = [connect(&server).await, connect(&server).await];
    let probe = Arc::new(Probe::default());

    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let (locks, probe) = (clients[i % 2].clone(), probe.clone());
            tokio::spawn(guarded(locks, 2, probe, Duration::from_millis(30)))
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }

    assert_eq!(probe.runs(), 10);
    assert_eq!(probe.max(), 1, "two clients ran the same key at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn different_keys_run_in_parallel() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let probe = Arc::new(Probe::default());
    let hold = Duration::from_millis(300);

    let (a, b) = tokio::join!(
        guarded(locks.clone(), 10, probe.clone(), hold),
        guarded(locks.clone(), 11, probe.clone(), hold),
    );

    assert_eq!((a.unwrap(), b.unwrap()), (10, 11));
    // The overlap is the proof, however slow the machine.
    assert_eq!(probe.max(), 2, "bodies with different keys did not overlap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn joined_same_key_calls_exclude_each_other() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let probe = Arc::new(Probe::default());
    let hold = Duration::from_millis(150);

    let start = Instant::now();
    let (a, b) = tokio::join!(
        guarded(locks.clone(), 3, probe.clone(), hold),
        guarded(locks.clone(), 3, probe.clone(), hold),
    );

    assert!(a.is_ok() && b.is_ok());
    assert_eq!(probe.max(), 1, "join!ed same-key calls overlapped");
    assert!(start.elapsed() >= 2 * hold);
}

#[distributed_lock(name = "report", client = locks, wait = "200ms")]
async fn report(locks: &LockClient, ran: &AtomicBool) -> Result<(), AppError> {
    ran.store(true, SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_timeout_surfaces_as_the_users_error() {
    let server = RedisServer::start();
    let (locks, other) = (connect(&server).await, connect(&server).await);
    let held = other.lock("report").acquire().await.unwrap();
    let ran = AtomicBool::new(false);

    let start = Instant::now();
    let result = report(&locks, &ran).await;
    let waited = start.elapsed();

    match result {
        Err(AppError::Lock(LockError::WaitTimeout { name, .. })) => assert_eq!(name, "report"),
        other => panic!("expected a wait timeout, got {other:?}"),
    }
    assert!(!ran.load(SeqCst), "the body ran without the lock");
    assert!(
        waited >= Duration::from_millis(200) && waited < Duration::from_secs(2),
        "waited {waited:?}"
    );

    // Once the holder is gone the same call succeeds.
    held.release().await.unwrap();
    report(&locks, &ran).await.unwrap();
    assert!(ran.load(SeqCst));
}

#[distributed_lock(name = "account:<id>", client = locks, wait = "0s")]
async fn outer(locks: &LockClient, id: u32) -> Result<u32, AppError> {
    // Same key, same client, inside the outer body: must re-enter, not wait.
    let inner = inner(locks, id).await?;
    Ok(inner + 1)
}

#[distributed_lock(name = "account:<id>", client = locks, wait = "0s")]
async fn inner(locks: &LockClient, id: u32) -> Result<u32, AppError> {
    let _ = id;
    Ok(10)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_same_key_calls_reenter() {
    let server = RedisServer::start();
    let (locks, other) = (connect(&server).await, connect(&server).await);

    assert_eq!(outer(&locks, 5).await.unwrap(), 11);
    assert!(!locks.lock("account:5").is_locked().await.unwrap());

    // `wait = "0s"` really contends: outside the outer body the inner fn fails on a held lock.
    let held = other.lock("account:5").acquire().await.unwrap();
    assert!(matches!(
        inner(&locks, 5).await,
        Err(AppError::Lock(LockError::WaitTimeout { .. }))
    ));
    held.release().await.unwrap();
}

#[distributed_lock(name = "long-job", client = locks)]
async fn long_job(
    locks: &LockClient,
    started: &AtomicBool,
    finished: &AtomicBool,
    body: Duration,
) -> Result<(), AppError> {
    started.store(true, SeqCst);
    sleep(body).await;
    finished.store(true, SeqCst);
    Ok(())
}

async fn until(flag: &AtomicBool) {
    while !flag.load(SeqCst) {
        sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_long_bodys_lock() {
    let server = RedisServer::start();
    let locks = connect_fast_watchdog(&server).await;
    let other = connect(&server).await;
    let (started, finished) = (AtomicBool::new(false), AtomicBool::new(false));

    let probe = async {
        until(&started).await;
        let mut attempts = 0;
        // Three times the 1 s lease: without renewal the lock would expire after 1 s.
        while !finished.load(SeqCst) {
            let attempt = other.lock("long-job").try_acquire(Duration::ZERO).await;
            if !finished.load(SeqCst) {
                assert!(
                    matches!(attempt, Err(ref e) if e.is_busy()),
                    "another client took the lock while the body ran: {attempt:?}"
                );
                attempts += 1;
            }
            sleep(Duration::from_millis(200)).await;
        }
        attempts
    };
    let (result, attempts) = tokio::join!(
        long_job(&locks, &started, &finished, Duration::from_secs(3)),
        probe
    );

    result.unwrap();
    assert!(attempts >= 10, "only {attempts} attempts");
    assert!(!locks.lock("long-job").is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_on_lost_drops_the_body_and_returns_lost() {
    let server = RedisServer::start();
    let locks = connect_fast_watchdog(&server).await;
    let other = connect(&server).await;
    let (started, finished) = (AtomicBool::new(false), AtomicBool::new(false));

    let force = async {
        until(&started).await;
        sleep(Duration::from_millis(100)).await;
        assert!(other.lock("long-job").force_unlock().await.unwrap());
        Instant::now()
    };
    let (result, forced_at) = tokio::join!(
        long_job(&locks, &started, &finished, Duration::from_secs(5)),
        force
    );
    let detected_after = forced_at.elapsed();

    match result {
        Err(AppError::Lock(LockError::Lost { name, .. })) => assert_eq!(name, "long-job"),
        other => panic!("expected the lost error, got {other:?}"),
    }
    // Renewal every ~333 ms finds the lock gone.
    assert!(
        detected_after < Duration::from_secs(1),
        "took {detected_after:?}"
    );
    sleep(Duration::from_millis(100)).await;
    assert!(
        !finished.load(SeqCst),
        "the body kept running after the loss"
    );
}

#[distributed_lock(name = "cache-refresh", client = locks, on_lost = ignore)]
async fn refresh(locks: &LockClient, started: &AtomicBool, body: Duration) -> Result<u8, AppError> {
    started.store(true, SeqCst);
    sleep(body).await;
    Ok(7)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_lost_ignore_lets_the_body_finish() {
    let server = RedisServer::start();
    let locks = connect_fast_watchdog(&server).await;
    let other = connect(&server).await;
    let started = AtomicBool::new(false);

    let force = async {
        until(&started).await;
        assert!(other.lock("cache-refresh").force_unlock().await.unwrap());
    };
    let (result, ()) = tokio::join!(
        refresh(&locks, &started, Duration::from_millis(1500)),
        force
    );

    assert_eq!(result.unwrap(), 7);
}

#[distributed_lock(name = "payout", client = locks, lease = "400ms")]
async fn payout(locks: &LockClient, finished: &AtomicBool) -> Result<(), AppError> {
    sleep(Duration::from_secs(3)).await;
    finished.store(true, SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_ends_the_body_when_it_runs_out() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let finished = AtomicBool::new(false);

    let result = payout(&locks, &finished).await;

    assert!(
        matches!(result, Err(AppError::Lock(LockError::Lost { .. }))),
        "{result:?}"
    );
    // Ended by the loss, before its 3 s were up.
    assert!(!finished.load(SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_callers_future_releases_the_lock_at_once() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let other = connect(&server).await;
    let (started, finished) = (AtomicBool::new(false), AtomicBool::new(false));

    let call = long_job(&locks, &started, &finished, Duration::from_secs(30));
    tokio::select! {
        _ = call => panic!("the body should still be running"),
        _ = until(&started) => {}
    }
    // `select!` has dropped `call` by now. Its lock's lease is the watchdog's 30 s: taken
    // within a 200 ms wait, it was released when the call was dropped.
    let guard = other
        .lock("long-job")
        .try_acquire(Duration::from_millis(200))
        .await
        .expect("the dropped call's lock was not released");
    assert!(!finished.load(SeqCst));
    guard.release().await.unwrap();
}

#[distributed_lock(name = "fragile", client = locks)]
async fn fragile(locks: LockClient) -> Result<(), AppError> {
    sleep(Duration::from_millis(20)).await;
    panic!("the body panicked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_body_releases_the_lock() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let other = connect(&server).await;

    let joined = tokio::spawn(fragile(locks)).await;
    assert!(joined.unwrap_err().is_panic());

    let guard = other
        .lock("fragile")
        .try_acquire(Duration::from_millis(200))
        .await
        .expect("the panicked call's lock was not released");
    guard.release().await.unwrap();
}

#[distributed_lock(name = "settle:<id>", client = locks)]
async fn settle(locks: &LockClient, id: u32, fail: bool) -> Result<u32, AppError> {
    assert!(locks.lock(format!("settle:{id}")).is_locked().await?);
    if fail {
        return Err(AppError::Body("settlement failed"));
    }
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_is_free_once_the_call_returns_ok_or_err() {
    let server = RedisServer::start();
    let locks = connect(&server).await;

    assert_eq!(settle(&locks, 1, false).await.unwrap(), 1);
    assert!(!locks.lock("settle:1").is_locked().await.unwrap());

    assert!(matches!(
        settle(&locks, 2, true).await,
        Err(AppError::Body("settlement failed"))
    ));
    assert!(!locks.lock("settle:2").is_locked().await.unwrap());
    assert!(server.keys("lock:{settle:*}").is_empty());
}

struct Customer {
    id: u64,
}

struct Order {
    customer: Customer,
    number: String,
}

struct Orders {
    locks: LockClient,
    tenant: &'static str,
}

impl Orders {
    /// Checks from another client that exactly `expected` is locked while the body runs.
    #[distributed_lock(
        name = "<self.tenant>:order:<order.customer.id>/<order.number>:<pair.1>:<<x>>{y}",
        client = self.locks
    )]
    async fn check_key(
        &self,
        observer: &LockClient,
        order: &Order,
        pair: (u8, u8),
        expected: &str,
    ) -> Result<bool, AppError> {
        let _ = (order, pair);
        Ok(observer.lock(expected).is_locked().await?)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_formats_parameters_fields_and_self() {
    let server = RedisServer::start();
    let observer = connect(&server).await;
    let orders = Orders {
        locks: connect(&server).await,
        tenant: "acme",
    };
    let order = Order {
        customer: Customer { id: 7 },
        number: "A-1".into(),
    };

    let expected = "acme:order:7/A-1:2:<x>{y}";
    assert!(
        orders
            .check_key(&observer, &order, (1, 2), expected)
            .await
            .unwrap()
    );
    assert!(
        !orders
            .check_key(&observer, &order, (1, 3), expected)
            .await
            .unwrap()
    );
}

#[derive(Debug)]
struct RecordedSpan {
    name: String,
    target: String,
    fields: Vec<(String, String)>,
}

/// Records the spans created on this thread.
#[derive(Default)]
struct SpanRecorder {
    spans: Mutex<Vec<RecordedSpan>>,
    next_id: AtomicUsize,
}

struct FieldVisitor<'a>(&'a mut Vec<(String, String)>);

impl tracing::field::Visit for FieldVisitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.0
            .push((field.name().to_string(), format!("{value:?}")));
    }
}

impl tracing::Subscriber for SpanRecorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut fields = Vec::new();
        span.record(&mut FieldVisitor(&mut fields));
        let meta = span.metadata();
        self.spans.lock().unwrap().push(RecordedSpan {
            name: meta.name().to_string(),
            target: meta.target().to_string(),
            fields,
        });
        tracing::span::Id::from_u64(self.next_id.fetch_add(1, SeqCst) as u64 + 1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

// Current-thread runtime: the whole call runs on the thread whose default subscriber is set.
#[tokio::test]
async fn a_tracing_span_names_the_key() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let recorder = Arc::new(SpanRecorder::default());
    let _default = tracing::subscriber::set_default(recorder.clone());

    assert_eq!(
        guarded(locks, 42, Arc::default(), Duration::ZERO)
            .await
            .unwrap(),
        42
    );

    let spans = recorder.spans.lock().unwrap();
    let span = spans
        .iter()
        .find(|span| span.name == "distributed_lock")
        .unwrap_or_else(|| panic!("no distributed_lock span in {spans:?}"));
    assert_eq!(span.target, "behaviour");
    assert!(
        span.fields.contains(&("lock".into(), "counter:42".into())),
        "{span:?}"
    );
    assert!(
        span.fields
            .contains(&("function".into(), "\"guarded\"".into())),
        "{span:?}"
    );
}

/// The body ends by black-holing the connection, so the final release hangs.
#[distributed_lock(name = "stalled-release", client = locks)]
async fn stalls_its_release(locks: &LockClient, proxy: &TcpProxy) -> Result<(), AppError> {
    proxy.set_black_hole(true);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_during_its_final_release_frees_the_lock_within_2s() {
    let server = RedisServer::start();
    let upstream = format!("127.0.0.1:{}", server.port()).parse().unwrap();
    let proxy = TcpProxy::start(upstream).await.unwrap();
    let locks = LockClient::connect(&proxy.url()).await.expect("connect");
    let other = connect(&server).await;

    let call = tokio::time::timeout(
        Duration::from_millis(300),
        stalls_its_release(&locks, &proxy),
    )
    .await;
    assert!(call.is_err(), "the call finished: {call:?}");
    assert_eq!(
        server.cmd(&["EXISTS", "lock:{stalled-release}"]).int(),
        Some(1)
    );
    // The release request is lost with the connection.
    proxy.cut_all();
    proxy.set_black_hole(false);

    let guard = other
        .lock("stalled-release")
        .try_acquire(Duration::from_secs(2))
        .await
        .expect("the cancelled call's lock was not freed within 2 s");
    guard.release().await.unwrap();
}

#[distributed_lock(name = "polled:<n>", client = locks)]
async fn polled(locks: &LockClient, n: String) -> Result<String, AppError> {
    sleep(Duration::from_millis(1)).await;
    Ok(n)
}

/// Cancelled at each of its await points (acquire, body, release), a call leaves nothing held:
/// polled k times (k = 0, 1, …, at most 40) and dropped, three ways: with a ~1 ms sleep
/// between polls (each poll reaches the next await point) until it completes; with only a
/// yield (replies may still be in flight); and, through a proxy, with the connection
/// black-holed after the k polls, polled a few more times (its next request is stuck), dropped,
/// and every connection cut (the stuck request is lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_after_any_number_of_polls_frees_the_lock() {
    let server = RedisServer::start();
    let other = connect(&server).await;
    for drive in ["sleep", "yield", "stall"] {
        let mut completed = false;
        for k in 0..=40 {
            let proxy = if drive == "stall" {
                let upstream = format!("127.0.0.1:{}", server.port()).parse().unwrap();
                Some(TcpProxy::start(upstream).await.unwrap())
            } else {
                None
            };
            let locks = match &proxy {
                Some(proxy) => LockClient::connect(&proxy.url()).await.expect("connect"),
                None => connect(&server).await,
            };
            let name = format!("{k}-{drive}");
            let mut call = Box::pin(polled(&locks, name.clone()));
            let mut poll = async || {
                std::future::poll_fn(|cx| std::task::Poll::Ready(call.as_mut().poll(cx).is_ready()))
                    .await
            };
            let mut done = false;
            for _ in 0..k {
                done = poll().await;
                if done {
                    break;
                }
                tokio::task::yield_now().await;
                if drive != "yield" {
                    sleep(Duration::from_millis(1)).await;
                }
            }
            if let Some(proxy) = proxy.as_ref().filter(|_| !done) {
                proxy.set_black_hole(true);
                for _ in 0..3 {
                    done = poll().await;
                    if done {
                        break;
                    }
                    sleep(Duration::from_millis(3)).await;
                }
            }
            drop(call);
            if let Some(proxy) = &proxy {
                proxy.cut_all();
                proxy.set_black_hole(false);
            }
            let at = format!("dropped after {k} polls ({drive} between them)");
            let guard = other
                .lock(format!("polled:{name}"))
                .try_acquire(Duration::from_secs(2))
                .await
                .unwrap_or_else(|e| {
                    let pttl = server.cmd(&["PTTL", &format!("lock:{{polled:{name}}}")]);
                    panic!("{at}: not freed within 2 s: {e} (PTTL now {pttl:?})")
                });
            guard.release().await.unwrap();
            let idle = async {
                while locks.held_locks() != 0 || locks.subscribed_channels() != 0 {
                    sleep(Duration::from_millis(5)).await;
                }
            };
            tokio::time::timeout(Duration::from_secs(2), idle)
                .await
                .unwrap_or_else(|_| panic!("{at}: the client still holds the lock"));
            if done {
                completed = true;
                break;
            }
        }
        assert!(
            completed || drive == "yield",
            "the call did not complete within 40 polls ({drive} between them)"
        );
    }
}
