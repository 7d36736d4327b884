//! MultiLock: all or nothing, deadlock-free, one loss signal for all.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_runtime::{LockClient, LockError, MultiLock, MultiLockGuard};
use lock_tests::RedisServer;

/// One "process": its own client per deployment, as two instances of a service have.
struct Process {
    x: LockClient,
    y: LockClient,
}

impl Process {
    async fn start(x: &RedisServer, y: &RedisServer) -> Process {
        Process {
            x: common::client(x).await,
            y: common::client(y).await,
        }
    }

    /// `acct:1` on X, `ledger:1` on Y and `k` on both (the same key on two deployments), listed
    /// in the given order or reversed.
    fn multilock(&self, reversed: bool) -> MultiLock {
        let mut locks = vec![
            self.x.lock("acct:1"),
            self.y.lock("ledger:1"),
            self.x.lock("k"),
            self.y.lock("k"),
        ];
        if reversed {
            locks.reverse();
        }
        MultiLock::new(locks).unwrap()
    }

    /// Which deployment and key each guard is, in acquisition order.
    fn order(&self, guard: &MultiLockGuard) -> Vec<String> {
        guard
            .guards()
            .iter()
            .map(|g| {
                let at = if g.owner().starts_with(self.x.id()) {
                    "X"
                } else {
                    "Y"
                };
                format!("{at} {}", g.key())
            })
            .collect()
    }
}

/// Regression (H1): the order was by each client's random id, so two processes, each with one
/// client per deployment, took the same locks in opposite orders about half the time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_processes_take_the_locks_in_the_same_order() {
    let (x, y) = (RedisServer::start(), RedisServer::start());
    for round in 0..20 {
        let (p1, p2) = (Process::start(&x, &y).await, Process::start(&x, &y).await);
        let g1 = p1.multilock(false).acquire().await.unwrap();
        let first = p1.order(&g1);
        g1.release().await.unwrap();
        let g2 = p2.multilock(true).acquire().await.unwrap();
        let second = p2.order(&g2);
        g2.release().await.unwrap();
        assert_eq!(
            first, second,
            "round {round}: the processes disagree on the order"
        );
    }

    // Two prefixes on one server: the key (prefix included) decides.
    let process = || async {
        (
            LockClient::builder(&x.url())
                .prefix("accounts")
                .build()
                .await
                .unwrap(),
            LockClient::builder(&x.url())
                .prefix("ledgers")
                .build()
                .await
                .unwrap(),
        )
    };
    for round in 0..20 {
        let ((a1, l1), (a2, l2)) = (process().await, process().await);
        let keys = |m: MultiLock| async move {
            let guard = m.acquire().await.unwrap();
            let keys: Vec<String> = guard.guards().iter().map(|g| g.key().to_owned()).collect();
            guard.release().await.unwrap();
            keys
        };
        let first = keys(MultiLock::new([a1.lock("1"), l1.lock("1")]).unwrap()).await;
        let second = keys(MultiLock::new([l2.lock("1"), a2.lock("1")]).unwrap()).await;
        assert_eq!(
            first, second,
            "round {round}: the processes disagree on the order"
        );
    }
}

/// Regression (H1), the review's repro: two processes, opposite listings, `acquire()` without a
/// wait. With disagreeing orders each took one lock and waited for the other forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_multilocks_of_two_processes_do_not_deadlock() {
    let (x, y) = (RedisServer::start(), RedisServer::start());
    for round in 0..20 {
        let (p1, p2) = (Process::start(&x, &y).await, Process::start(&x, &y).await);
        let (m1, m2) = (p1.multilock(false), p2.multilock(true));
        let take = |m: MultiLock| async move {
            let guard = m.acquire().await?;
            tokio::time::sleep(Duration::from_millis(2)).await;
            guard.release().await
        };
        let t = Duration::from_secs(5);
        let (a, b) = tokio::join!(
            tokio::time::timeout(t, take(m1)),
            tokio::time::timeout(t, take(m2))
        );
        assert!(
            a.is_ok() && b.is_ok(),
            "round {round}: deadlock, each holds one lock and waits for the other"
        );
        a.unwrap().unwrap();
        b.unwrap().unwrap();
    }
}

