//! Local hand-off: a release grants the lock straight to a waiting task of the same client, in
//! one round trip, fairly, without starving other processes, and without leaking a grant when
//! the waiter is gone.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lock_runtime::{LockClient, LockError, LockOptions, LossReason};
use lock_tests::{RedisServer, TcpProxy};

fn wait(d: Duration) -> LockOptions {
    LockOptions::new().wait(d)
}

/// Subscribes to the lock's unlock channel with a plain connection, to see what is published.
async fn listen(redis: &RedisServer, channel: &str) -> redis::aio::PubSub {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe(channel).await.unwrap();
    pubsub
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_a_waiting_task_without_letting_it_fall_free() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let first = locks.lock("h").acquire().await.unwrap();
    let mut unlocks = listen(&redis, "lock:{h}:unlock").await;
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            let guard = locks
                .lock("h")
                .acquire_with(wait(Duration::from_secs(10)))
                .await
                .unwrap();
            let owner = guard.owner().to_owned();
            let token = guard.fencing_token().await.unwrap();
            (guard, owner, token)
        }
    });
    assert!(
        common::eventually(Duration::from_secs(2), || redis
            .pubsub_channels("lock:*")
            .iter()
            .any(|c| c == "lock:{h}:unlock"))
        .await
    );
    // Give the waiter time to queue after its first attempt.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let first_token = first.fencing_token().await.unwrap();
    first.release().await.unwrap();
    let (guard, owner, token) = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("handed over at once")
        .unwrap();
    assert!(token > first_token, "{token} > {first_token}");
    // Redis holds it for the waiter's owner id, with the waiter's lease.
    assert_eq!(redis.mutex_holder("lock:{h}"), Some(owner.clone()));
    let pttl = redis.cmd(&["PTTL", "lock:{h}"]).int().unwrap();
    assert!(pttl > 25_000, "the waiter's own 30 s lease: {pttl}");
    let stats = locks.stats();
    assert_eq!(stats.handoffs, 1, "{stats:?}");
    assert_eq!(stats.acquisitions, 2, "{stats:?}");
    // The lock never fell free: nothing was published for the hand-over.
    let mut messages = unlocks.on_message();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), messages.next())
            .await
            .is_err(),
        "no unlock message for a hand-over"
    );
    // With nobody waiting, the release lets it fall free and publishes.
    guard.release().await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(2), messages.next())
            .await
            .is_ok()
    );
    assert_eq!(redis.cmd(&["EXISTS", "lock:{h}"]).int(), Some(0));
    drop(messages);
    drop(unlocks);
    common::assert_unsubscribed(&redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_hands_over_through_the_background_releaser() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let first = locks.lock("d").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .lock("d")
                .acquire_with(wait(Duration::from_secs(10)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(first);
    let guard = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("handed over at once")
        .unwrap()
        .unwrap();
    assert_eq!(locks.stats().handoffs, 1);
    assert!(!guard.is_lost());
}

/// Tasks of one client are served in the order they queued, and each hand-over is a real
/// owner change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_are_served_first_come_first_served() {
    let redis = RedisServer::start();
    let locks = lock_tests::client_with(&redis, |b| b.handoff_limit(100)).await;
    let first = locks.lock("fifo").acquire().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let locks = locks.clone();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let guard = locks
                .lock("fifo")
                .acquire_with(wait(Duration::from_secs(10)))
                .await
                .unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            guard.release().await.unwrap();
        }));
        // Queue one after the other.
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    first.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    assert_eq!(locks.stats().handoffs, 5);
}

/// Four tasks of `client` taking lock `name` in a loop, holding it `hold` each time, until
/// `stop`; `rounds` counts their acquisitions.
fn keep_busy(
    client: &LockClient,
    name: &'static str,
    hold: Duration,
    stop: &Arc<AtomicBool>,
    rounds: &Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..4)
        .map(|_| {
            let (client, stop, rounds) = (client.clone(), stop.clone(), rounds.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let guard = client
                        .lock(name)
                        .acquire_with(
                            LockOptions::new()
                                .lease(Duration::from_secs(10))
                                .wait(Duration::from_secs(10)),
                        )
                        .await
                        .unwrap();
                    rounds.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(hold).await;
                    guard.release().await.unwrap();
                }
            })
        })
        .collect()
}

