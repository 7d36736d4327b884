//! `LockClient::info` and `LockClient::force_unlock`: a lock read and freed by its name alone,
//! as whatever member of the family it is, in both layouts, against a real server. Freed means
//! the keys are gone, the holder's guard reports the loss, and a waiter is woken by the lock's
//! own message well before the holder's lease would have ended.

use std::time::{Duration, Instant};

use lock_runtime::{HoldMode, Layout, LockClient, LockError, LockGuard, LockKind};
use lock_tests::RedisServer;

/// The holders' lease: what a waiter would wait for if the force-unlock did not wake it.
const LEASE: Duration = Duration::from_secs(3);

/// A waiter woken by the force-unlock's message gets the lock within a few milliseconds; one
/// that misses it retries on its own timers, 0.7 s or more later here (measured with a
/// force-unlock of Redisson's read/write and fair locks as plain mutexes).
const WOKEN_WITHIN: Duration = Duration::from_millis(400);

async fn client(redis: &RedisServer, layout: Layout) -> LockClient {
    lock_tests::client_with(redis, |b| b.layout(layout).watchdog_timeout(LEASE)).await
}

/// `guard` learns of the loss at its next renewal (a third of the lease).
async fn assert_lost(guard: &LockGuard, what: &str) {
    let lost = tokio::time::timeout(LEASE, guard.lost())
        .await
        .unwrap_or_else(|_| panic!("{what}: the holder never learnt of the loss"));
    assert!(lost.is_lost(), "{what}: {lost}");
}

