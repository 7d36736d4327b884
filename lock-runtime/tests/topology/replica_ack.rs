//! Replica acknowledgement (`LockClientBuilder::replica_ack`): `WAIT n timeout` after acquire,
//! renew and release, against a real master and replica.

use crate::common;

use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, LossReason};
use lock_tests::topology::ReplicatedPair;

const ACK_TIMEOUT: Duration = Duration::from_millis(200);

async fn acked_client(pair: &ReplicatedPair, watchdog: Duration) -> LockClient {
    LockClient::builder(&pair.master_url())
        .replica_ack(1, ACK_TIMEOUT)
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("connect")
}

fn exists(pair: &ReplicatedPair, key: &str) -> bool {
    pair.master().cmd(&["EXISTS", key]).int() == Some(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_wait_for_the_replica_and_fail_cleanly_without_it() {
    let mut pair = ReplicatedPair::start();
    let locks = acked_client(&pair, Duration::from_secs(30)).await;

    // With the replica up: granted, and the grant is on the replica too.
    let guard = locks
        .lock("acked")
        .try_acquire(Duration::ZERO)
        .await
        .expect("acquire with a live replica");
    let key = guard.key().to_owned();
    assert_eq!(
        pair.replica().cmd(&["EXISTS", &key]).int(),
        Some(1),
        "WAIT returned, so the replica must have the grant"
    );
    guard.release().await.expect("acknowledged release");
    assert!(!exists(&pair, &key));

    // Replica stopped: the acquire is rolled back and fails with the typed error.
    pair.replica_mut().stop();
    let started = std::time::Instant::now();
    let err = locks
        .lock("acked")
        .try_acquire(Duration::ZERO)
        .await
        .expect_err("no replica can acknowledge");
    match &err {
        LockError::ReplicaAck {
            op,
            required,
            acknowledged,
            timeout,
            ..
        } => {
            assert_eq!(*op, "acquire");
            assert_eq!((*required, *acknowledged), (1, 0));
            assert_eq!(*timeout, ACK_TIMEOUT);
        }
        other => panic!("expected ReplicaAck, got {other:?}"),
    }
    assert!(err.is_unavailable(), "an HTTP layer should answer 503");
    assert!(
        started.elapsed() >= ACK_TIMEOUT,
        "WAIT must have waited for the acknowledgement"
    );
    assert!(
        !exists(&pair, &key),
        "the unacknowledged grant must be rolled back"
    );
    assert_eq!(locks.held_locks(), 0);
    // Only the fencing counter remains, by design: tokens must never go backwards.
    let left: Vec<String> = pair
        .master()
        .keys("lock:*")
        .into_iter()
        .filter(|k| !k.ends_with(":fence"))
        .collect();
    assert!(left.is_empty(), "keys left behind: {left:?}");

    // Someone else can take it at once: nothing was left held.
    let plain = common::client(pair.master()).await;
    let other = plain
        .lock("acked")
        .try_acquire(Duration::ZERO)
        .await
        .expect("free for a client that does not require acknowledgement");
    drop(other);

    // The replica is back: acknowledged writes work again.
    pair.replica_mut().restart();
    pair.wait_for_sync();
    let guard = locks
        .lock("acked")
        .try_acquire(Duration::from_secs(2))
        .await
        .expect("acquire once the replica is back");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacknowledged_renewals_and_releases_are_reported() {
    let mut pair = ReplicatedPair::start();
    let watchdog = Duration::from_millis(900);
    let locks = acked_client(&pair, watchdog).await;

    // Renewals keep working while the replica acknowledges them.
    let guard = locks.lock("renewed").acquire().await.expect("acquire");
    tokio::time::sleep(watchdog * 2).await;
    assert!(!guard.is_lost(), "acknowledged renewals keep the lock");

    // Without the replica, no renewal counts: the lock is declared lost before the lease the
    // master knows could run out.
    pair.replica_mut().stop();
    let lost = tokio::time::timeout(watchdog * 2, guard.lost())
        .await
        .expect("lost within two leases once renewals go unacknowledged");
    assert!(
        matches!(
            lost,
            LockError::Lost {
                reason: LossReason::RenewalFailed,
                ..
            }
        ),
        "{lost:?}"
    );
    drop(guard);

    // A release that the replica cannot acknowledge is reported, and still done on the master.
    pair.replica_mut().restart();
    pair.wait_for_sync();
    let guard = locks.lock("released").acquire().await.expect("acquire");
    let key = guard.key().to_owned();
    pair.replica_mut().stop();
    let err = guard
        .release()
        .await
        .expect_err("release cannot be acknowledged");
    // Not a failed release: a typed outcome the caller can ignore (not "unavailable", so an
    // HTTP layer does not answer 503 for work that was done).
    assert!(
        matches!(
            err,
            LockError::UnacknowledgedRelease {
                required: 1,
                acknowledged: 0,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_released(), "{err:?}");
    assert!(!err.is_unavailable(), "{err:?}");
    assert!(!exists(&pair, &key), "released on the master anyway");
}

#[tokio::test]
async fn bad_acknowledgement_timeouts_are_rejected() {
    let pair = ReplicatedPair::start();
    let err = LockClient::builder(&pair.master_url())
        .replica_ack(1, Duration::ZERO)
        .build()
        .await
        .expect_err("WAIT 1 0 would block forever");
    assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");
    let err = LockClient::builder(&pair.master_url())
        .response_timeout(Duration::from_secs(1))
        .replica_ack(1, Duration::from_millis(800))
        .build()
        .await
        .expect_err("an acknowledgement timeout near the response timeout");
    assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");
}

/// Without acknowledgement a failover can lose a grant; the next grant must still carry a larger
/// fencing token, even though the promoted replica's fencing counter lagged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_increase_across_a_failover_to_a_lagging_replica() {
    let mut pair = ReplicatedPair::start();
    let old = common::client(pair.master()).await;
    let first = old.lock("fenced").acquire().await.expect("acquire");
    let t0 = first.fencing_token().await.unwrap();
    first.release().await.expect("release");
    pair.wait_for_sync();

    // The replica stops replicating (as if the link broke) and is promoted; the master grants
    // the lock once more before it dies, so that grant and its counter never reach the replica.
    let promoted = pair.replica();
    assert!(matches!(
        promoted.cmd(&["REPLICAOF", "NO", "ONE"]),
        lock_tests::Resp::Simple(_)
    ));
    let lost_grant = old.lock("fenced").acquire().await.expect("acquire");
    let t1 = lost_grant.fencing_token().await.unwrap();
    assert!(t1 > t0);
    pair.master_mut().kill();
    let promoted = pair.replica();
    assert_eq!(
        promoted.cmd(&["EXISTS", lost_grant.key()]).int(),
        Some(0),
        "the promoted replica never saw the last grant"
    );
    let new = common::client(promoted).await;
    let second =
        new.lock("fenced").try_acquire(Duration::ZERO).await.expect(
            "the promoted replica grants the lock again: the double grant fencing exists for",
        );
    assert!(
        second.fencing_token().await.unwrap() > t1,
        "the later grant must carry the larger token: {} after {t1}",
        second.fencing_token().await.unwrap()
    );
    drop(lost_grant);
}

/// Semaphores, read/write and fair locks wait for the replica too, and an unacknowledged
/// grant is rolled back with nothing left behind (no permit, hold, claim or queue place).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_family_waits_for_the_replica_and_rolls_back_without_it() {
    let mut pair = ReplicatedPair::start();
    let locks = acked_client(&pair, Duration::from_secs(30)).await;
    let permit = locks.semaphore("sem", 2).acquire().await.expect("permit");
    let read = locks.rw_lock("rw").read().acquire().await.expect("read");
    let fair = locks.fair_lock("fair").acquire().await.expect("fair");
    for key in [permit.key(), read.key(), fair.key()] {
        assert_eq!(pair.replica().cmd(&["EXISTS", key]).int(), Some(1), "{key}");
    }
    locks
        .semaphore("sem", 2)
        .set_capacity(3)
        .await
        .expect("acknowledged");
    assert_eq!(
        pair.replica().cmd(&["GET", "lock:{sem}:capacity"]).text(),
        Some("3")
    );
    for guard in [permit, read, fair] {
        guard.release().await.expect("acknowledged release");
    }

    pair.replica_mut().stop();
    let tries = [
        locks.semaphore("sem", 2).try_acquire(Duration::ZERO).await,
        locks
            .rw_lock("rw")
            .write()
            .try_acquire(Duration::ZERO)
            .await,
        locks.fair_lock("fair").try_acquire(Duration::ZERO).await,
    ];
    for result in tries {
        let err = result.expect_err("no replica can acknowledge");
        assert!(
            matches!(err, LockError::ReplicaAck { op: "acquire", .. }),
            "{err:?}"
        );
    }
    let err = locks
        .semaphore("sem", 2)
        .set_capacity(1)
        .await
        .expect_err("unacknowledged");
    assert!(matches!(err, LockError::ReplicaAck { .. }), "{err:?}");
    assert_eq!(locks.held_locks(), 0);
    let left: Vec<String> = pair
        .master()
        .keys("lock:*")
        .into_iter()
        .filter(|k| !k.ends_with(":fence") && !k.ends_with(":capacity"))
        .collect();
    assert!(left.is_empty(), "keys left behind: {left:?}");
}

/// Grants per outcome while a master's link to its only replica is black-holed (a split
/// brain: the client still reaches the master), with or without `min-replicas-to-write 1` /
/// `min-replicas-max-lag <lag>` on the master. Returns (grants accepted after the cut, time
/// from the cut to the first refusal, grants after healing). Panics if a grant follows a
/// refusal while the link is still cut.
async fn grants_while_cut_off(min_replicas_lag: Option<u64>) -> (u32, Option<Duration>, u32) {
    use lock_tests::{RedisServer, TcpProxy};
    let lag = min_replicas_lag.map(|l| l.to_string());
    let mut args = vec!["--repl-diskless-sync-delay", "0"];
    if let Some(lag) = &lag {
        args.extend([
            "--min-replicas-to-write",
            "1",
            "--min-replicas-max-lag",
            lag,
        ]);
    }
    let master = RedisServer::start_with(&args);
    let link = TcpProxy::start(([127, 0, 0, 1], master.port()).into())
        .await
        .expect("proxy");
    let link_port = link.url().rsplit(':').next().unwrap().to_owned();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &link_port]);
    common::eventually(Duration::from_secs(30), || {
        master
            .cmd(&["INFO", "replication"])
            .text()
            .is_some_and(|i| i.contains("state=online"))
            && replica
                .cmd(&["INFO", "replication"])
                .text()
                .is_some_and(|i| i.contains("master_link_status:up"))
    })
    .await
    .then_some(())
    .expect("replication up");
    let locks = common::client(&master).await;
    let lock = locks.lock("split:1");
    lock.try_acquire(Duration::ZERO)
        .await
        .expect("granted while the replica is attached")
        .release()
        .await
        .expect("release");

    let cut = Instant::now();
    link.set_black_hole(true);
    let (mut granted, mut refused_at) = (0, None);
    // Bounded: 6 s of tries, one every 20 ms.
    while cut.elapsed() < Duration::from_secs(6) {
        match lock.try_acquire(Duration::ZERO).await {
            Ok(guard) => {
                assert!(
                    refused_at.is_none(),
                    "granted after a refusal while still cut off"
                );
                granted += 1;
                let _ = guard.release().await;
            }
            Err(e) => {
                assert!(format!("{e}").contains("NOREPLICAS"), "{e:?}");
                refused_at.get_or_insert_with(|| cut.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    link.set_black_hole(false);
    link.cut_all();
    // Healed: the replica re-attaches (partial resync) and grants resume.
    let mut after = 0;
    let healed = Instant::now();
    while healed.elapsed() < Duration::from_secs(20) && after == 0 {
        if let Ok(guard) = lock.try_acquire(Duration::ZERO).await {
            after += 1;
            let _ = guard.release().await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(replica);
    (granted, refused_at, after)
}

/// Split brain, measured: a master cut off from its replica keeps granting for as long as it
/// likes without `min-replicas-to-write`; with `min-replicas-to-write 1` and
/// `min-replicas-max-lag 1` it refuses every lock write (`NOREPLICAS`, nothing changed) once
/// the replica's last acknowledgement is older than the lag, and grants again once the replica
/// is back. The figures (time to the first refusal) go into TOPOLOGIES.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_cut_off_from_its_replicas_refuses_lock_writes_with_min_replicas_to_write() {
    let (granted, refused, after) = grants_while_cut_off(None).await;
    eprintln!("no min-replicas: {granted} grants in 6 s after the cut, first refusal {refused:?}");
    assert!(refused.is_none(), "nothing refuses without min-replicas");
    assert!(granted > 0);
    assert_eq!(after, 1);

    let (granted, refused, after) = grants_while_cut_off(Some(1)).await;
    eprintln!(
        "min-replicas-to-write 1, max-lag 1: {granted} grants after the cut, first refusal after {refused:?}"
    );
    let refused = refused.expect("the cut-off master refuses lock writes");
    assert!(
        refused < Duration::from_secs(6),
        "refused while cut off: {refused:?}"
    );
    assert_eq!(after, 1, "grants resume once the replica is back");
}

/// `NOREPLICAS` is a failover symptom: a Sentinel-monitored master with
/// `min-replicas-to-write 1` that lost its replica refuses lock writes with `NOREPLICAS`, and an
/// acquisition rides that out within the failover grace (like `READONLY` from a demoted master)
/// instead of failing at once: it is still waiting while the link is cut, and is granted once
/// the replica is back.
#[cfg(feature = "sentinel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_rides_out_noreplicas_until_the_replica_is_back() {
    use lock_tests::topology::Sentinel;
    use lock_tests::{RedisServer, TcpProxy};

    let master = RedisServer::start_with(&[
        "--repl-diskless-sync-delay",
        "0",
        "--min-replicas-to-write",
        "1",
        "--min-replicas-max-lag",
        "1",
    ]);
    let link = TcpProxy::start(([127, 0, 0, 1], master.port()).into())
        .await
        .expect("proxy");
    let link_port = link.url().rsplit(':').next().unwrap().to_owned();
    let _replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &link_port]);
    let sentinel = Sentinel::start("rideout", master.port(), 1);
    let replicated = || {
        master
            .cmd(&["INFO", "replication"])
            .text()
            .is_some_and(|i| i.contains("state=online"))
            && sentinel
                .master_state("rideout")
                .is_ok_and(|m| m.get("num-slaves").is_some_and(|n| n == "1"))
    };
    assert!(
        common::eventually(Duration::from_secs(30), replicated).await,
        "replication up and known to the sentinel"
    );
    let locks = LockClient::sentinel_builder([sentinel.url()], "rideout")
        .failover_grace(Duration::from_secs(60))
        .build()
        .await
        .expect("connect through the sentinel");
    locks
        .lock("noreplicas:1")
        .try_acquire(Duration::ZERO)
        .await
        .expect("granted while the replica is attached")
        .release()
        .await
        .expect("release");

    // Cut the replica off until the master refuses writes.
    link.set_black_hole(true);
    let refuses = || {
        master
            .try_cmd(&["SET", "probe", "1"])
            .is_ok_and(|r| matches!(r, lock_tests::Resp::Error(e) if e.starts_with("NOREPLICAS")))
    };
    assert!(
        common::eventually(Duration::from_secs(30), refuses).await,
        "the cut-off master refuses writes"
    );
    let waiting = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .lock("noreplicas:1")
                .acquire_with(lock_runtime::LockOptions::new().wait(Duration::from_secs(60)))
                .await
        }
    });
    // Still cut off: the acquisition is still trying (before the fix it had already returned
    // the NOREPLICAS error, within a few milliseconds).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(refuses(), "still refusing writes");
    assert!(
        !waiting.is_finished(),
        "the acquisition ended while the master refused writes: {:?}",
        waiting.await
    );
    link.set_black_hole(false);
    link.cut_all();
    let guard = waiting
        .await
        .expect("task")
        .expect("granted once the replica is back");
    guard.release().await.expect("release");
}