/// How long `client` (another process than the busy one) waits for lock `name`, ten times,
/// holding it only to release it, then pausing `pause` before the next.
async fn waits_of(client: &LockClient, name: &str, pause: Duration) -> Vec<Duration> {
    let mut waits = Vec::new();
    for _ in 0..10 {
        let start = Instant::now();
        let guard = client
            .lock(name)
            .acquire_with(wait(Duration::from_secs(5)))
            .await
            .expect("another process gets its turn");
        waits.push(start.elapsed());
        guard.release().await.unwrap();
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
    waits
}

/// The cohorting bound: a client whose tasks keep a lock busy passes it on locally at most
/// `limit` times in a row while another process waits; then it falls free and is kept from the
/// busy client for a moment, so the other process gets its turn (here within a second each
/// time, ten times, although the lock is never idle and its lease is 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_client_lets_other_processes_in_after_its_hand_off_limit() {
    let redis = RedisServer::start();
    let busy = lock_tests::client_with(&redis, |b| b.handoff_limit(4)).await;
    let other = common::client(&redis).await;
    let (stop, rounds) = (Arc::default(), Arc::default());
    let hammer = keep_busy(&busy, "hot", Duration::from_millis(1), &stop, &rounds);
    assert!(
        common::eventually(Duration::from_secs(5), || rounds.load(Ordering::Relaxed)
            > 50)
        .await
    );
    let waits = waits_of(&other, "hot", Duration::ZERO).await;
    stop.store(true, Ordering::Relaxed);
    eprintln!("another process waited {waits:?}");
    for h in hammer {
        h.await.unwrap();
    }
    let stats = busy.stats();
    assert!(stats.handoffs > 0, "{stats:?}");
    assert!(
        waits.iter().all(|w| *w < Duration::from_secs(1)),
        "{waits:?}"
    );
}

/// A client passing a semaphore's permits among its tasks in memory ends its turn at the
/// hand-off limit when another process waits, and the permit it then frees is kept from its own
/// tasks until the waiting client had it: even for a waiting client that hears the release and
/// asks later than the passing client's own waiters (its connection 1 ms slower each way
/// here), which would lose every race for the freed permit without the turn mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_turn_ends_for_a_slower_client_that_waits() {
    /// The hand-off limit: a turn is at most this many passes in a row.
    const LIMIT: u64 = 8;
    /// The passing client's turns the other client may sit through: one, more where a loaded
    /// machine delays its request past the mark's lapse (5 ms).
    const TURNS: u64 = 10;
    let redis = RedisServer::start();
    let upstream = format!("127.0.0.1:{}", redis.port()).parse().unwrap();
    let proxy = TcpProxy::start(upstream).await.unwrap();
    let hot = lock_tests::client_with(&redis, |b| b.handoff_limit(LIMIT as u32)).await;
    let slow = LockClient::connect(&proxy.url()).await.unwrap();
    proxy.set_latency(Duration::from_millis(1));
    let taken = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let sem = hot.semaphore("slow-turns", 1);
        let (taken, stop) = (taken.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            // Bounded in count as well as by the flag: about a second of passes.
            for _ in 0..20_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let permit = sem
                    .acquire_with(wait(Duration::from_secs(10)))
                    .await
                    .unwrap();
                taken.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
                permit.release().await.unwrap();
            }
        }));
    }
    assert!(
        common::eventually(Duration::from_secs(5), || hot.stats().handoffs > 4 * LIMIT).await,
        "the busy client's permits never passed in memory"
    );
    // Rounds in which the slower client waited, and the busy client's acquisitions meanwhile.
    let mut waited = Vec::new();
    for _ in 0..20 {
        if waited.len() == 5 {
            break;
        }
        let waiter = tokio::spawn({
            let sem = slow.semaphore("slow-turns", 1);
            async move { sem.acquire_with(wait(Duration::from_secs(20))).await }
        });
        // Counted from when the slower client waits (subscribed); a first attempt that finds
        // the permit free between two turns is no wait.
        assert!(
            common::eventually(Duration::from_secs(5), || slow.subscribed_channels() == 1
                || waiter.is_finished())
            .await
        );
        let asked = taken.load(Ordering::Relaxed);
        let did_wait = !waiter.is_finished();
        let permit = waiter.await.unwrap().expect("the slower client had a turn");
        if did_wait {
            waited.push(taken.load(Ordering::Relaxed) - asked);
        }
        permit.release().await.unwrap();
        // Until nothing is left subscribed: the next round's wait starts afresh.
        assert!(
            common::eventually(Duration::from_secs(5), || slow.subscribed_channels() == 0).await
        );
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    eprintln!("the busy client's acquisitions while the slower one waited: {waited:?}");
    assert!(
        waited.len() >= 3,
        "the slower client waited only {} times",
        waited.len()
    );
    assert!(
        waited.iter().all(|&during| during <= TURNS * (LIMIT + 1)),
        "{waited:?}: acquisitions of the busy client while the slower one waited"
    );
}

