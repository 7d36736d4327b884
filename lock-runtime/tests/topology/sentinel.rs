//! Redis Sentinel (feature `sentinel`): 1 master + 1 replica + 3 sentinels, a failover while
//! locks are held and waiters wait.
#![cfg(feature = "sentinel")]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError};
use lock_tests::topology::SentinelGroup;

/// How long the failover tests' clients ride out a failover, and their waiters wait.
const FAILOVER_WAIT: Duration = Duration::from_secs(120);

async fn sentinel_client(group: &SentinelGroup, watchdog: Duration) -> LockClient {
    // Rides out the failover however long the sentinels take: on a loaded machine their
    // elections can fail and be tried again (`failover-timeout` apart), and one took 35 s.
    LockClient::sentinel_builder(group.sentinel_urls(), group.master_name())
        .watchdog_timeout(watchdog)
        .failover_grace(FAILOVER_WAIT)
        .build()
        .await
        .expect("connect through the sentinels")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_recover_after_a_master_failover() {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .with_test_writer()
        .try_init();
    let t = Instant::now();
    let mut group = SentinelGroup::start(3);
    eprintln!("sentinel group up in {:?}", t.elapsed());
    let old_master = group.current_master_port();

    let holder = sentinel_client(&group, Duration::from_secs(10)).await;
    let waiters = sentinel_client(&group, Duration::from_secs(10)).await;
    let guard = holder.lock("order:7").acquire().await.expect("hold");
    let key = guard.key().to_owned();
    assert_eq!(
        group.server(old_master).cmd(&["EXISTS", &key]).int(),
        Some(1),
        "the lock lives on the master the sentinels named"
    );

    // Three waiters, each takes the lock once after the failover.
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let (waiters, inside) = (waiters.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            let guard = waiters
                .lock("order:7")
                .try_acquire(FAILOVER_WAIT)
                .await
                .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
            tokio::time::sleep(Duration::from_millis(20)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            guard.release().await.expect("release");
            Instant::now()
        }));
    }
    assert!(
        common::eventually(Duration::from_secs(3), || waiters.subscribed_channels()
            == 1)
        .await,
        "waiters never subscribed"
    );

    let t = Instant::now();
    let killed = group.kill_master();
    assert_eq!(killed, old_master);
    let new_master = group.wait_for_failover(killed);
    eprintln!("failover to port {new_master} in {:?}", t.elapsed());
    assert_ne!(new_master, old_master);
    // The old master comes back at once, empty (no persistence), and says it is a master
    // until the sentinels demote it: clients must not be fooled into using it.
    group.server_mut(killed).restart();

    // The holder either kept the lock (renewals moved to the new master) or was told it lost
    // it; no waiter may have it meanwhile.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let lost = guard.is_lost();
    assert!(
        lost || inside.load(Ordering::SeqCst) == 0,
        "silent double hold after the failover"
    );
    let released = Instant::now();
    let release = guard.release().await;
    eprintln!("holder lost = {lost}, release = {release:?}");
    if !lost {
        release.expect("a lock kept across the failover releases cleanly");
    }

    let mut done = Vec::new();
    for task in tasks {
        done.push(task.await.expect("waiter"));
    }
    done.sort();
    eprintln!(
        "waiters done {:?} after the release",
        done.iter()
            .map(|d| d.saturating_duration_since(released))
            .collect::<Vec<_>>()
    );
    // Woken by unlock messages on the new master, not by lease expiry (10 s).
    let last = done
        .last()
        .expect("three waiters")
        .saturating_duration_since(released);
    assert!(
        last < Duration::from_secs(5),
        "waiters recovered only after {last:?}"
    );
    assert!(
        common::eventually(Duration::from_secs(3), || {
            group.server(new_master).keys("lock:{order:7}").is_empty()
        })
        .await
    );

    // Fresh locks go to the new master.
    let fresh = holder
        .lock("order:8")
        .try_acquire(Duration::from_secs(10))
        .await
        .expect("lock on the new master");
    assert_eq!(
        group.server(new_master).cmd(&["EXISTS", fresh.key()]).int(),
        Some(1)
    );
    fresh.release().await.expect("release");
}