/// Regression (H1): 40 races of two processes with opposite listings and a wait: none may time
/// out (with disagreeing orders both timed out whenever they collided).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_processes_with_a_wait_never_time_out() {
    let (x, y) = (RedisServer::start(), RedisServer::start());
    let inside = Arc::new(AtomicUsize::new(0));
    for round in 0..40 {
        let (p1, p2) = (Process::start(&x, &y).await, Process::start(&x, &y).await);
        let race = |m: MultiLock, inside: Arc<AtomicUsize>| {
            tokio::spawn(async move {
                let guard = m.try_acquire(Duration::from_secs(3)).await?;
                guard
                    .run(async {
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "overlap");
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await?;
                guard.release().await
            })
        };
        let one = race(p1.multilock(false), inside.clone());
        let two = race(p2.multilock(true), inside.clone());
        for (who, task) in [("first", one), ("second", two)] {
            if let Err(e) = task.await.unwrap() {
                panic!("round {round}: the {who} process failed: {e}");
            }
        }
    }
}

/// Regression (L7): the same key through two clients of one deployment was taken through the
/// first, then waited for through the second: the multi-lock waited for itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_through_two_clients_of_one_deployment_is_taken_once() {
    let redis = RedisServer::start();
    let (c1, c2) = (common::client(&redis).await, common::client(&redis).await);
    let multi = MultiLock::new([c1.lock("k"), c2.lock("k"), c1.lock("j")]).unwrap();
    let guard = multi
        .try_acquire(Duration::from_secs(2))
        .await
        .expect("a duplicate is taken once, not waited for");
    assert_eq!(multi.locks().len(), 2, "duplicates are taken once");
    assert_eq!(guard.guards().len(), 2);
    assert!(
        guard.guards()[1].owner().starts_with(c1.id()),
        "taken through the first client listed"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_multilocks_in_opposite_order_do_not_deadlock() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let inside = Arc::new(AtomicUsize::new(0));
    let run =
        |locks: lock_runtime::LockClient, names: [&'static str; 2], inside: Arc<AtomicUsize>| {
            tokio::spawn(async move {
                let multi = MultiLock::new(names.map(|n| locks.lock(n))).unwrap();
                for _ in 0..30 {
                    let guard = multi.acquire().await.unwrap();
                    guard
                        .run(async {
                            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "overlap");
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            inside.fetch_sub(1, Ordering::SeqCst);
                        })
                        .await
                        .unwrap();
                    guard.release().await.unwrap();
                }
            })
        };
    let one = run(a, ["acct:1", "acct:2"], inside.clone());
    let two = run(b, ["acct:2", "acct:1"], inside.clone());
    tokio::time::timeout(Duration::from_secs(20), async {
        one.await.unwrap();
        two.await.unwrap();
    })
    .await
    .expect("no deadlock");
    assert!(redis.keys("lock:{acct:*}").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_busy_lock_means_none_is_held() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let other = common::client(&redis).await;
    let _busy = other.lock("m:2").acquire().await.unwrap();
    let multi = MultiLock::new([locks.lock("m:3"), locks.lock("m:1"), locks.lock("m:2")]).unwrap();
    let err = multi
        .try_acquire(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    // m:1 was taken first (sorted order), then given back.
    assert!(!locks.lock("m:1").is_locked().await.unwrap());
    assert!(!locks.lock("m:3").is_locked().await.unwrap());
    assert_eq!(locks.held_locks(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_any_lock_is_a_loss_of_the_multilock() {
    let redis = RedisServer::start();
    let locks = common::client_with_watchdog(&redis, Duration::from_secs(1)).await;
    let multi = MultiLock::new([locks.lock("l:a"), locks.lock("l:b")]).unwrap();
    assert_eq!(multi.locks().len(), 2);
    let guard = multi.acquire().await.unwrap();
    assert_eq!(guard.guards().len(), 2);
    redis.cmd(&["DEL", "lock:{l:b}"]);
    let err = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .unwrap();
    assert!(err.is_lost(), "{err:?}");
    assert!(guard.is_lost());
    let body = guard.run(async { 1 }).await;
    assert!(matches!(body, Err(LockError::Lost { .. })));
    assert!(
        guard.release().await.is_err(),
        "releasing a lost multilock reports it"
    );
    assert!(
        !locks.lock("l:a").is_locked().await.unwrap(),
        "the surviving lock is released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_acquire_of_a_member_reenters_and_bad_input_is_rejected() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let multi = MultiLock::new([locks.lock("n:1"), locks.lock("n:2"), locks.lock("n:1")]).unwrap();
    assert_eq!(multi.locks().len(), 2, "duplicates are taken once");
    let guard = multi.acquire().await.unwrap();
    let inner = guard
        .scope(async { locks.lock("n:2").try_acquire(Duration::ZERO).await })
        .await
        .unwrap();
    assert!(inner.is_reentrant());
    drop(inner);
    guard.release().await.unwrap();
    assert!(matches!(
        MultiLock::new(Vec::new()),
        Err(LockError::InvalidConfig(_))
    ));
    assert!(matches!(
        MultiLock::new([locks.lock("")]),
        Err(LockError::InvalidName { .. })
    ));
}

/// Processes that reach a deployment through different addresses (here: directly and through
/// a proxy) derive different identities; an explicit `deployment_id` makes them agree, both on
/// duplicates and on the order of the same key on two deployments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_deployment_id_names_a_deployment_behind_any_address() {
    let (x, y) = (RedisServer::start(), RedisServer::start());
    let upstream = |r: &RedisServer| format!("127.0.0.1:{}", r.port()).parse().unwrap();
    let (proxy_x, proxy_y) = (
        lock_tests::TcpProxy::start(upstream(&x)).await.unwrap(),
        lock_tests::TcpProxy::start(upstream(&y)).await.unwrap(),
    );
    let named = |url: String, id: &'static str| async move {
        LockClient::builder(&url)
            .deployment_id(id)
            .build()
            .await
            .unwrap()
    };

    let direct = common::client(&x).await;
    assert_eq!(direct.deployment_id(), format!("127.0.0.1:{}/0", x.port()));
    let proxied = LockClient::connect(&proxy_x.url()).await.unwrap();
    assert_ne!(direct.deployment_id(), proxied.deployment_id());

    // One process, one key through two addresses of X: taken once.
    let (c1, c2) = (
        named(x.url(), "accounts").await,
        named(proxy_x.url(), "accounts").await,
    );
    let multi = MultiLock::new([c1.lock("k"), c2.lock("k")]).unwrap();
    assert_eq!(multi.locks().len(), 1);
    let guard = multi.try_acquire(Duration::from_secs(2)).await.unwrap();
    guard.release().await.unwrap();

    // Two processes, `k` on X and on Y, each deployment reached through other addresses.
    let p1 = Process {
        x: named(proxy_x.url(), "accounts").await,
        y: named(y.url(), "ledgers").await,
    };
    let p2 = Process {
        x: named(x.url(), "accounts").await,
        y: named(proxy_y.url(), "ledgers").await,
    };
    let g1 = MultiLock::new([p1.y.lock("k"), p1.x.lock("k")])
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let first = p1.order(&g1);
    g1.release().await.unwrap();
    let g2 = MultiLock::new([p2.x.lock("k"), p2.y.lock("k")])
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let second = p2.order(&g2);
    g2.release().await.unwrap();
    assert_eq!(first, ["X lock:{k}", "Y lock:{k}"], "accounts < ledgers");
    assert_eq!(first, second);
}