/// A turn is bounded in time too: with critical sections of 3 ms, a client whose tasks keep a
/// lock busy lets another process in after a few milliseconds of its turn, long before its
/// hand-off limit would end it. The limit here is a million hand-overs (about 50 minutes of
/// 3 ms sections): only the turn's time can let the other process in within its 5 s wait,
/// ten times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_ends_after_its_time_with_long_critical_sections() {
    let redis = RedisServer::start();
    let busy = lock_tests::client_with(&redis, |b| b.handoff_limit(1_000_000)).await;
    let other = common::client(&redis).await;
    let (stop, rounds) = (Arc::default(), Arc::default());
    let hammer = keep_busy(&busy, "long", Duration::from_millis(3), &stop, &rounds);
    assert!(
        common::eventually(Duration::from_secs(5), || rounds.load(Ordering::Relaxed)
            > 20)
        .await
    );
    // Back among the waiters only after the busy client had a turn again.
    let handoffs = busy.stats().handoffs;
    let mut waits = waits_of(&other, "long", Duration::from_millis(20)).await;
    stop.store(true, Ordering::Relaxed);
    for h in hammer {
        h.await.unwrap();
    }
    // The busy client kept handing the lock on meanwhile: a turn did not end for lack of
    // local waiters.
    assert!(busy.stats().handoffs > handoffs);
    waits.sort();
    // A turn of 2 ms ends at the first release after it: a 3 ms section, plus the one in
    // progress when the other process asked (the figures are for reading, not judged).
    eprintln!("another process waited {waits:?}");
}

/// Clients hammering one lock as several processes would (each client has its own connections
/// and subscription): each with its number of tasks, in a loop with an empty critical section,
/// until `total` acquisitions or `run` passed. Returns which client held the lock, in holding
/// order.
async fn hammer(clients: &[(&LockClient, usize)], total: usize, run: Duration) -> Vec<usize> {
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let until = Instant::now() + run;
    let mut handles = Vec::new();
    for (c, &(client, tasks)) in clients.iter().enumerate() {
        for _ in 0..tasks {
            let (client, order) = (client.clone(), order.clone());
            handles.push(tokio::spawn(async move {
                while Instant::now() < until && order.lock().unwrap().len() < total {
                    let guard = client
                        .lock("turns")
                        .acquire_with(wait(Duration::from_secs(10)))
                        .await
                        .unwrap();
                    // Inside the critical section: the pushes are in holding order.
                    order.lock().unwrap().push(c);
                    guard.release().await.unwrap();
                }
            }));
        }
    }
    for h in handles {
        h.await.unwrap();
    }
    Arc::try_unwrap(order).unwrap().into_inner().unwrap()
}

/// The turns in a holding order: (client, acquisitions in a row).
fn turns(order: &[usize]) -> Vec<(usize, usize)> {
    let mut turns: Vec<(usize, usize)> = Vec::new();
    for &c in order {
        match turns.last_mut() {
            Some((last, n)) if *last == c => *n += 1,
            _ => turns.push((c, 1)),
        }
    }
    turns
}