/// An explicit release sent while the master does not answer (frozen for less than the
/// sentinels' `down-after`, so nobody fails it over) rides the outage out: after its first
/// timeout the client stops trusting the master until the sentinels and the master confirm it,
/// and the release is tried again (same owner id) until then, instead of failing with "not
/// confirmed" while the lock stays held.
///
/// The outcome is `Ok(())` when the timed-out request had no effect, and
/// `ReleaseUnconfirmed` when it ran once the master answered again (the retry then finds the
/// lock no longer ours, which a restart without persistence would look like too): on Valkey 9
/// the first request is a `DELIFEQ`, which runs; elsewhere it is the release function, which
/// here finds its library not loaded yet (the grant was a plain `SET`) and does nothing. Both
/// leave nothing held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_release_rides_out_a_master_that_stops_answering() {
    let group = SentinelGroup::start(3);
    let locks = LockClient::sentinel_builder(group.sentinel_urls(), group.master_name())
        .watchdog_timeout(Duration::from_secs(10))
        .response_timeout(Duration::from_millis(200))
        .failover_grace(Duration::from_secs(30))
        .build()
        .await
        .expect("connect through the sentinels");
    let guard = locks.lock("order:9").acquire().await.expect("hold");
    let key = guard.key().to_owned();
    let master = group.server(group.current_master_port());
    master.freeze();
    let release = tokio::spawn(guard.release());
    // Time for the release to time out and for the master to be found unconfirmed.
    tokio::time::sleep(Duration::from_millis(600)).await;
    master.thaw();
    let outcome = release.await.expect("the release task");
    assert!(
        matches!(outcome, Ok(()) | Err(LockError::ReleaseUnconfirmed { .. })),
        "{outcome:?}"
    );
    // Gone on the master of the moment (the same one, unless the machine was slow enough for
    // the sentinels to fail it over meanwhile).
    assert!(
        common::eventually(Duration::from_secs(5), || {
            group.current_master().cmd(&["EXISTS", &key]).int() == Some(0)
        })
        .await,
        "the lock is still held"
    );
}

/// A semaphore, a read/write lock and a fair lock held and waited for across a master failover:
/// the waiters follow the new master and get their turn once the holders let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_family_follows_a_master_failover() {
    let mut group = SentinelGroup::start(3);
    let holder = sentinel_client(&group, Duration::from_secs(10)).await;
    let waiters = sentinel_client(&group, Duration::from_secs(10)).await;
    let permit = holder.semaphore("sem", 1).acquire().await.expect("permit");
    let reader = holder.rw_lock("rw").read().acquire().await.expect("read");
    let fair = holder.fair_lock("fair").acquire().await.expect("fair");
    let wait = Duration::from_secs(40);
    let tasks = vec![
        tokio::spawn({
            let sem = waiters.semaphore("sem", 1);
            async move { sem.try_acquire(wait).await }
        }),
        tokio::spawn({
            let rw = waiters.rw_lock("rw");
            async move { rw.write().try_acquire(wait).await }
        }),
        tokio::spawn({
            let lock = waiters.fair_lock("fair");
            async move { lock.try_acquire(wait).await }
        }),
    ];
    assert!(
        common::eventually(Duration::from_secs(3), || waiters.subscribed_channels()
            == 3)
        .await,
        "waiters never subscribed"
    );
    let killed = group.kill_master();
    group.wait_for_failover(killed);
    group.server_mut(killed).restart();
    tokio::time::sleep(Duration::from_secs(1)).await;
    for guard in [permit, reader, fair] {
        // Kept across the failover (renewed on the new master) or reported lost: either way
        // it lets go.
        let lost = guard.is_lost();
        let release = guard.release().await;
        assert!(lost || release.is_ok(), "{release:?}");
    }
    // "The master" from here on is the one the sentinels name at the time of each look: the
    // new one, or, if a starved machine made them fail over once more, the next.
    for task in tasks {
        let guard = task
            .await
            .expect("waiter")
            .expect("the waiter got its turn");
        // Held on the master, or (granted on the restarted old master before the sentinels
        // demoted it, or lost in a second failover) told of the loss before its lease (10 s)
        // ends: never silently stale.
        let held = || group.current_master().cmd(&["EXISTS", guard.key()]).int() == Some(1);
        if !held() {
            let told = tokio::time::timeout(Duration::from_secs(20), guard.lost())
                .await
                .is_ok();
            assert!(
                told || held(),
                "{}: held nowhere and not told; {}",
                guard.key(),
                group.describe()
            );
        }
        let _ = guard.release().await;
    }
    // Once the dust settles, every primitive is taken on the master.
    let fresh = [
        waiters.semaphore("sem", 1).try_acquire(wait).await,
        waiters.rw_lock("rw").write().try_acquire(wait).await,
        waiters.fair_lock("fair").try_acquire(wait).await,
    ];
    for guard in fresh {
        let guard = guard.expect("taken after the failover");
        assert!(!guard.is_lost());
        assert_eq!(
            group.current_master().cmd(&["EXISTS", guard.key()]).int(),
            Some(1),
            "{} is held on the master; {}",
            guard.key(),
            group.describe()
        );
        guard.release().await.expect("release");
    }
    // A hold lost in the switch ends with its lease (10 s) at the latest.
    assert!(
        common::eventually(Duration::from_secs(12), || {
            group
                .current_master()
                .keys("lock:*")
                .iter()
                .all(|k| k.ends_with(":fence"))
        })
        .await,
        "{:?}",
        group.current_master().keys("lock:*")
    );
}