/// Writes of many tasks at once share their `WAIT`s: the writes that queue while one `WAIT` is
/// out go together, followed by one `WAIT` for all of them, so the replica round trip is paid
/// once per group, not once per write. Every grant is still on the replica when it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_share_one_wait_per_group() {
    let pair = ReplicatedPair::start();
    let locks = acked_client(&pair, Duration::from_secs(30)).await;
    pair.master().cmd(&["CONFIG", "RESETSTAT"]);
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let locks = locks.clone();
            tokio::spawn(async move {
                for round in 0..10 {
                    let guard = locks
                        .lock(format!("shared-wait:{i}"))
                        .acquire()
                        .await
                        .expect("acknowledged acquire");
                    assert!(
                        guard.issued_token().is_none(),
                        "round {round}: no token asked"
                    );
                    guard.release().await.expect("acknowledged release");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let stats = pair.master().cmd(&["INFO", "commandstats"]);
    let calls = |command: &str| -> u64 {
        let text = stats.text().unwrap_or_default();
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let writes = calls("set") + calls("fcall") + calls("evalsha");
    let waits = calls("wait");
    assert!(
        writes >= 640,
        "{writes} writes for 320 acquire/release pairs"
    );
    assert!(
        waits < writes / 2,
        "{waits} WAITs for {writes} writes: each write waited on its own"
    );
}