/// Clients of several processes that all wait for a busy lock take turns in a fixed cycle: after
/// a client's turn (its hand-off limit), the client whose last turn is longest ago goes next,
/// whatever order Redis delivers the unlock message in, so no process is served twice while
/// another waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_clients_of_several_processes_take_turns_in_order() {
    let redis = RedisServer::start();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(lock_tests::client_with(&redis, |b| b.handoff_limit(2)).await);
    }
    let each: Vec<_> = clients.iter().map(|c| (c, 3)).collect();
    let order = hammer(&each, 3_000, Duration::from_secs(3)).await;
    let turns = turns(&order);
    // The middle of the run, when every client has tasks waiting (its start and end are ragged).
    let middle = &turns[turns.len() / 10..turns.len() * 9 / 10];
    // Out of order: a client holding again while one of the others waited since before its
    // last turn, i.e. one of the two turns before it was its own.
    let out_of_order = middle
        .windows(3)
        .filter(|w| w[2].0 == w[0].0 || w[2].0 == w[1].0)
        .count();
    let mut per_client = [0usize; 3];
    for &c in &order {
        per_client[c] += 1;
    }
    eprintln!(
        "{} acquisitions, {} turns, {out_of_order} out of order, per client {per_client:?}",
        order.len(),
        turns.len()
    );
    assert!(middle.len() >= 30, "{turns:?}");
    assert!(
        out_of_order * 10 <= middle.len(),
        "turns out of order: {out_of_order} of {}",
        middle.len()
    );
    // Turns, not acquisitions, are what the cycle shares out: on a loaded machine a client's
    // turn can end below the limit (its next task not ready yet), so its acquisitions lag
    // while its turns keep their place.
    let mut turns_per_client = [0usize; 3];
    for &(c, _) in middle {
        turns_per_client[c] += 1;
    }
    let (min, max) = (
        turns_per_client.iter().min().unwrap(),
        turns_per_client.iter().max().unwrap(),
    );
    assert!(
        min * 10 >= max * 8,
        "turns per client {turns_per_client:?} (acquisitions {per_client:?})"
    );
}

/// A client that takes the lock again and again on its own (no local waiters, so it never
/// hands on, and never yields) does not keep a client that ended its turn waiting: a new turn
/// ends the one before it, so the two alternate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_retaking_the_lock_alone_takes_turns_with_a_client_that_yielded() {
    let redis = RedisServer::start();
    let busy = lock_tests::client_with(&redis, |b| b.handoff_limit(2)).await;
    let alone = common::client(&redis).await;
    let order = hammer(&[(&busy, 4), (&alone, 1)], 2_000, Duration::from_secs(2)).await;
    let turns = turns(&order);
    let busy_turns = turns.iter().filter(|t| t.0 == 0).count();
    let alone_turns = turns.len() - busy_turns;
    eprintln!(
        "{} acquisitions: {busy_turns} turns of the busy client, {alone_turns} of the other",
        order.len()
    );
    assert!(alone_turns >= 10, "{turns:?}");
    // Alternating: the busy client gets (about) one turn per turn of the other.
    assert!(busy_turns * 10 >= alone_turns * 8, "{turns:?}");
}

/// Turns are for clients that wait: once the others stopped waiting, a client whose turn
/// just ended takes the free lock at once (no waiting for the turn mark to lapse).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_nobody_else_waits_a_client_whose_turn_ended_takes_the_lock_at_once() {
    let redis = RedisServer::start();
    let a = lock_tests::client_with(&redis, |b| b.handoff_limit(1)).await;
    let b = lock_tests::client_with(&redis, |b| b.handoff_limit(1)).await;
    for round in 0..20 {
        let order = hammer(&[(&a, 3), (&b, 3)], 60, Duration::from_secs(5)).await;
        assert!(turns(&order).len() > 2, "{order:?}");
        // Nobody waits once both clients unsubscribed (a client counts its unsubscription when
        // Redis confirmed it), which takes well under the mark's 5 ms: ask right then.
        let unsubscribed = Instant::now() + Duration::from_secs(2);
        while a.subscribed_channels() + b.subscribed_channels() > 0 {
            assert!(
                Instant::now() < unsubscribed,
                "round {round}: still subscribed"
            );
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        for client in [&a, &b] {
            let guard = client
                .lock("turns")
                .try_acquire(Duration::ZERO)
                .await
                .unwrap_or_else(|e| panic!("round {round}: {e:?}"));
            guard.release().await.unwrap();
        }
    }
}