/// The sentinels' `config-epoch` for the master, as the first running sentinel reports it.
fn config_epoch(group: &SentinelGroup) -> u64 {
    let state = (group.sentinels().iter())
        .find(|s| s.is_running())
        .expect("a sentinel")
        .master_state(group.master_name())
        .expect("SENTINEL MASTER");
    state["config-epoch"].parse().expect("a config-epoch")
}

/// Fenced tokens behind Sentinel are ordered by the master's failover epoch first ("Fencing
/// epochs" in `script/prelude.lua`; the scripts' side is `core::epochs`): a grant's token, and
/// a token on demand, carry the epoch the sentinels report for the master that issued it
/// (`2^52 + epoch × 2^34 + µs since 2026`), so a failover raises them by the span of the epochs
/// it took, whatever the new master's clock. A grant asked for while the master is down is
/// built for the master the client then confirms, never sent to it with the epoch of the one
/// before (which a replica promoted with a lagging counter and its clock behind would turn into
/// a token below ones already issued: what the clock-skew failover suite found).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_tokens_follow_the_failover_epoch() {
    // The epoch a token carries, read with this machine's clock (the servers share it): within
    // a few seconds of a whole number, against a span of 4.8 hours.
    let epoch_of = |token: u64| {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("a clock after 1970")
            .as_micros() as f64
            - 1_767_225_600_000_000.0;
        (token as f64 - (1u64 << 52) as f64 - since) / (1u64 << 34) as f64
    };
    let mut group = SentinelGroup::start(3);
    let locks = sentinel_client(&group, Duration::from_secs(10)).await;
    let before = config_epoch(&group);
    let carries = |group: &SentinelGroup, token: u64, epoch: u64, what: &str| {
        assert!(
            (epoch_of(token) - epoch as f64).abs() < 0.01,
            "{what}: {token} carries epoch {}, not {epoch}; {}",
            epoch_of(token),
            group.describe()
        );
    };
    let guard = locks.lock("fenced").fenced().acquire().await.expect("hold");
    let granted = guard.issued_token().expect("a fenced grant's token");
    carries(&group, granted, before, "granted before the failover");
    guard.release().await.expect("release");
    let killed = group.kill_master();
    // Asked while the master is down: built once the client knows the new master, for it.
    let during = tokio::spawn({
        let lock = locks.lock("fenced-during").fenced();
        async move { lock.try_acquire(FAILOVER_WAIT).await }
    });
    group.wait_for_failover(killed);
    let after = config_epoch(&group);
    assert!(after > before, "a failover from epoch {before} to {after}");
    let during = during
        .await
        .expect("the task")
        .expect("granted after the failover");
    let token = during.issued_token().expect("a fenced grant's token");
    carries(&group, token, after, "asked during the failover");
    during.release().await.expect("release");
    let guard = locks
        .lock("fenced")
        .try_acquire(FAILOVER_WAIT)
        .await
        .expect("hold after the failover");
    let on_demand = guard.fencing_token().await.expect("a token on demand");
    carries(&group, on_demand, after, "on demand after the failover");
    assert!(on_demand > granted);
    guard.release().await.expect("release");
}

