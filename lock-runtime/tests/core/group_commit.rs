//! Group commit with replica acknowledgement (`LockClientBuilder::replica_ack`, on a real
//! master and replica): the acquires and releases of one client that queue while one of its
//! writes is in flight go out together, followed by one `WAIT`, each run exactly as it would
//! have run alone, in the order they were made.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use lock_runtime::LockError;
use lock_tests::RedisServer;
use lock_tests::topology::ReplicatedPair;

/// A client whose writes the replica must acknowledge: they go out in groups.
async fn grouped(pair: &ReplicatedPair) -> lock_runtime::LockClient {
    lock_tests::client_with(pair.master(), |b| b.replica_ack(1, Duration::from_secs(1))).await
}

/// The locks (not fencing counters) of this file's names left on `redis`.
fn holds(redis: &RedisServer) -> Vec<String> {
    let mut keys = redis.keys("lock:{gc:*");
    keys.retain(|k| !k.ends_with(":fence"));
    keys
}

/// Each task's fencing tokens strictly increase.
fn assert_increasing(tokens: &[Vec<u64>]) {
    for (i, tokens) in tokens.iter().enumerate() {
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "lock gc:{i}: fencing tokens must strictly increase: {tokens:?}"
        );
    }
}

/// `n` tasks each take and give back their own lock `rounds` times; returns every task's
/// fencing tokens, in order.
async fn distinct_keys(
    client: &lock_runtime::LockClient,
    n: usize,
    rounds: usize,
) -> Vec<Vec<u64>> {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut tokens = Vec::with_capacity(rounds);
                for _ in 0..rounds {
                    // Fenced: every grant is a script call, carrying its token.
                    let guard = client
                        .lock(format!("gc:{i}"))
                        .fenced()
                        .acquire()
                        .await
                        .unwrap();
                    tokens.push(guard.fencing_token().await.unwrap());
                    guard.release().await.unwrap();
                }
                tokens
            })
        })
        .collect();
    let mut all = Vec::with_capacity(n);
    for task in tasks {
        all.push(task.await.unwrap());
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_operations_go_out_in_groups_and_each_gets_its_own_reply() {
    let pair = ReplicatedPair::start();
    let redis = pair.master();
    let client = grouped(&pair).await;
    let before = redis.command_calls("wait");
    let (n, rounds) = (64, 20);
    let tokens = distinct_keys(&client, n, rounds).await;
    let waits = redis.command_calls("wait") - before;
    let operations = (n * rounds * 2) as u64;
    println!("{operations} acquires and releases acknowledged by {waits} WAITs");
    assert!(
        waits < operations,
        "64 tasks at once: queued operations must share a WAIT ({waits} for {operations} operations)"
    );
    assert_increasing(&tokens);
    // Every release ran: no lock is left, only the fencing counters.
    assert!(
        holds(redis).is_empty(),
        "locks left behind: {:?}",
        holds(redis)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_first_attempts_go_out_in_groups_with_releases() {
    let pair = ReplicatedPair::start();
    let redis = pair.master();
    let client = grouped(&pair).await;
    let (n, rounds) = (64, 20);
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = client.lock(format!("gc:{i}")).acquire().await.unwrap();
                    assert_eq!(guard.issued_token(), None);
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    // Every first attempt was a plain `SET` (a grant the replica did not acknowledge in time
    // is rolled back and tried again: a few more), and groups ran: fewer `WAIT`s than writes.
    assert!(redis.command_calls("set") >= (n * rounds) as u64);
    assert!(
        redis.command_calls("wait") < (n * rounds * 2) as u64,
        "no group ran"
    );
    assert!(
        holds(redis).is_empty(),
        "locks left behind: {:?}",
        holds(redis)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_in_a_group_is_reported_to_its_own_caller_only() {
    let pair = ReplicatedPair::start();
    let redis = pair.master();
    let client = grouped(&pair).await;
    redis.cmd(&["SET", "lock:{gc:7}", "not a lock"]);
    let before = redis.command_calls("wait");
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                for _ in 0..10 {
                    match client.lock(format!("gc:{i}")).acquire().await {
                        Ok(guard) => {
                            guard.release().await.unwrap();
                            outcomes.push(Ok(()));
                        }
                        Err(e) => outcomes.push(Err(e)),
                    }
                }
                (i, outcomes)
            })
        })
        .collect();
    let mut seen = HashMap::new();
    for task in tasks {
        let (i, outcomes) = task.await.unwrap();
        seen.insert(i, outcomes);
    }
    let waits = redis.command_calls("wait") - before;
    assert!(
        waits < 32 * 10 * 2,
        "operations were grouped ({waits} WAITs)"
    );
    for (i, outcomes) in seen {
        for outcome in outcomes {
            match (i, outcome) {
                (7, Err(LockError::ForeignData { key, found })) => {
                    assert_eq!((key.as_str(), found.as_str()), ("lock:{gc:7}", "string"));
                }
                (7, other) => panic!("the foreign key must be reported, got {other:?}"),
                (_, Ok(())) => {}
                (i, Err(e)) => panic!("gc:{i} failed beside the foreign key: {e}"),
            }
        }
    }
    assert_eq!(
        redis.cmd(&["GET", "lock:{gc:7}"]).text(),
        Some("not a lock"),
        "foreign data is never overwritten"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquires_in_a_queue_leave_nothing_behind() {
    let pair = ReplicatedPair::start();
    let redis = pair.master();
    let client = grouped(&pair).await;
    // Keep the connection busy so that acquires queue, and drop them at every stage: queued,
    // in a group in flight, answered but not yet returned.
    for round in 0..20u64 {
        let tasks: Vec<_> = (0..48u64)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move {
                    let wait = Duration::from_micros((i * 37 + round * 101) % 900);
                    let _ =
                        tokio::time::timeout(wait, client.lock(format!("gc:{i}")).acquire()).await;
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    }
    let clean = common::eventually(Duration::from_secs(2), || holds(redis).is_empty()).await;
    assert!(
        clean,
        "holds of cancelled acquires left: {:?}",
        holds(redis)
    );
    // And the client still works.
    let guard = client.lock("gc:0").acquire().await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_after_script_flush_reloads_and_runs_once() {
    let pair = ReplicatedPair::start();
    let redis = pair.master();
    let client = grouped(&pair).await;
    distinct_keys(&client, 16, 2).await;
    // The scripts, and the library whose functions run the calls.
    redis.cmd(&["SCRIPT", "FLUSH"]);
    redis.cmd(&["FUNCTION", "FLUSH"]);
    // Every operation runs exactly once: a release run twice would fail (`NotHeld`), an
    // acquire run twice is harmless but its token would jump; both are checked.
    assert_increasing(&distinct_keys(&client, 64, 5).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_goes_out_when_the_request_before_it_is_cancelled() {
    let pair = ReplicatedPair::start();
    let redis = pair.master();
    let client = grouped(&pair).await;
    distinct_keys(&client, 1, 1).await;
    // Nothing answers: the first write stays in flight and the next ones queue behind it.
    // (A capacity change: a write that leaves no clean-up behind to send the queue instead.)
    redis.freeze();
    let first = {
        let client = client.clone();
        tokio::spawn(async move { client.semaphore("gc:first", 2).set_capacity(3).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let queued: Vec<_> = (0..8)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move { client.lock(format!("gc:{i}")).acquire().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The caller whose request carries the turn leaves; the queue must not wait on it.
    first.abort();
    let _ = first.await;
    redis.thaw();
    for (i, task) in queued.into_iter().enumerate() {
        let guard = tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .unwrap_or_else(|_| panic!("queued acquire gc:{i} never went out"))
            .unwrap()
            .unwrap();
        guard.release().await.unwrap();
    }
}

/// The functions and scripts lost (a restart without persistence, an operator's `FUNCTION
/// FLUSH`): the queued calls find nothing, the library is loaded again and every call from the
/// first that found nothing is sent again, in order. A cancelled acquire's clean-up queued
/// after its acquire must still run after it, or the acquire leaks a hold for a whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_up_queued_behind_acquires_that_found_no_script_still_runs_after_them() {
    let pair = ReplicatedPair::start();
    let redis = pair.master();
    let client = grouped(&pair).await;
    distinct_keys(&client, 2, 1).await;
    client
        .semaphore("gc:sem", 1)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    redis.cmd(&["SCRIPT", "FLUSH"]);
    redis.cmd(&["FUNCTION", "FLUSH"]);
    a_clean_up_queued_behind_a_group_runs_after_its_acquire(redis, &client).await;
    assert!(
        holds(redis).iter().all(|k| k.contains("capacity")),
        "{:?}",
        holds(redis)
    );
}

/// With the server frozen, queues `[acquire gc:x, acquire gc:y]`, a
/// semaphore acquire and the clean-up of the cancelled `gc:x` behind a first write in flight,
/// then thaws it: the clean-up must run after its acquire, so `gc:x` is freed well before the
/// 30 s lease a leaked hold would keep. Releases what it took.
async fn a_clean_up_queued_behind_a_group_runs_after_its_acquire(
    redis: &RedisServer,
    client: &lock_runtime::LockClient,
) {
    // Nothing answers: a first write stays in flight, and the next ones queue behind it.
    redis.freeze();
    let first = {
        let client = client.clone();
        tokio::spawn(async move { client.semaphore("gc:first", 2).set_capacity(3).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let spawn_acquire = |name: &'static str| {
        let client = client.clone();
        tokio::spawn(async move { client.lock(name).acquire().await })
    };
    let x = spawn_acquire("gc:x");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let y = spawn_acquire("gc:y");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let sem = {
        let client = client.clone();
        tokio::spawn(async move { client.semaphore("gc:sem", 1).acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    x.abort();
    let _ = x.await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    redis.thaw();
    first.await.unwrap().unwrap();
    let y = lock_tests::granted(y).await;
    let sem = lock_tests::granted(sem).await;
    let freed = common::eventually(Duration::from_secs(3), || {
        redis.cmd(&["EXISTS", "lock:{gc:x}"]).int() == Some(0)
    })
    .await;
    assert!(
        freed,
        "the cancelled acquire's hold was left, PTTL {:?}; holds {:?}",
        redis.cmd(&["PTTL", "lock:{gc:x}"]),
        holds(redis)
    );
    y.release().await.unwrap();
    sem.release().await.unwrap();
}