/// With nobody else waiting, the limit costs nothing: the hand-offs go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nobody_else_waiting_hand_offs_go_on_past_the_limit() {
    let redis = RedisServer::start();
    let locks = lock_tests::client_with(&redis, |b| b.handoff_limit(2)).await;
    let first = locks.lock("alone").acquire().await.unwrap();
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let locks = locks.clone();
            tokio::spawn(async move {
                let guard = locks
                    .lock("alone")
                    .acquire_with(wait(Duration::from_secs(10)))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
                guard.release().await.unwrap();
            })
        })
        .collect();
    assert!(common::eventually(Duration::from_secs(2), || locks.subscribed_channels() == 1).await);
    tokio::time::sleep(Duration::from_millis(50)).await;
    first.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(locks.stats().handoffs, 10, "{:?}", locks.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_of_zero_turns_hand_off_off() {
    let redis = RedisServer::start();
    let locks = lock_tests::client_with(&redis, |b| b.handoff_limit(0)).await;
    let first = locks.lock("off").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .lock("off")
                .acquire_with(wait(Duration::from_secs(10)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.release().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    assert_eq!(locks.stats().handoffs, 0);
    guard.release().await.unwrap();
}

/// A waiter that gives up while the release handing it the lock is in flight: the grant
/// that arrives for nobody is released in the background at once, not held for its 30 s
/// lease. (The waiter is fenced: its hand-off goes through Redis, which issues its token.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_to_a_waiter_that_left_meanwhile_is_released_at_once() {
    let redis = RedisServer::start();
    let upstream = format!("127.0.0.1:{}", redis.port()).parse().unwrap();
    let proxy = TcpProxy::start(upstream).await.unwrap();
    let locks = LockClient::connect(&proxy.url()).await.unwrap();
    let other = common::client(&redis).await;
    let first = locks.lock("gone").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .lock("gone")
                .fenced()
                .acquire_with(wait(Duration::from_secs(30)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Every request and reply through the proxy now takes 300 ms each way.
    proxy.set_latency(Duration::from_millis(300));
    let release = tokio::spawn(async move { first.release().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    let start = Instant::now();
    let guard = other
        .lock("gone")
        .acquire_with(wait(Duration::from_secs(10)))
        .await
        .unwrap();
    let waited = start.elapsed();
    release.await.unwrap().unwrap();
    assert!(
        waited < Duration::from_secs(5),
        "released in the background, not after the lease: {waited:?}"
    );
    // Counted once its reply is back through the slow proxy.
    assert!(
        common::eventually(Duration::from_secs(3), || locks.stats().background_releases
            >= 1)
        .await
    );
    guard.release().await.unwrap();
}

/// The hand-off's grant keeps the fencing promise: tokens increase across a wiped counter, and
/// foreign data at the counter is reported to the waiter, with nothing changed (its TTL
/// included) and the lock let go. (The
/// waiters are fenced: their hand-offs go through Redis, which issues their tokens.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_off_grants_keep_fencing_and_respect_foreign_data() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let spawn_waiter = |name: &'static str| {
        let locks = locks.clone();
        tokio::spawn(async move {
            locks
                .lock(name)
                .fenced()
                .acquire_with(wait(Duration::from_secs(10)))
                .await
        })
    };

    let first = locks.lock("wiped").acquire().await.unwrap();
    let waiter = spawn_waiter("wiped");
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The token is issued before the wipe: the hand-off's token must still be larger, though
    // the counter that issued it is gone.
    let t1 = first.fencing_token().await.unwrap();
    redis.cmd(&["DEL", "lock:{wiped}:fence"]);
    first.release().await.unwrap();
    let second = waiter.await.unwrap().unwrap();
    assert!(second.fencing_token().await.unwrap() > t1);
    assert_eq!(locks.stats().handoffs, 1);

    let first = locks.lock("foreign").acquire().await.unwrap();
    let waiter = spawn_waiter("foreign");
    tokio::time::sleep(Duration::from_millis(100)).await;
    redis.cmd(&[
        "SET",
        "lock:{foreign}:fence",
        "not a counter",
        "PX",
        "90000",
    ]);
    first.release().await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("told at once")
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, LockError::ForeignData { .. }), "{err:?}");
    assert_eq!(
        redis.cmd(&["GET", "lock:{foreign}:fence"]).text(),
        Some("not a counter")
    );
    // Its own TTL too (the grant writes the counter and reads it in one command, then puts
    // back what is not ours).
    let ttl = redis.cmd(&["PTTL", "lock:{foreign}:fence"]).int().unwrap();
    assert!((1..=90_000).contains(&ttl), "{ttl}");
    assert_eq!(redis.cmd(&["EXISTS", "lock:{foreign}"]).int(), Some(0));
    drop(second);
}

/// A token asked for by a side task of a hold (through a `TokenHandle`) while the hold passes
/// in memory to the next task: Redis issues it to the same owner id, which is the next
/// holder's by then, so the side task is told `Lost`, never handed a token of the next
/// holder's hold (SAFETY.md, promise 2: only to the holder, while it holds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_in_flight_when_the_hold_passes_in_memory_is_lost_not_the_next_holders() {
    let redis = RedisServer::start();
    let upstream = format!("127.0.0.1:{}", redis.port()).parse().unwrap();
    let proxy = TcpProxy::start(upstream).await.unwrap();
    // Replies are held for as long as the test needs: no time-out meanwhile.
    let locks = LockClient::builder(&proxy.url())
        .response_timeout(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let first = locks.lock("m1").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .lock("m1")
                .acquire_with(wait(Duration::from_secs(10)))
                .await
                .unwrap()
        }
    });
    assert!(
        common::eventually(Duration::from_secs(10), || redis
            .pubsub_channels("lock:*")
            .iter()
            .any(|c| c == "lock:{m1}:unlock"))
        .await
    );
    // Give the waiter time to queue after its first attempt.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let tokens = first.token_handle();
    assert!(redis.cmd(&["GET", "lock:{m1}:fence"]).text().is_none());
    // Requests pass, replies are held: the token request reaches Redis and waits for its reply.
    proxy.set_black_hole_from(proxy.sources()[0], false, true);
    let side = tokio::spawn(async move { tokens.fencing_token().await });
    assert!(
        common::eventually(Duration::from_secs(10), || redis
            .cmd(&["GET", "lock:{m1}:fence"])
            .text()
            .is_some())
        .await,
        "the token request reached Redis"
    );
    let owner = first.owner().to_owned();
    // Passed in memory: no Redis call, so not held up by the proxy.
    first.release().await.unwrap();
    let next = waiter.await.unwrap();
    assert_eq!(next.owner(), owner, "the hold passed in memory");
    proxy.set_black_hole_from(proxy.sources()[0], false, false);
    let err = side.await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            LockError::Lost {
                reason: LossReason::Released,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        next.issued_token(),
        None,
        "nothing cached for the next holder"
    );
    let token = next.fencing_token().await.unwrap();
    assert!(token > 0);
    next.release().await.unwrap();
}

