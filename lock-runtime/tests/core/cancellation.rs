//! Dropping guards and acquire futures leaves nothing behind.

use crate::common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, LockGuard, LockOptions, MultiLock};
use lock_tests::{RedisServer, TcpProxy};
use rand::Rng;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_storm_leaves_no_hold_subscription_or_watchdog_entry() {
    let redis = RedisServer::start();
    let clients = [
        common::client(&redis).await,
        common::client(&redis).await,
        common::client(&redis).await,
    ];
    let acquired = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..1200usize {
        let acquired = acquired.clone();
        let locks = clients[i % clients.len()].clone();
        tasks.push(tokio::spawn(async move {
            let (cancel_after, hold, key) = {
                let mut rng = rand::rng();
                // Mostly very short windows (cancelled inside the acquire), some long enough to
                // get the lock even on a loaded machine.
                let window = if i % 8 == 0 {
                    20_000..100_000
                } else {
                    0..5_000
                };
                (
                    Duration::from_micros(rng.random_range(window)),
                    Duration::from_micros(rng.random_range(0..500)),
                    format!("storm:{}", rng.random_range(0..4)),
                )
            };
            let lock = locks.lock(&key);
            if i % 2 == 0 {
                // Cancelled by a timeout at a random point of the acquire.
                if let Ok(Ok(g)) = tokio::time::timeout(cancel_after, lock.acquire()).await {
                    acquired.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(hold).await;
                    drop(g);
                }
            } else {
                // Cancelled by losing a select!.
                tokio::select! {
                    g = lock.acquire_with(LockOptions::new().wait(Duration::from_secs(5))) => {
                        if let Ok(g) = g {
                            acquired.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            tokio::time::sleep(hold).await;
                            drop(g);
                        }
                    }
                    _ = tokio::time::sleep(cancel_after) => {}
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Both outcomes happened: some acquired, most were cancelled while waiting.
    let acquired = acquired.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        acquired > 0 && acquired < 1200,
        "{acquired} of 1200 acquired"
    );
    // The clients' own counts follow Redis' confirmations (an unsubscription counts once its
    // reply is read), so they are awaited too.
    let clean = common::eventually(Duration::from_secs(5), || {
        redis.keys("lock:*").iter().all(|k| k.ends_with(":fence"))
            && redis.pubsub_channels("lock:*").is_empty()
            && clients
                .iter()
                .all(|c| c.held_locks() == 0 && c.subscribed_channels() == 0)
    })
    .await;
    assert!(
        clean,
        "left behind: keys {:?}, channels {:?}",
        redis.keys("lock:*"),
        redis.pubsub_channels("lock:*")
    );
    for c in &clients {
        assert_eq!(c.held_locks(), 0);
        assert_eq!(c.subscribed_channels(), 0);
    }
    // And the next acquire succeeds at once.
    for k in 0..4 {
        let _free = clients[0]
            .lock(format!("storm:{k}"))
            .try_acquire(Duration::ZERO)
            .await
            .expect("free after the storm");
    }
}

/// How the future under test is driven before it is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Drive {
    /// A yield and a ~1 ms sleep between polls: the server answers, so each poll moves the
    /// future to its next await point.
    Sleep,
    /// Only a yield between polls: dropped while replies may still be in flight.
    Yield,
    /// Like `Sleep`, then the connection is black-holed (through a [`TcpProxy`]) and the
    /// future polled a few more times, so its next request is stuck; dropped, then every
    /// connection is cut (the stuck request is lost) and the network restored.
    Stall,
}

/// Polls `fut` at most `k` times (`drive` says what happens between polls), then drops it;
/// returns whether it completed.
async fn poll_then_drop<F: Future<Output = ()>>(
    fut: F,
    k: usize,
    drive: Drive,
    proxy: Option<&TcpProxy>,
) -> bool {
    let mut fut = std::pin::pin!(fut);
    let mut poll =
        async || std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx).is_ready())).await;
    for _ in 0..k {
        if poll().await {
            return true;
        }
        tokio::task::yield_now().await;
        if drive != Drive::Yield {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    if let Some(proxy) = proxy {
        proxy.set_black_hole(true);
        for _ in 0..3 {
            if poll().await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }
    false
}

/// One fresh scenario: the future under test and what it must leave intact.
struct Case {
    /// The future to poll `k` times and drop.
    fut: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// The lock names the scenario uses; each must be free afterwards.
    names: Vec<String>,
    /// A guard that outlives the cancelled future (`run`, `scope`): it must still hold its
    /// lock after the cancellation, outside any reentrancy scope; it is released afterwards.
    kept: Option<Arc<LockGuard>>,
    /// A lock a rival client holds during the scenario: the cancellation must not free it.
    rival: Option<LockGuard>,
}

impl Case {
    /// A future on one lock name, with no guard kept and no rival.
    fn plain(fut: impl Future<Output = ()> + Send + 'static, name: String) -> Case {
        Case {
            fut: Box::pin(fut),
            names: vec![name],
            kept: None,
            rival: None,
        }
    }
}

/// For k = 0, 1, 2, … (at most 40) builds the scenario afresh on a new client, polls its future
/// k times, drops it, and checks that nothing is left behind: within ~2 s no lock hash in Redis,
/// no hold or subscription in the client, no channel on the server, and another client gets
/// every lock at once. Stops once the future completes within its k polls (which it must, with
/// a sleep between polls). Three passes, one per [`Drive`]: with the server answering, with
/// replies in flight, and with the connection stalled at the k-th await point and then cut.
/// Returns after how many polls the future completed in the first pass.
async fn cancel_at_every_poll<B, F>(redis: &RedisServer, what: &str, mut build: B) -> usize
where
    B: FnMut(LockClient, String) -> F,
    F: Future<Output = Case>,
{
    let completed = sweep(redis, what, &mut build, Drive::Sleep).await;
    let polls = completed.unwrap_or_else(|| panic!("{what} did not complete"));
    sweep(redis, &format!("{what}-yield"), &mut build, Drive::Yield).await;
    let completed = sweep(redis, &format!("{what}-stall"), &mut build, Drive::Stall).await;
    assert!(completed.is_some(), "{what} did not complete (stall pass)");
    polls
}

/// Retries `op` while it fails with an "unavailable" error (a client reconnecting after its
/// connections were cut), for at most 2 s.
async fn once_reconnected<T, F>(mut op: impl FnMut() -> F) -> Result<T, LockError>
where
    F: Future<Output = Result<T, LockError>>,
{
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match op().await {
            Err(e) if e.is_unavailable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => return other,
        }
    }
}

/// One pass of [`cancel_at_every_poll`]; returns after how many polls the future completed.
async fn sweep<B, F>(redis: &RedisServer, what: &str, build: &mut B, drive: Drive) -> Option<usize>
where
    B: FnMut(LockClient, String) -> F,
    F: Future<Output = Case>,
{
    const MAX_POLLS: usize = 40;
    const LIMIT: Duration = Duration::from_secs(2);
    let other = common::client(redis).await;
    for k in 0..=MAX_POLLS {
        // The client under test goes through a proxy when its connection is to be stalled;
        // `other` and the checks talk to the server directly.
        let proxy = match drive {
            Drive::Stall => {
                let upstream = format!("127.0.0.1:{}", redis.port()).parse().unwrap();
                Some(TcpProxy::start(upstream).await.unwrap())
            }
            Drive::Sleep | Drive::Yield => None,
        };
        let locks = match &proxy {
            Some(proxy) => LockClient::connect(&proxy.url()).await.expect("connect"),
            None => common::client(redis).await,
        };
        let case = build(locks.clone(), format!("{what}-{k}")).await;
        let done = poll_then_drop(case.fut, k, drive, proxy.as_ref()).await;
        if let Some(proxy) = &proxy {
            // The stuck requests are lost with their connections.
            proxy.cut_all();
            proxy.set_black_hole(false);
        }
        let at = format!("{what} dropped after {k} polls (completed: {done})");
        if let Some(rival) = case.rival {
            assert_eq!(
                redis.cmd(&["EXISTS", rival.key()]).int(),
                Some(1),
                "{at}: the rival's lock was freed"
            );
            rival
                .release()
                .await
                .expect("the rival still holds its lock");
        }
        let kept_key = case.kept.as_ref().map(|kept| kept.key().to_string());
        if let Some(kept) = &case.kept {
            assert!(!kept.is_lost(), "{at}: the kept guard was lost");
            assert_eq!(
                redis.cmd(&["EXISTS", kept.key()]).int(),
                Some(1),
                "{at}: the kept guard's lock is gone"
            );
        }
        // Everything but the kept guard's lock is let go, by the future or the releaser.
        let no_hash = || {
            redis
                .keys("lock:*")
                .iter()
                .all(|key| key.ends_with(":fence") || Some(key) == kept_key.as_ref())
                && redis.pubsub_channels("lock:*").is_empty()
        };
        assert!(
            common::eventually(LIMIT, no_hash).await,
            "{at}: left behind in Redis: locks (with their PTTL in ms) {:?}, channels {:?}",
            redis
                .keys("lock:*")
                .into_iter()
                .filter(|key| !key.ends_with(":fence"))
                .map(|key| {
                    let pttl = redis.cmd(&["PTTL", &key]).int();
                    (key, pttl)
                })
                .collect::<Vec<_>>(),
            redis.pubsub_channels("lock:*")
        );
        let kept_holds = usize::from(case.kept.is_some());
        let idle = || locks.held_locks() == kept_holds && locks.subscribed_channels() == 0;
        assert!(
            common::eventually(LIMIT, idle).await,
            "{at}: the client still has {} holds (expected {kept_holds}) and {} subscriptions",
            locks.held_locks(),
            locks.subscribed_channels()
        );
        for name in &case.names {
            if case.kept.as_ref().is_some_and(|kept| kept.name() == name) {
                continue;
            }
            let guard = other
                .lock(name)
                .try_acquire(Duration::ZERO)
                .await
                .unwrap_or_else(|e| panic!("{at}: {name} is not free: {e}"));
            guard.release().await.unwrap();
        }
        if let Some(kept) = case.kept {
            // The scope was left with the future: the same lock is a new owner here, and busy.
            let same = locks.lock(kept.name());
            let outside = once_reconnected(|| same.try_acquire(Duration::ZERO)).await;
            assert!(
                outside.as_ref().is_err_and(LockError::is_busy),
                "{at}: re-entered outside the dropped scope: {outside:?}"
            );
            let kept = Arc::into_inner(kept).expect("the dropped future kept a guard clone");
            let name = kept.name().to_string();
            kept.release().await.expect("release the kept guard");
            let guard = other
                .lock(&name)
                .try_acquire(Duration::ZERO)
                .await
                .unwrap_or_else(|e| panic!("{at}: {name} is not free after its release: {e}"));
            guard.release().await.unwrap();
            assert_eq!(
                locks.held_locks(),
                0,
                "{at}: holds left after the kept release"
            );
        }
        if done {
            eprintln!("{what}: completed within {k} polls");
            return Some(k);
        }
    }
    None
}

/// A body with await points of its own: it re-enters `name` and takes another lock. It drops
/// its guards rather than awaiting `release()`, so that the `run`/`scope` sweeps test `run` and
/// `scope` (the release sweeps test `release()`).
async fn body(locks: LockClient, name: String) {
    let again = locks.lock(&name).acquire().await.expect("re-enter");
    assert!(again.is_reentrant());
    let inner = locks
        .lock(format!("{name}-inner"))
        .acquire()
        .await
        .expect("inner lock");
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(!again.is_lost() && !inner.is_lost());
    drop(inner);
    tokio::task::yield_now().await;
    drop(again);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_cancelled_at_any_poll_leaves_nothing_behind() {
    let redis = RedisServer::start();
    cancel_at_every_poll(&redis, "release", |locks, name| async move {
        let guard = locks.lock(&name).acquire().await.unwrap();
        Case {
            fut: Box::pin(async move { guard.release().await.unwrap() }),
            names: vec![name],
            kept: None,
            rival: None,
        }
    })
    .await;
}

/// A release that hands the lock to a waiting task of the same client (local hand-off),
/// dropped at every await point: the waiter still gets the lock (or it is freed), and nothing
/// is left behind once the waiter lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_cancelled_at_any_poll_leaves_nothing_behind() {
    let redis = RedisServer::start();
    let polls = cancel_at_every_poll(&redis, "handoff", |locks, name| async move {
        let guard = locks.lock(&name).acquire().await.unwrap();
        tokio::spawn({
            let locks = locks.clone();
            let name = name.clone();
            async move {
                // Fenced: its token is issued by Redis in the hand-off's own step, so the
                // release hands the lock over through Redis (`release_to`), not in memory.
                // Errors are expected when the sweep cuts the connection.
                let taken = locks
                    .lock(&name)
                    .fenced()
                    .acquire_with(LockOptions::new().wait(Duration::from_secs(10)))
                    .await;
                drop(taken);
            }
        });
        // Queued for the hand-off before the release starts.
        assert!(
            common::eventually(Duration::from_secs(2), || locks.subscribed_channels() == 1).await
        );
        Case {
            fut: Box::pin(async move { guard.release().await.unwrap() }),
            names: vec![name],
            kept: None,
            rival: None,
        }
    })
    .await;
    // The sweep cut a hand-off in flight to Redis, not an in-memory pass (which needs no
    // round trip, so no await point to cut): the release that completed handed the lock over
    // with a token Redis issued, which wrote the name's fencing counter (no other grant of the
    // scenario writes it: the holder and the checks take the lock without a token). The
    // number of polls cannot tell: on a loaded machine a round trip can end within one poll
    // (the connection's task, on the other worker thread, answers before the poll returns).
    assert_eq!(
        redis
            .cmd(&["EXISTS", &format!("lock:{{handoff-{polls}}}:fence")])
            .int(),
        Some(1),
        "the hand-off that completed (after {polls} polls) issued no token in Redis: it went in memory"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cancelled_at_any_poll_leaves_nothing_behind() {
    let redis = RedisServer::start();
    cancel_at_every_poll(&redis, "run", |locks, name| async move {
        let guard = Arc::new(locks.lock(&name).acquire().await.unwrap());
        let fut = {
            let guard = guard.clone();
            let body = body(locks, name.clone());
            async move { guard.run(body).await.expect("not lost") }
        };
        Case {
            fut: Box::pin(fut),
            names: vec![name.clone(), format!("{name}-inner")],
            kept: Some(guard),
            rival: None,
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_cancelled_at_any_poll_leaves_nothing_behind() {
    let redis = RedisServer::start();
    cancel_at_every_poll(&redis, "scope", |locks, name| async move {
        let guard = Arc::new(locks.lock(&name).acquire().await.unwrap());
        let fut = {
            let guard = guard.clone();
            let body = body(locks, name.clone());
            async move { guard.scope(body).await }
        };
        Case {
            fut: Box::pin(fut),
            names: vec![name.clone(), format!("{name}-inner")],
            kept: Some(guard),
            rival: None,
        }
    })
    .await;
}

/// Takes `first`, then waits for `second` (another owner of the same lock) while `first` is
/// released: the fast path, the wait (with its place in Redis for a fair lock or a writer) and
/// the wake-up, in one future.
async fn hand_over<A, B, FA, FB>(first: A, second: B)
where
    A: FnOnce() -> FA,
    B: FnOnce() -> FB,
    FA: Future<Output = Result<LockGuard, LockError>>,
    FB: Future<Output = Result<LockGuard, LockError>>,
{
    let held = first().await.expect("first");
    let release = async {
        tokio::time::sleep(Duration::from_millis(2)).await;
        held.release().await.expect("release first");
    };
    let ((), taken) = tokio::join!(release, second());
    taken
        .expect("second")
        .release()
        .await
        .expect("release second");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_hand_over_cancelled_at_any_poll_leaves_no_hold_place_or_subscription() {
    let redis = RedisServer::start();
    cancel_at_every_poll(&redis, "fair", |locks, name| async move {
        let lock = locks.fair_lock(&name);
        let fut = async move { hand_over(|| lock.acquire(), || lock.acquire()).await };
        Case::plain(fut, name)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_hand_over_cancelled_at_any_poll_leaves_no_hold_claim_or_subscription() {
    let redis = RedisServer::start();
    cancel_at_every_poll(&redis, "rw", |locks, name| async move {
        let rw = locks.rw_lock(&name);
        let fut = async move {
            // A reader holds; a writer waits (with its claim in Redis), then takes it.
            hand_over(|| rw.read().acquire(), || rw.write().acquire()).await
        };
        Case::plain(fut, name)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_hand_over_cancelled_at_any_poll_leaves_no_permit_or_subscription() {
    let redis = RedisServer::start();
    cancel_at_every_poll(&redis, "semaphore", |locks, name| async move {
        let sem = locks.semaphore(&name, 2);
        let fut = async move {
            hand_over(
                || sem.acquire_many(2, LockOptions::new()),
                || sem.acquire_many(1, LockOptions::new()),
            )
            .await
        };
        Case::plain(fut, name)
    })
    .await;
}

/// The names of a three-lock MultiLock.
fn three(name: &str) -> Vec<String> {
    (1..=3).map(|i| format!("{name}-{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multilock_acquire_and_release_cancelled_at_any_poll_leave_nothing_behind() {
    let redis = RedisServer::start();
    cancel_at_every_poll(&redis, "multi", |locks, name| async move {
        let names = three(&name);
        let multi = MultiLock::new(names.iter().map(|n| locks.lock(n))).unwrap();
        let fut = async move {
            let guard = multi.acquire().await.unwrap();
            guard.release().await.unwrap();
        };
        Case {
            fut: Box::pin(fut),
            names,
            kept: None,
            rival: None,
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multilock_release_cancelled_at_any_poll_leaves_nothing_behind() {
    let redis = RedisServer::start();
    cancel_at_every_poll(&redis, "multi-release", |locks, name| async move {
        let names = three(&name);
        let multi = MultiLock::new(names.iter().map(|n| locks.lock(n))).unwrap();
        let guard = multi.acquire().await.unwrap();
        Case {
            fut: Box::pin(async move { guard.release().await.unwrap() }),
            names,
            kept: None,
            rival: None,
        }
    })
    .await;
}

/// A MultiLock whose last lock is busy: it takes the others, waits, gives up and releases what
/// it took; cancelled anywhere on that path it must free its own locks and not the rival's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_multilock_acquire_cancelled_at_any_poll_frees_its_locks_only() {
    let redis = RedisServer::start();
    let rivals = common::client(&redis).await;
    cancel_at_every_poll(&redis, "multi-busy", |locks, name| {
        let rivals = rivals.clone();
        async move {
            let names = three(&name);
            let multi = MultiLock::new(names.iter().map(|n| locks.lock(n))).unwrap();
            // Whichever lock is taken last is the busy one.
            let last = multi.locks().last().unwrap().name().to_string();
            let rival = rivals.lock(&last).acquire().await.unwrap();
            let fut = async move {
                let outcome = multi.try_acquire(Duration::from_millis(5)).await;
                assert!(outcome.is_err_and(|e| e.is_busy()));
            };
            Case {
                fut: Box::pin(fut),
                names,
                kept: None,
                rival: Some(rival),
            }
        }
    })
    .await;
}

/// Review finding M2: a `release()` cancelled while its request is stuck (black-holed
/// connection, then cut) must leave the lock to the background releaser, not hold it for the
/// rest of its 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_cancelled_behind_a_stalled_connection_frees_the_lock_within_2s() {
    let redis = RedisServer::start();
    let upstream = format!("127.0.0.1:{}", redis.port()).parse().unwrap();
    let proxy = TcpProxy::start(upstream).await.unwrap();
    let locks = LockClient::connect(&proxy.url()).await.unwrap();
    let other = common::client(&redis).await;
    let guard = locks.lock("rel").acquire().await.unwrap();
    let key = guard.key().to_string();
    // A re-entrant guard that outlives its outermost guard's release must be told.
    let inner = guard.scope(locks.lock("rel").acquire()).await.unwrap();
    assert!(inner.is_reentrant());

    proxy.set_black_hole(true);
    let cancelled = tokio::time::timeout(Duration::from_millis(100), guard.release()).await;
    assert!(
        cancelled.is_err(),
        "the release went through: {cancelled:?}"
    );
    // The request is lost with the connection.
    proxy.cut_all();
    proxy.set_black_hole(false);

    let start = Instant::now();
    let freed = common::eventually(Duration::from_secs(2), || {
        redis.cmd(&["EXISTS", &key]).int() == Some(0)
    })
    .await;
    assert!(
        freed,
        "the lock is still held {:?} after the cancelled release (PTTL {:?} ms)",
        start.elapsed(),
        redis.cmd(&["PTTL", &key]).int()
    );
    assert!(
        inner.is_lost(),
        "the re-entrant guard is not told the lock was let go"
    );
    let taken = other.lock("rel").try_acquire(Duration::ZERO).await;
    assert!(taken.is_ok(), "another client cannot take it: {taken:?}");
    assert!(common::eventually(Duration::from_secs(2), || locks.held_locks() == 0).await);
}