/// Frees `name`, held by `guard` as one holder in `mode`, checks what was found and that
/// nothing is left; then the name reads as free and a second force-unlock finds nothing.
async fn free_held(
    locks: &LockClient,
    name: &str,
    guard: &LockGuard,
    kind: LockKind,
    mode: HoldMode,
) {
    let seen = locks.info(name).await.unwrap().expect("held");
    assert_eq!(seen.kind, kind, "{name}");
    let was = locks.force_unlock(name).await.unwrap().expect("held");
    assert_eq!((was.name.as_str(), was.kind), (name, kind));
    assert_eq!(was.holder_count, 1, "{name}: {was:?}");
    assert_eq!(was.holders[0].owner, guard.owner(), "{name}");
    assert_eq!(was.holders[0].mode, mode, "{name}");
    assert_eq!(was.fencing_token, guard.issued_token(), "{name}");
    assert_eq!(locks.info(name).await.unwrap(), None, "{name}");
    assert_lost(guard, name).await;
    assert_eq!(locks.force_unlock(name).await.unwrap(), None, "{name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_is_freed_by_name_and_its_holder_learns_it() {
    let redis = RedisServer::start();
    let locks = client(&redis, Layout::Native).await;
    assert_eq!(locks.info("nothing").await.unwrap(), None);
    assert_eq!(locks.force_unlock("nothing").await.unwrap(), None);

    let mutex = locks.lock("stock:42").fenced().acquire().await.unwrap();
    free_held(
        &locks,
        "stock:42",
        &mutex,
        LockKind::Mutex,
        HoldMode::Exclusive,
    )
    .await;

    let fair = locks.fair_lock("turns").acquire().await.unwrap();
    // A fair lock nobody waits for is the mutex's hash: read by name, it is a mutex.
    free_held(&locks, "turns", &fair, LockKind::Mutex, HoldMode::Exclusive).await;

    let writer = locks.rw_lock("catalog").write().acquire().await.unwrap();
    free_held(
        &locks,
        "catalog",
        &writer,
        LockKind::ReadWrite,
        HoldMode::Write,
    )
    .await;
    let reader = locks.rw_lock("catalog").read().acquire().await.unwrap();
    free_held(
        &locks,
        "catalog",
        &reader,
        LockKind::ReadWrite,
        HoldMode::Read,
    )
    .await;

    let permits = locks
        .semaphore("exports", 3)
        .acquire_many(2, Default::default())
        .await
        .unwrap();
    free_held(
        &locks,
        "exports",
        &permits,
        LockKind::Semaphore,
        HoldMode::Permits(2),
    )
    .await;
    // Every permit is free again.
    let all = locks
        .semaphore("exports", 3)
        .acquire_many(3, Default::default())
        .await
        .unwrap();
    all.release().await.unwrap();
}

/// A holder of each kind and a waiter behind it, each of its own client; the force-unlock by
/// name, sent by a third (an operator's tool), wakes the waiter at once, through the lock's own
/// message (without it, the waiter would retry when the holder's lease ends, renewed every
/// second to `LEASE`).
async fn waiters_are_woken(redis: &RedisServer, layout: Layout) {
    let holding = client(redis, layout).await;
    let waiting = client(redis, layout).await;
    let operator = client(redis, layout).await;
    let holders = [
        (
            "stock:42",
            holding.lock("stock:42").fenced().acquire().await.unwrap(),
        ),
        ("turns", holding.fair_lock("turns").acquire().await.unwrap()),
        (
            "catalog",
            holding.rw_lock("catalog").write().acquire().await.unwrap(),
        ),
        (
            "exports",
            holding.semaphore("exports", 1).acquire().await.unwrap(),
        ),
    ];
    let wait = Duration::from_secs(10);
    let waiters = [
        {
            let lock = waiting.lock("stock:42");
            tokio::spawn(async move { (lock.try_acquire(wait).await, Instant::now()) })
        },
        {
            let lock = waiting.fair_lock("turns");
            tokio::spawn(async move { (lock.try_acquire(wait).await, Instant::now()) })
        },
        {
            let lock = waiting.rw_lock("catalog").read().clone();
            tokio::spawn(async move { (lock.try_acquire(wait).await, Instant::now()) })
        },
        {
            let permits = waiting.semaphore("exports", 1);
            tokio::spawn(async move { (permits.try_acquire(wait).await, Instant::now()) })
        },
    ];
    // Every waiter is waiting (a fair lock's waiter has its place in the queue).
    tokio::time::sleep(Duration::from_millis(300)).await;
    for ((name, held), waiter) in holders.iter().zip(waiters) {
        let forced = Instant::now();
        let was = operator.force_unlock(name).await.unwrap();
        assert!(was.is_some(), "{name}: nothing was freed");
        let (guard, got) = waiter.await.unwrap();
        let guard = guard.unwrap_or_else(|e| panic!("{name}: {e}"));
        let woken = got.saturating_duration_since(forced);
        assert!(woken < WOKEN_WITHIN, "{name}: woken after {woken:?}");
        assert_lost(held, name).await;
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_wakes_the_waiters_of_every_kind() {
    let redis = RedisServer::start();
    waiters_are_woken(&redis, Layout::Native).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_locks_are_freed_as_what_they_are() {
    let redis = RedisServer::start();
    let locks = client(&redis, Layout::Redisson).await;
    assert_eq!(locks.force_unlock("nothing").await.unwrap(), None);

    let mutex = locks.lock("stock:42").fenced().acquire().await.unwrap();
    free_held(
        &locks,
        "stock:42",
        &mutex,
        LockKind::Mutex,
        HoldMode::Exclusive,
    )
    .await;
    assert_eq!(redis.cmd(&["EXISTS", "stock:42"]).int(), Some(0));

    // A semaphore (a string at the name: its available count) is read through a semaphore
    // handle, one holder per leased permit, and freed back to the count.
    let permits = locks
        .semaphore("exports", 3)
        .acquire_many(2, Default::default())
        .await
        .unwrap();
    assert_eq!(redis.cmd(&["GET", "exports"]).text(), Some("1"));
    let seen = locks.info("exports").await.unwrap().expect("held");
    assert_eq!((seen.kind, seen.holder_count), (LockKind::Semaphore, 2));
    let was = locks.force_unlock("exports").await.unwrap().expect("held");
    assert_eq!((was.kind, was.holder_count), (LockKind::Semaphore, 2));
    assert_eq!(redis.cmd(&["GET", "exports"]).text(), Some("3"));
    assert_lost(&permits, "exports").await;
    assert_eq!(locks.force_unlock("exports").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_force_unlock_wakes_the_waiters_of_every_kind() {
    let redis = RedisServer::start();
    waiters_are_woken(&redis, Layout::Redisson).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_of_another_type_is_reported_and_left_alone() {
    let redis = RedisServer::start();
    let native = client(&redis, Layout::Native).await;
    redis.cmd(&["SET", "lock:{x}", "hello"]);
    match native.force_unlock("x").await {
        Err(LockError::ForeignData { key, found }) => {
            assert_eq!((key.as_str(), found.as_str()), ("lock:{x}", "string"));
        }
        other => panic!("expected ForeignData, got {other:?}"),
    }
    assert_eq!(redis.cmd(&["GET", "lock:{x}"]).text(), Some("hello"));

    // In Redisson's layout a string is a semaphore, but a list is nobody's lock.
    let redisson = client(&redis, Layout::Redisson).await;
    redis.cmd(&["RPUSH", "queue", "job"]);
    assert!(matches!(
        redisson.force_unlock("queue").await,
        Err(LockError::ForeignData { .. })
    ));
    assert_eq!(redis.cmd(&["LLEN", "queue"]).int(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_of_given_holders_leaves_a_lock_that_changed_hands() {
    use lock_runtime::ForceUnlock;
    let redis = RedisServer::start();
    let locks = client(&redis, Layout::Native).await;
    let owners = |guards: &[&LockGuard]| -> Vec<String> {
        guards.iter().map(|g| g.owner().to_owned()).collect()
    };

    // A mutex shown held by `first`, taken by `successor` before the operator answered.
    let first = locks.lock("m").acquire().await.unwrap();
    let shown = owners(&[&first]);
    first.release().await.unwrap();
    let successor = locks.lock("m").acquire().await.unwrap();
    assert_eq!(
        locks.force_unlock_held_by("m", &shown).await.unwrap(),
        ForceUnlock::HolderChanged
    );
    assert!(!successor.is_lost());
    let info = locks.info("m").await.unwrap().expect("held");
    assert_eq!(info.holders[0].owner, successor.owner());
    // Its own holder is freed, and learns it.
    assert_eq!(
        locks
            .force_unlock_held_by("m", &owners(&[&successor]))
            .await
            .unwrap(),
        ForceUnlock::Freed
    );
    assert_lost(&successor, "mutex").await;
    assert_eq!(
        locks
            .force_unlock_held_by("m", &owners(&[&successor]))
            .await
            .unwrap(),
        ForceUnlock::NotHeld
    );

    // A semaphore: all shown holders and no other, or nothing.
    let sem = locks.semaphore("s", 3);
    let (a, b) = (sem.acquire().await.unwrap(), sem.acquire().await.unwrap());
    for partial in [owners(&[&a]), owners(&[&a, &b, &a])] {
        assert_eq!(
            locks.force_unlock_held_by("s", &partial).await.unwrap(),
            ForceUnlock::HolderChanged
        );
    }
    let c = sem.acquire().await.unwrap();
    assert_eq!(
        locks
            .force_unlock_held_by("s", &owners(&[&a, &b]))
            .await
            .unwrap(),
        ForceUnlock::HolderChanged,
        "a holder that came meanwhile"
    );
    assert_eq!(
        locks
            .force_unlock_held_by("s", &owners(&[&c, &a, &b]))
            .await
            .unwrap(),
        ForceUnlock::Freed
    );
    assert!(locks.info("s").await.unwrap().is_none());

    // Not in Redisson's layout (nothing sent).
    let java = client(&redis, Layout::Redisson).await;
    let err = java.force_unlock_held_by("m", &shown).await.unwrap_err();
    assert!(matches!(err, LockError::Unsupported { .. }), "{err:?}");
}