/// The name of the library function that runs `stem` (`acquire.lua`: `acquire`), once a call
/// has loaded the library.
fn function_named(redis: &RedisServer, stem: &str) -> String {
    fn find(reply: &lock_tests::Resp, suffix: &str) -> Option<String> {
        // `lockrt_<12 hex digits of the library's hash>_<stem>`: `_acquire` alone would also
        // match `_fair_acquire`.
        if let Some(text) = reply.text()
            && text.starts_with("lockrt_")
            && text.ends_with(suffix)
            && text.len() == "lockrt_".len() + 12 + suffix.len()
        {
            return Some(text.to_owned());
        }
        reply.items().iter().find_map(|item| find(item, suffix))
    }
    find(&redis.cmd(&["FUNCTION", "LIST"]), &format!("_{stem}"))
        .unwrap_or_else(|| panic!("no function for {stem}.lua loaded"))
}

/// An acquire that retakes its own hold (the retry of an attempt whose reply timed out, with
/// the same owner id) while a turn mark lists its client among the turns that ended, and
/// another client waits: the retake is never refused. Refused, it would leave the hold in
/// Redis for a whole lease with no guard, no watchdog and no release (a reconciled
/// `try_acquire(Duration::ZERO)` reports busy and disarms its clean-up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_mark_never_refuses_the_holders_own_retake() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    // A fenced grant runs the acquire function: the library is loaded.
    drop(locks.lock("load").fenced().acquire().await.unwrap());
    let acquire = function_named(&redis, "acquire");
    let until = (redis.time_ms() + 10_000) * 1000;
    // Owner `a1:7` of client `a1`, whose turn ended last (before client `b2`'s); the mark
    // lives for 10 s.
    redis.cmd(&["SET", "lock:{t}", "a1:7", "PX", "30000"]);
    redis.cmd(&["SET", "lock:{t}:fence", &format!("100:a1,b2:{until}")]);
    let _other_waits = listen(&redis, "lock:{t}:unlock").await;
    for (waiting, fenced) in [("0", "0"), ("1", "0"), ("0", "1"), ("1", "1")] {
        let reply = redis.cmd(&[
            "FCALL",
            &acquire,
            "3",
            "lock:{t}",
            "lock:{t}:fence",
            "lock:{t}:unlock",
            "a1:7",
            "30000",
            "604800000",
            waiting,
            fenced,
        ]);
        assert_eq!(
            reply.items().first().and_then(lock_tests::Resp::int),
            Some(1),
            "waiting {waiting}, fenced {fenced}: {reply:?}"
        );
        assert_eq!(redis.mutex_holder("lock:{t}").as_deref(), Some("a1:7"));
    }
}
