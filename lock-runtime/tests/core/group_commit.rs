//! Group commit on one server (`LockClientBuilder::group_commit(true)`): the acquires and
//! releases of one client that queue while one of its writes is in flight run as one script
//! call, each exactly as its own would have.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use lock_runtime::LockError;
use lock_tests::RedisServer;

/// A client with group commit on.
async fn grouped(redis: &RedisServer) -> lock_runtime::LockClient {
    lock_tests::client_with(redis, |b| b.group_commit(true)).await
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
async fn concurrent_operations_share_script_calls_and_each_gets_its_own_reply() {
    let redis = RedisServer::start();
    let client = grouped(&redis).await;
    let before = redis.script_calls();
    let (n, rounds) = (64, 20);
    let tokens = distinct_keys(&client, n, rounds).await;
    let calls = redis.script_calls() - before;
    let operations = (n * rounds * 2) as u64;
    println!("{operations} acquires and releases in {calls} script calls");
    assert!(
        calls < operations,
        "64 tasks at once: queued operations must share script calls ({calls} calls for {operations} operations)"
    );
    assert_increasing(&tokens);
    // Every release ran: no lock is left, only the fencing counters.
    assert!(
        holds(&redis).is_empty(),
        "locks left behind: {:?}",
        holds(&redis)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_first_attempts_are_grouped_with_releases() {
    let redis = RedisServer::start();
    let client = grouped(&redis).await;
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
    // Every first attempt was a plain `SET` (alone, or inside a group's script), and groups
    // ran: only grouped operations go out as `EVALSHA` (a lone call is a function call).
    assert_eq!(redis.command_calls("set"), (n * rounds) as u64);
    assert!(redis.command_calls("evalsha") > 0, "no group ran");
    assert!(
        holds(&redis).is_empty(),
        "locks left behind: {:?}",
        holds(&redis)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_in_a_group_is_reported_to_its_own_caller_only() {
    let redis = RedisServer::start();
    let client = grouped(&redis).await;
    redis.cmd(&["SET", "lock:{gc:7}", "not a lock"]);
    let before = redis.script_calls();
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
    let calls = redis.script_calls() - before;
    assert!(
        calls < 32 * 10 * 2,
        "operations were grouped ({calls} calls)"
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
    let redis = RedisServer::start();
    let client = grouped(&redis).await;
    // Keep the connection busy so that acquires queue, and drop them at every stage: queued,
    // merged into a call in flight, answered but not yet returned.
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
    let clean = common::eventually(Duration::from_secs(2), || holds(&redis).is_empty()).await;
    assert!(
        clean,
        "holds of cancelled acquires left: {:?}",
        holds(&redis)
    );
    // And the client still works.
    let guard = client.lock("gc:0").acquire().await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_after_script_flush_reloads_and_runs_once() {
    let redis = RedisServer::start();
    let client = grouped(&redis).await;
    distinct_keys(&client, 16, 2).await;
    // The batch script, and the library whose functions run the calls sent alone.
    redis.cmd(&["SCRIPT", "FLUSH"]);
    redis.cmd(&["FUNCTION", "FLUSH"]);
    // Every operation runs exactly once: a release run twice would fail (`NotHeld`), an
    // acquire run twice is harmless but its token would jump; both are checked.
    assert_increasing(&distinct_keys(&client, 64, 5).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_goes_out_when_the_request_before_it_is_cancelled() {
    let redis = RedisServer::start();
    let client = grouped(&redis).await;
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

/// A server that rejects script calls spanning slots (a node owning every slot of a one-node
/// cluster, as behind a proxy in front of a cluster): groups fall back to one call each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_rejected_as_cross_slot_is_sent_call_by_call() {
    let redis = one_node_cluster("group-commit-nodes.conf").await;
    let client = grouped(&redis).await;
    assert_increasing(&distinct_keys(&client, 64, 10).await);
    assert!(
        holds(&redis).is_empty(),
        "locks left behind: {:?}",
        holds(&redis)
    );
}

/// Behind a proxy in front of a cluster (here a one-node cluster, which refuses script calls
/// spanning slots), the first merged call is rejected as `CROSSSLOT`: a cancelled acquire's
/// clean-up queued behind it must not run before the acquire is sent again on its own, or the
/// acquire is granted to nobody and its hold leaks for a whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_up_queued_behind_a_group_rejected_as_cross_slot_still_runs_after_it() {
    let redis = one_node_cluster("group-commit-order-nodes.conf").await;
    let client = grouped(&redis).await;
    // The scripts and functions loaded, by calls that merge nothing.
    client
        .semaphore("gc:sem", 1)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    client
        .lock("gc:warm")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    a_clean_up_queued_behind_a_group_runs_after_its_acquire(&redis, &client).await;
}

/// The script cache lost but not the function library (a restart with persistence, a Sentinel
/// failover on Redis 7, an operator's `SCRIPT FLUSH`): the merged acquires (a script) find
/// nothing while the calls after them (functions) run. A cancelled acquire's clean-up queued
/// after them must still run after its acquire, or the acquire leaks a hold for a whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_up_queued_behind_acquires_that_found_no_script_still_runs_after_them() {
    let redis = RedisServer::start();
    let client = grouped(&redis).await;
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
    a_clean_up_queued_behind_a_group_runs_after_its_acquire(&redis, &client).await;
    assert!(
        holds(&redis).iter().all(|k| k.contains("capacity")),
        "{:?}",
        holds(&redis)
    );
}

/// A one-node cluster (a node owning every slot: it refuses script calls spanning slots, as a
/// proxy in front of a cluster does), its nodes file named `config_file`.
async fn one_node_cluster(config_file: &str) -> RedisServer {
    let redis = RedisServer::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        config_file,
    ]);
    redis.cmd(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    let ready = common::eventually(Duration::from_secs(10), || {
        redis
            .cmd(&["CLUSTER", "INFO"])
            .text()
            .is_some_and(|info| info.contains("cluster_state:ok"))
    })
    .await;
    assert!(ready, "the one-node cluster did not come up");
    redis
}

/// With the server frozen, queues `[acquire gc:x, acquire gc:y]` (one merged call), a
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
