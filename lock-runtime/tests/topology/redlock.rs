//! RedLock over five real redis-server processes: exclusion, a quorum with nodes down, partial
//! holds given back, loss of the quorum, validity, and bad input.
//!
//! The five servers are started once, in the one test that runs the scenarios in sequence (each
//! with its own lock name, each leaving all five nodes running); starting them per test would
//! cost more than the scenarios and run timing-sensitive scenarios side by side on few cores.

use crate::common;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions, LossReason, RedLock};
use lock_tests::RedisServer;
use tokio::time::Instant;

/// One client per server, optionally with a short watchdog timeout.
async fn connect_all(servers: &[RedisServer], watchdog: Option<Duration>) -> Vec<LockClient> {
    let mut clients = Vec::new();
    for server in servers {
        clients.push(match watchdog {
            Some(w) => common::client_with_watchdog(server, w).await,
            None => common::client(server).await,
        });
    }
    clients
}

/// The Redis key of lock `name` under the default prefix.
fn key(name: &str) -> String {
    format!("lock:{{{name}}}")
}

/// Whether `server` holds a lock for `name` (the fencing counter does not count).
fn has_lock(server: &RedisServer, name: &str) -> bool {
    server.cmd(&["EXISTS", &key(name)]).int() == Some(1)
}

/// Locks left on `server`: `lock:*` without the fencing counters, which outlive holds.
fn lock_keys(server: &RedisServer) -> Vec<String> {
    server
        .keys("lock:*")
        .into_iter()
        .filter(|k| !k.ends_with(":fence"))
        .collect()
}

fn assert_quorum_lost(err: &LockError) {
    assert!(
        matches!(
            err,
            LockError::Lost {
                reason: LossReason::QuorumLost,
                ..
            }
        ),
        "{err:?}"
    );
}

async fn scenario(name: &str, body: impl Future<Output = ()>) {
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(20), body)
        .await
        .unwrap_or_else(|_| panic!("scenario `{name}` did not finish within 20 s"));
    eprintln!("{name}: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_over_five_nodes() {
    let mut servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    scenario(
        "contending owners never overlap",
        contending_owners_never_overlap(&servers),
    )
    .await;
    scenario(
        "a quorum of three survives two stopped nodes",
        quorum_of_three_survives_two_stopped_nodes(&mut servers),
    )
    .await;
    scenario(
        "three stopped nodes mean no quorum and no leftover holds",
        three_stopped_nodes_mean_no_quorum_and_no_leftover_holds(&mut servers),
    )
    .await;
    scenario(
        "partial holds are released under contention",
        partial_holds_are_released_under_contention(&servers),
    )
    .await;
    scenario(
        "losing three nodes loses the quorum, losing two does not",
        losing_three_nodes_loses_the_quorum_but_two_do_not(&servers),
    )
    .await;
    scenario(
        "an explicit lease bounds the validity",
        an_explicit_lease_bounds_the_validity(&servers),
    )
    .await;
    scenario(
        "hung nodes are asked concurrently and their late holds released",
        hung_nodes_are_asked_concurrently_and_their_late_holds_released(&servers),
    )
    .await;
    // Holds released in the background may take a moment.
    let clean = common::eventually(Duration::from_secs(1), || {
        servers.iter().all(|s| lock_keys(s).is_empty())
    })
    .await;
    let left: Vec<Vec<String>> = servers.iter().map(lock_keys).collect();
    assert!(clean, "locks left behind: {left:?}");
}