/// No token is issued without the master's epoch: until a sentinel's answer names the master
/// with its `config-epoch`, a call that would issue a token waits for one (up to the response
/// timeout, then ridden out as a failover) instead of going out ordered by the clock alone,
/// below every token of an epoch (a new master whose counter lagged would then issue one below
/// what its deposed predecessor issued last: what a loaded failover run found). The sentinels
/// here refuse `SENTINEL MASTER` (an ACL) while still naming the master (`SENTINEL MASTERS`),
/// so the client knows the master and not its epoch: locks without a token work, tokens wait;
/// once the sentinels answer again, tokens carry the epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_is_issued_before_the_sentinels_confirm_the_epoch() {
    let group = SentinelGroup::start(3);
    let refuse = |allow: bool| {
        let rule = if allow {
            "+sentinel|master"
        } else {
            "-sentinel|master"
        };
        for sentinel in group.sentinels() {
            sentinel.cmd(&["ACL", "SETUSER", "default", rule]);
        }
    };
    refuse(false);
    let locks = LockClient::sentinel_builder(group.sentinel_urls(), group.master_name())
        .response_timeout(Duration::from_millis(500))
        .failover_grace(Duration::from_secs(1))
        .build()
        .await
        .expect("the master is named without SENTINEL MASTER");

    let plain = locks
        .lock("unfenced")
        .try_acquire(Duration::from_secs(5))
        .await
        .expect("a lock without a token needs no epoch");
    let refused = plain
        .fencing_token()
        .await
        .expect_err("a token needs the epoch");
    assert!(
        refused.to_string().contains("epoch"),
        "the error names what is missing: {refused}"
    );
    assert!(
        !plain.is_lost(),
        "a token refused unsent costs the hold nothing"
    );
    let fenced = locks
        .lock("fenced")
        .fenced()
        .try_acquire(Duration::from_secs(3))
        .await;
    assert!(
        fenced.is_err(),
        "a fenced grant went out without the epoch: {:?}",
        fenced.map(|g| g.issued_token())
    );
    assert!(
        group.current_master().keys("lock:fenced*").is_empty(),
        "nothing was written for the refused grant: {:?}",
        group.current_master().keys("lock:*")
    );

    refuse(true);
    let epoch = config_epoch(&group);
    let token = plain
        .fencing_token()
        .await
        .expect("a token once the epoch is known");
    let floor = (1u64 << 52) + (epoch << 34);
    assert!(token > floor, "{token} is not ordered by epoch {epoch}");
    let fenced = locks
        .lock("fenced")
        .fenced()
        .try_acquire(Duration::from_secs(3))
        .await
        .expect("a fenced grant once the epoch is known");
    assert!(fenced.issued_token().expect("its token") > floor);
    fenced.release().await.expect("release");
    plain.release().await.expect("release");
}

#[tokio::test]
async fn bad_sentinel_settings_are_typed_errors() {
    let empty: [&str; 0] = [];
    let err = LockClient::sentinel_builder(empty, "mymaster")
        .build()
        .await
        .expect_err("no sentinels");
    assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");

    let port = lock_tests::free_port();
    let err = LockClient::sentinel_builder([format!("redis://127.0.0.1:{port}")], "mymaster")
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect_err("nobody listens there");
    assert!(err.is_unavailable(), "{err:?}");

    let err = LockClient::builder(&format!("redis://127.0.0.1:{port}"))
        .master_credentials(None, "secret")
        .build()
        .await
        .expect_err("credentials for a Sentinel master on a single-server client");
    assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");
}

/// A grant the old master took with it is reported at once after the switch, not at the next
/// scheduled renewal (a third of the 60 s lease after the grant).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_lost_in_the_failover_is_reported_right_after_the_switch() {
    let mut group = SentinelGroup::start(3);
    let holder = sentinel_client(&group, Duration::from_secs(60)).await;
    let guard = holder.lock("order:9").acquire().await.expect("hold");
    let key = guard.key().to_owned();
    let killed_at = Instant::now();
    let old = group.kill_master();
    let new = group.wait_for_failover(old);
    let failed_over = Instant::now();
    // As if the grant had not reached the replica before the master died.
    group.server(new).cmd(&["DEL", &key]);
    // The client notices the new master within its 1 s check and renews at once; the next
    // scheduled renewal would only come 20 s after the grant.
    let lost = tokio::time::timeout_at((failed_over + Duration::from_secs(5)).into(), guard.lost())
        .await
        .expect("reported within 5 s of the failover, well before the next scheduled renewal");
    eprintln!(
        "failover took {:?}; lost {:?} after it: {lost}",
        failed_over - killed_at,
        failed_over.elapsed()
    );
    assert!(lost.is_lost(), "{lost:?}");
}