/// Four owners, each with its own five clients, take the lock five times each; the critical
/// sections never overlap and every acquisition succeeds within the wait.
async fn contending_owners_never_overlap(servers: &[RedisServer]) {
    const OWNERS: usize = 4;
    const ROUNDS: usize = 5;
    let name = "rl:exclusion";
    let inside = Arc::new(AtomicUsize::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let mut all_clients = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..OWNERS {
        let clients = connect_all(servers, None).await;
        all_clients.extend(clients.iter().cloned());
        let lock = RedLock::new(clients, name)
            .unwrap()
            .retry_delay(Duration::from_millis(20));
        let (inside, entered) = (inside.clone(), entered.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = lock
                    .try_acquire(Duration::from_secs(10))
                    .await
                    .expect("acquired within the wait");
                assert!(guard.nodes_held() >= 3, "{guard:?}");
                guard
                    .run(async {
                        assert_eq!(
                            inside.fetch_add(1, Ordering::SeqCst),
                            0,
                            "two owners in the critical section"
                        );
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await
                    .expect("not lost");
                entered.fetch_add(1, Ordering::SeqCst);
                guard.release().await.expect("released on a quorum");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(entered.load(Ordering::SeqCst), OWNERS * ROUNDS);
    // Node locks taken, including the ones given back after split rounds: every acquisition
    // takes at most five; split rounds must stay the exception, not livelock.
    let node_grants: u64 = all_clients.iter().map(|c| c.stats().acquisitions).sum();
    eprintln!(
        "  node grants for {} acquisitions: {node_grants}",
        OWNERS * ROUNDS
    );
    assert!(
        node_grants <= (OWNERS * ROUNDS * 5 * 3) as u64,
        "{node_grants} node grants"
    );
    for server in servers {
        assert!(!has_lock(server, name), "left on {}", server.url());
    }
}

async fn quorum_of_three_survives_two_stopped_nodes(servers: &mut [RedisServer]) {
    let name = "rl:two-down";
    let clients = connect_all(servers, None).await;
    servers[3].stop();
    servers[4].stop();
    let lock = RedLock::new(clients, name).unwrap();
    assert_eq!((lock.nodes(), lock.quorum()), (5, 3));
    let started = Instant::now();
    let guard = lock.try_acquire(Duration::from_secs(2)).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(guard.quorum(), 3);
    assert_eq!(guard.nodes_held(), 3);
    assert_eq!(guard.node_guards().len(), 3);
    assert!(!guard.is_lost());
    // The default 30 s watchdog lease, less the round and the drift (0.3 s + 2 ms).
    let validity = guard.remaining_validity();
    assert!(
        validity > Duration::from_secs(29) && validity <= Duration::from_millis(29_698),
        "{validity:?}"
    );
    for server in &servers[..3] {
        assert!(has_lock(server, name));
    }
    guard.release().await.unwrap();
    for server in &servers[..3] {
        assert!(!has_lock(server, name), "left on {}", server.url());
    }
    servers[3].restart();
    servers[4].restart();
}

async fn three_stopped_nodes_mean_no_quorum_and_no_leftover_holds(servers: &mut [RedisServer]) {
    let name = "rl:three-down";
    let clients = connect_all(servers, None).await;
    for server in &mut servers[2..] {
        server.stop();
    }
    let lock = RedLock::new(clients.clone(), name)
        .unwrap()
        .retry_delay(Duration::from_millis(50));
    let wait = Duration::from_millis(500);
    let started = Instant::now();
    let err = lock.try_acquire(wait).await.unwrap_err();
    let took = started.elapsed();
    assert!(
        took >= wait && took < wait + Duration::from_secs(1),
        "took {took:?}"
    );
    assert!(err.is_unavailable(), "{err:?}");
    match &err {
        LockError::NoQuorum {
            acquired,
            quorum: 3,
            nodes: 5,
            last_error: Some(_),
            ..
        } => assert!(*acquired <= 2, "{err:?}"),
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    // The two live nodes did grant it (in some round), and gave it back.
    assert!(
        clients[0].stats().acquisitions + clients[1].stats().acquisitions >= 1,
        "the live nodes never granted the lock: nothing was tested"
    );
    assert!(
        common::eventually(Duration::from_secs(2), || {
            servers[..2].iter().all(|s| lock_keys(s).is_empty())
        })
        .await,
        "partial holds left: {:?} {:?}",
        lock_keys(&servers[0]),
        lock_keys(&servers[1])
    );
    for server in &mut servers[2..] {
        server.restart();
    }
}

/// Another owner holds the name on three nodes: we can get at most the other two, which must
/// be given back, while the other owner's three stay untouched.
async fn partial_holds_are_released_under_contention(servers: &[RedisServer]) {
    let name = "rl:contended";
    let mut theirs = Vec::new();
    for server in &servers[..3] {
        let other = common::client(server).await;
        theirs.push(other.lock(name).acquire().await.unwrap());
    }
    let ours = connect_all(servers, None).await;
    let lock = RedLock::new(ours.clone(), name)
        .unwrap()
        .retry_delay(Duration::from_millis(50));
    let err = lock
        .try_acquire(Duration::from_millis(500))
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    // One of the three holds has to run out (30 s watchdog lease) before a retry can win.
    let retry_after = err.retry_after().expect("the holders' lease is known");
    assert!(
        retry_after > Duration::from_secs(25) && retry_after <= Duration::from_secs(30),
        "{retry_after:?}"
    );
    assert!(
        ours[3].stats().acquisitions + ours[4].stats().acquisitions >= 1,
        "the free nodes never granted the lock: nothing was tested"
    );
    assert!(
        common::eventually(Duration::from_secs(2), || {
            servers[3..].iter().all(|s| !has_lock(s, name))
        })
        .await,
        "partial holds left on the free nodes"
    );
    for (server, guard) in servers.iter().zip(&theirs) {
        assert_eq!(
            server.mutex_holder(&key(name)).as_deref(),
            Some(guard.owner()),
            "the other owner's hold on {} was touched",
            server.url()
        );
        assert!(!guard.is_lost());
    }
    assert!(ours.iter().all(|c| c.held_locks() == 0));
    for guard in theirs {
        guard.release().await.unwrap();
    }
}

/// With a 600 ms watchdog (renewal every 200 ms): deleting the lock on two nodes leaves three,
/// still a quorum; deleting it on a third loses the RedLock within about a renewal period.
async fn losing_three_nodes_loses_the_quorum_but_two_do_not(servers: &[RedisServer]) {
    let name = "rl:quorum-loss";
    let watchdog = Duration::from_millis(600);
    let clients = connect_all(servers, Some(watchdog)).await;
    let lock = RedLock::new(clients, name).unwrap();
    let guard = lock.acquire().await.unwrap();
    assert_eq!(guard.nodes_held(), 5);
    let keys: Vec<String> = guard
        .node_guards()
        .iter()
        .map(|g| g.key().to_owned())
        .collect();
    assert_eq!(keys, vec![key(name); 5]);

    for server in &servers[..2] {
        assert_eq!(server.cmd(&["DEL", &key(name)]).int(), Some(1));
    }
    // Longer than the lease itself: only renewal can keep the three others.
    let early = tokio::time::timeout(watchdog + watchdog / 2, guard.lost()).await;
    assert!(early.is_err(), "lost with three of five nodes: {early:?}");
    assert!(!guard.is_lost());
    assert_eq!(guard.nodes_held(), 3, "the two deletions were noticed");
    assert!(guard.remaining_validity() > Duration::ZERO);

    assert_eq!(servers[2].cmd(&["DEL", &key(name)]).int(), Some(1));
    let deleted = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("quorum loss noticed");
    let noticed = deleted.elapsed();
    eprintln!("  quorum loss noticed after {noticed:?}");
    assert!(
        noticed < watchdog / 2,
        "noticed after {noticed:?}, more than a renewal period (200 ms) late"
    );
    assert_quorum_lost(&err);
    assert!(guard.is_lost());
    assert_eq!(guard.nodes_held(), 2);
    assert_eq!(guard.valid_until(), None);
    assert_eq!(guard.remaining_validity(), Duration::ZERO);
    assert_quorum_lost(&guard.run(async {}).await.unwrap_err());
    assert_quorum_lost(&guard.release().await.unwrap_err());
    // Whatever was left is released.
    for server in &servers[3..] {
        assert!(!has_lock(server, name), "left on {}", server.url());
    }
}

/// With an explicit lease nothing renews: the validity starts below `lease − drift` and the
/// guard is lost when it runs out, not before, and `drift` before the node locks expire.
async fn an_explicit_lease_bounds_the_validity(servers: &[RedisServer]) {
    let name = "rl:lease";
    let lease = Duration::from_secs(1);
    // A large drift factor, so that the RedLock's end and the nodes' end are far apart.
    let drift = lease / 5 + Duration::from_millis(2);
    let clients = connect_all(servers, None).await;
    let lock = RedLock::new(clients, name).unwrap().drift_factor(0.2);
    let before = Instant::now();
    let guard = lock
        .acquire_with(LockOptions::new().wait(Duration::from_secs(1)).lease(lease))
        .await
        .unwrap();
    let validity = guard.remaining_validity();
    assert!(
        validity > lease / 2 && validity <= lease - drift,
        "{validity:?}"
    );
    let until = guard.valid_until().unwrap();
    assert!(
        until >= before + lease - drift,
        "never earlier than the lease from the start"
    );
    let err = tokio::time::timeout(lease * 2, guard.lost())
        .await
        .expect("lost when the lease runs out");
    assert_quorum_lost(&err);
    let at = before.elapsed();
    assert!(
        at >= lease - drift && at < lease - drift + Duration::from_millis(100),
        "lost after {at:?}"
    );
    assert!(guard.is_lost());
    assert!(
        guard.node_guards().iter().all(|g| !g.is_lost()),
        "the RedLock ends a drift before its node locks"
    );
    assert_eq!(guard.remaining_validity(), Duration::ZERO);
    drop(guard);
    // The nodes expire the holds themselves.
    assert!(
        common::eventually(Duration::from_secs(1), || {
            servers.iter().all(|s| !has_lock(s, name))
        })
        .await
    );
}

/// Two frozen nodes: the round asks all five at once, so it takes one node timeout (asked one
/// after another it would take two), reaches the quorum on the other three, and the attempts
/// that timed out are given back once the frozen nodes wake up and run them.
async fn hung_nodes_are_asked_concurrently_and_their_late_holds_released(servers: &[RedisServer]) {
    let name = "rl:hung";
    let node_timeout = Duration::from_millis(300);
    let clients = connect_all(servers, None).await;
    let lock = RedLock::new(clients, name)
        .unwrap()
        .node_timeout(node_timeout);
    servers[3].freeze();
    servers[4].freeze();
    let started = Instant::now();
    let result = lock.try_acquire(Duration::ZERO).await;
    let took = started.elapsed();
    servers[3].thaw();
    servers[4].thaw();
    let guard = result.unwrap();
    assert!(
        took >= node_timeout && took < node_timeout * 2 - Duration::from_millis(50),
        "took {took:?}"
    );
    assert_eq!(guard.nodes_held(), 3);
    assert!(
        common::eventually(Duration::from_secs(3), || {
            servers[3..].iter().all(|s| !has_lock(s, name))
        })
        .await,
        "holds taken after the node timeout were left behind"
    );
    guard.release().await.unwrap();
    for server in &servers[..3] {
        assert!(!has_lock(server, name), "left on {}", server.url());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_clients_names_and_settings_are_rejected() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    assert!(matches!(
        RedLock::new(Vec::<LockClient>::new(), "x"),
        Err(LockError::InvalidConfig(_))
    ));
    assert!(matches!(
        RedLock::new([a.clone(), b.clone(), a.clone()], "x"),
        Err(LockError::InvalidConfig(_))
    ));
    for bad in ["", "a\nb"] {
        assert!(matches!(
            RedLock::new([a.clone(), b.clone()], bad),
            Err(LockError::InvalidName { .. })
        ));
    }
    assert_eq!(RedLock::new([a.clone()], "x").unwrap().quorum(), 1);
    // An even number of nodes is accepted; its quorum is a strict majority.
    let lock = RedLock::new([a.clone(), b.clone()], "x").unwrap();
    assert_eq!((lock.nodes(), lock.quorum(), lock.name()), (2, 2, "x"));

    let once = Duration::ZERO;
    for bad in [
        lock.clone().node_timeout(Duration::ZERO),
        lock.clone().drift_factor(0.5),
        lock.clone().drift_factor(-0.1),
        lock.clone().drift_factor(f64::NAN),
        lock.clone().retry_delay(Duration::ZERO),
    ] {
        let err = bad.try_acquire(once).await.unwrap_err();
        assert!(
            matches!(err, LockError::InvalidConfig(_)),
            "{bad:?}: {err:?}"
        );
    }
    // A lease no longer than the drift (2 ms at least) could never be valid.
    let err = lock
        .acquire_with(
            LockOptions::new()
                .wait(once)
                .lease(Duration::from_millis(2)),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");
    assert!(redis.keys("lock:*").is_empty(), "nothing was sent");
}