/// `run_id` of a data server (`INFO server`).
fn run_id(server: &lock_tests::RedisServer) -> String {
    let info = server.cmd(&["INFO", "server"]);
    let text = info.text().unwrap_or_default().to_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
        .unwrap_or_else(|| panic!("no run_id in {text:?}"))
}

/// The master killed with `SIGKILL` and restarted at once, empty, at the same address (redis'
/// connection manager reconnects there by itself): nothing is granted on it until the
/// sentinels have seen the restart (their `runid` is the new one) or replaced it. Before, the
/// client granted on it as soon as it reconnected, while the holder of the lost grant still
/// held it, until its periodic question to the sentinels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_empty_is_not_granted_on_before_the_sentinels_see_it() {
    let mut group = SentinelGroup::start(3);
    let holder = sentinel_client(&group, Duration::from_secs(10)).await;
    let rival = sentinel_client(&group, Duration::from_secs(10)).await;
    let guard = holder.lock("restart:1").acquire().await.expect("hold");
    let master = group.current_master_port();
    let before = run_id(group.server(master));

    let restarted_at = Instant::now();
    group.server_mut(master).kill();
    group.server_mut(master).restart();
    let after = run_id(group.server(master));
    assert_ne!(before, after, "a restarted server has a new run id");

    // A client that first connects now (a new pod, `lockctl`) never saw the old run id: it
    // must not trust the master before the sentinels have seen the restart either.
    let late = sentinel_client(&group, Duration::from_secs(10)).await;
    let late_guard = late
        .lock("restart:2")
        .try_acquire(FAILOVER_WAIT)
        .await
        .expect("granted once the sentinels know the restarted master (or another one)");
    let late_master = group.current_master_port();
    let late_node = run_id(group.server(late_master));
    let late_views = sentinels_run_ids(&group);
    assert!(
        late_views.contains(&late_node),
        "a client connected after the restart was granted on a master no sentinel knew as it \
         is now ({late_node}; sentinels: {late_views:?})"
    );
    late_guard.release().await.expect("release");

    let rival_guard = rival
        .lock("restart:1")
        .try_acquire(FAILOVER_WAIT)
        .await
        .expect("granted once the sentinels know the restarted master (or another one)");
    let granted_after = restarted_at.elapsed();
    // Where it was granted: the master the sentinels name now; their view of it must already
    // be the server that holds the grant (its run id), not the one from before the restart.
    let now_master = group.current_master_port();
    let server = group.server(now_master);
    assert_eq!(
        server.cmd(&["EXISTS", rival_guard.key()]).int(),
        Some(1),
        "granted on the master the sentinels name"
    );
    let sentinel_runids = sentinels_run_ids(&group);
    let node = run_id(server);
    eprintln!(
        "granted {granted_after:?} after the restart on port {now_master} (started on {master}); \
         sentinels' run ids {sentinel_runids:?}, the node's {node}, before the restart {before}"
    );
    assert!(
        sentinel_runids.contains(&node),
        "granted on a master no sentinel knew as it is now: a restarted (empty) master was \
         used before the sentinels saw it"
    );
    // The holder's grant went with the restart: it is told so.
    let lost = tokio::time::timeout(Duration::from_secs(20), guard.lost())
        .await
        .expect("the holder is told its grant is gone");
    assert!(lost.is_lost(), "{lost:?}");
    rival_guard.release().await.expect("release");
}

/// The run id each sentinel last saw at the master (`SENTINEL MASTER`'s `runid`; empty before
/// its first look).
fn sentinels_run_ids(group: &SentinelGroup) -> Vec<String> {
    group
        .sentinels()
        .iter()
        .map(|s| {
            s.master_state(group.master_name())
                .expect("sentinel state")
                .get("runid")
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

#[tokio::test]
async fn sentinel_recheck_is_validated_and_only_for_sentinel_clients() {
    let err = LockClient::builder("redis://127.0.0.1:1")
        .sentinel_recheck(Duration::from_millis(100))
        .build()
        .await
        .expect_err("not a Sentinel client");
    assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");
    let err = LockClient::sentinel_builder(["redis://127.0.0.1:1"], "mymaster")
        .sentinel_recheck(Duration::from_millis(1))
        .build()
        .await
        .expect_err("too short");
    assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");
}
