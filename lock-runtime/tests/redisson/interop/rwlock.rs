//! The read/write lock in `Layout::Redisson`: Redisson's `RReadWriteLock`, shared with real
//! Redisson (3.x and 4.x) through the driver's read/write commands (`RwCommands.java`), plus a
//! JVM-free check of the bytes our client leaves on Redis (`redisson-wire.md` §4).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lock_runtime::{HoldMode, LockError, LockGuard, LockKind, LossReason};
use lock_tests::redisson::REDISSON_VERSIONS;
use lock_tests::{RedisServer, Redisson, mono_ns};

use super::{connect, ms, never_lose_an_increment, ok_ns, rust_client, start_javas};

/// A Java read/write command's reply (`ok <nanos>`, `busy`, `err …`).
async fn java(java: &Redisson, command: &str) -> String {
    java.call(command).await
}

/// Whether Java's `tryLock` with no wait got the lock.
async fn java_gets(java_: &Redisson, side: char, worker: &str, name: &str) -> bool {
    let reply = java(java_, &format!("try{side}lock {worker} {name} 0 -1")).await;
    assert!(reply == "busy" || reply.starts_with("ok "), "{reply}");
    reply != "busy"
}

/// The hash `key` as a map.
fn hash(redis: &RedisServer, key: &str) -> HashMap<String, String> {
    let reply = redis.cmd(&["HGETALL", key]);
    let items = reply.items();
    items
        .chunks(2)
        .map(|kv| {
            (
                kv[0].text().unwrap().to_owned(),
                kv[1].text().unwrap().to_owned(),
            )
        })
        .collect()
}

fn pttl(redis: &RedisServer, key: &str) -> i64 {
    redis.cmd(&["PTTL", key]).int().unwrap()
}

/// A reader's timeout key of hold 1, as Redisson names it.
fn timeout_key(name: &str, owner: &str) -> String {
    if name.contains('{') {
        format!("{name}:{owner}:rwlock_timeout:1")
    } else {
        format!("{{{name}}}:{owner}:rwlock_timeout:1")
    }
}

fn is_busy<T: std::fmt::Debug>(result: Result<T, LockError>) -> bool {
    match result {
        Err(e) => e.is_busy(),
        Ok(held) => panic!("got a lock that should be busy: {held:?}"),
    }
}

/// The first message on `channel` within 2 s, read on a plain pub/sub connection.
struct Listener {
    stream: redis::aio::PubSubStream,
    _sink: redis::aio::PubSubSink,
}

impl Listener {
    async fn on(redis: &RedisServer, channel: &str) -> Listener {
        let client = redis::Client::open(redis.url()).unwrap();
        let (mut sink, stream) = client.get_async_pubsub().await.unwrap().split();
        sink.subscribe(channel).await.unwrap();
        Listener {
            stream,
            _sink: sink,
        }
    }

    async fn next(&mut self) -> String {
        let msg = tokio::time::timeout(
            Duration::from_secs(2),
            futures_util::StreamExt::next(&mut self.stream),
        )
        .await
        .expect("a message within 2 s")
        .unwrap();
        msg.get_payload::<String>().unwrap()
    }

    async fn nothing_within(&mut self, wait: Duration) -> bool {
        tokio::time::timeout(wait, futures_util::StreamExt::next(&mut self.stream))
            .await
            .is_err()
    }
}

/// Without a JVM: our reader writes Redisson's hash, field, timeout key and TTLs, renews its
/// timeout key, and each release publishes what Java listens for; a writer's field ends in
/// `:write`; `info` leaves `mode` out; foreign data is refused untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rw_bytes_on_redis_are_redissons() {
    let redis = RedisServer::start();
    let lease = Duration::from_millis(900);
    let locks = rust_client(&redis.url(), lease).await;
    let rw = locks.rw_lock("stock:7");
    let mut channel = Listener::on(&redis, "redisson_rwlock:{stock:7}").await;

    let r1 = rw.read().acquire().await.unwrap();
    let owner = r1.owner().to_owned();
    let (client, n) = owner.rsplit_once(':').unwrap();
    assert_eq!(
        client,
        locks.id(),
        "a reader's field is `<client uuid>:<n>`"
    );
    assert!(n.parse::<u64>().is_ok(), "{owner}");
    assert_eq!(
        hash(&redis, "stock:7"),
        HashMap::from([("mode".into(), "read".into()), (owner.clone(), "1".into())])
    );
    let t1 = timeout_key("stock:7", &owner);
    assert_eq!(redis.cmd(&["GET", &t1]).text(), Some("1"));
    for key in ["stock:7", t1.as_str()] {
        let left = pttl(&redis, key);
        assert!(left > 0 && left <= 900, "{key}: {left}");
    }
    let token = redis.cmd(&["GET", "redisson_lock_token:{stock:7}"]);
    assert_eq!(
        token.text(),
        Some(r1.fencing_token().await.unwrap().to_string().as_str())
    );
    assert_eq!(pttl(&redis, "redisson_lock_token:{stock:7}"), -1);

    // The watchdog renews the timeout key with the hash, past two leases.
    tokio::time::sleep(lease * 2).await;
    assert!(!r1.is_lost());
    let left = pttl(&redis, &t1);
    assert!(left > 0 && left <= 900, "renewed: {left}");

    // A second reader shares; a writer waits; `info` lists the readers, not `mode`.
    let r2 = rw.read().try_acquire(Duration::ZERO).await.unwrap();
    assert!(r2.fencing_token().await.unwrap() > r1.fencing_token().await.unwrap());
    assert!(is_busy(rw.write().try_acquire(Duration::ZERO).await));
    let info = rw.read().info().await.unwrap().expect("held");
    assert_eq!(info.kind, LockKind::ReadWrite);
    assert_eq!(info.holder_count, 2);
    let mut holders: Vec<_> = info.holders.iter().map(|h| h.owner.as_str()).collect();
    holders.sort_unstable();
    let mut expected = [r1.owner(), r2.owner()];
    expected.sort_unstable();
    assert_eq!(holders, expected);
    for h in &info.holders {
        assert_eq!(h.mode, HoldMode::Read);
        assert_eq!(h.client_id(), Some(locks.id()));
        assert!(h.remaining.is_some_and(|r| r <= lease), "{h:?}");
    }

    // Through a mutex handle of the name too (`lockctl --redisson` reads locks that way).
    let seen = locks.lock("stock:7").info().await.unwrap().expect("held");
    assert_eq!((seen.kind, seen.holder_count), (LockKind::ReadWrite, 2));
    assert!(
        seen.holders
            .iter()
            .all(|h| h.owner != "mode" && h.mode == HoldMode::Read)
    );

    // Releasing one reader keeps the lock (no message); the last one frees it with `0`.
    r1.release().await.unwrap();
    assert_eq!(redis.cmd(&["EXISTS", &t1]).int(), Some(0));
    assert_eq!(redis.cmd(&["HGET", "stock:7", "mode"]).text(), Some("read"));
    assert!(channel.nothing_within(Duration::from_millis(100)).await);
    r2.release().await.unwrap();
    assert_eq!(
        channel.next().await,
        "0",
        "a read unlock that frees the lock"
    );
    assert_eq!(redis.cmd(&["EXISTS", "stock:7"]).int(), Some(0));

    // A writer: `<client uuid>:<n>:write`, mode write, no timeout key; release publishes `1`.
    let w = rw.write().acquire().await.unwrap();
    assert!(w.owner().ends_with(":write"), "{}", w.owner());
    assert_eq!(
        hash(&redis, "stock:7"),
        HashMap::from([
            ("mode".into(), "write".into()),
            (w.owner().to_owned(), "1".into())
        ])
    );
    assert!(redis.keys("*rwlock_timeout*").is_empty());
    let info = rw.write().info().await.unwrap().expect("held");
    assert_eq!(
        (info.holders[0].mode, info.holders[0].client_id()),
        (HoldMode::Write, Some(locks.id()))
    );
    // The scope rules: a read in the writer's scope re-enters; a write in a reader's does not.
    let nested = w
        .scope(async { rw.read().try_acquire(Duration::ZERO).await })
        .await
        .unwrap();
    assert!(nested.is_reentrant());
    drop(nested);
    w.release().await.unwrap();
    assert_eq!(channel.next().await, "1", "a write unlock");
    let r = rw.read().acquire().await.unwrap();
    let upgrade = r
        .scope(async { rw.write().try_acquire(Duration::ZERO).await })
        .await;
    assert!(
        matches!(upgrade, Err(LockError::WouldDeadlock { .. })),
        "{upgrade:?}"
    );

    // Our force unlock deletes it whatever the mode and publishes `1`; the reader learns it.
    assert!(rw.write().force_unlock().await.unwrap());
    assert_eq!(channel.next().await, "1");
    let lost = tokio::time::timeout(Duration::from_secs(3), r.lost())
        .await
        .expect("the watchdog notices");
    assert_eq!(lock_tests::loss_reason(&lost), Some(LossReason::Deleted));
    drop(r);

    // A name with its own hash tag: no braces added around it.
    let tagged = locks.rw_lock("order:{u7}");
    let r = tagged.read().acquire().await.unwrap();
    let key = timeout_key("order:{u7}", r.owner());
    assert!(key.starts_with("order:{u7}:"));
    assert_eq!(redis.cmd(&["GET", &key]).text(), Some("1"));
    let waiter = {
        let tagged = tagged.clone();
        tokio::spawn(async move { tagged.write().try_acquire(Duration::from_secs(5)).await })
    };
    let subscribed = lock_tests::eventually(Duration::from_secs(2), || {
        redis.pubsub_channels("redisson_rwlock:order*") == ["redisson_rwlock:order:{u7}"]
    })
    .await;
    assert!(subscribed, "{:?}", redis.pubsub_channels("*"));
    r.release().await.unwrap();
    let w = lock_tests::granted(waiter).await;
    w.release().await.unwrap();

    // A waiter that is cancelled leaves nothing behind: no key, no field, no subscription.
    let r = tagged.read().acquire().await.unwrap();
    let waiter = {
        let tagged = tagged.clone();
        tokio::spawn(async move { tagged.write().acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    waiter.abort();
    let _ = waiter.await;
    let unsubscribed = lock_tests::eventually(Duration::from_secs(2), || {
        redis.pubsub_channels("redisson_rwlock:order*").is_empty()
    })
    .await;
    assert!(unsubscribed, "{:?}", redis.pubsub_channels("*"));
    assert_eq!(
        hash(&redis, "order:{u7}"),
        HashMap::from([
            ("mode".into(), "read".into()),
            (r.owner().to_owned(), "1".into())
        ])
    );
    r.release().await.unwrap();
    assert_eq!(redis.cmd(&["EXISTS", "order:{u7}"]).int(), Some(0));

    // Foreign data: an RLock's hash (no `mode`) and a string are refused, untouched.
    redis.cmd(&["HSET", "mutexy", "someone:1", "1"]);
    redis.cmd(&["SET", "stringy", "x"]);
    for (name, found) in [("mutexy", "hash"), ("stringy", "string")] {
        for side in [
            locks.rw_lock(name).read().clone(),
            locks.rw_lock(name).write().clone(),
        ] {
            match side.try_acquire(Duration::ZERO).await {
                Err(LockError::ForeignData { found: f, .. }) => assert_eq!(f, found),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
    assert_eq!(hash(&redis, "mutexy").len(), 1);
    assert!(locks.rw_lock("a{b").read().acquire().await.is_err());
}

/// Java and Rust readers read together; a writer of either side excludes the other side's
/// readers and writers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_rust_readers_share_and_writers_exclude() {
    let redis = RedisServer::start();
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    for version in REDISSON_VERSIONS {
        let j = Redisson::start(version, &redis.url(), Duration::from_secs(30));
        let name = format!("shelf:{version}");
        let rw = rust.rw_lock(&name);

        // A Java reader and a Rust reader at once; writers of both sides wait.
        ok_ns(&java(&j, &format!("rlock w1 {name} -1")).await);
        let reader = rw.read().try_acquire(Duration::ZERO).await.unwrap();
        assert!(is_busy(rw.write().try_acquire(Duration::ZERO).await));
        assert!(!java_gets(&j, 'w', "w2", &name).await, "{version}");
        let info = rw.read().info().await.unwrap().expect("held");
        assert_eq!(info.holder_count, 2, "{info:?}");
        assert!(info.holders.iter().all(|h| h.mode == HoldMode::Read));
        assert!(
            info.holders
                .iter()
                .any(|h| h.client_id() != Some(rust.id()))
        );
        assert_eq!(java(&j, &format!("rlocked w1 {name}")).await, "ok true");
        ok_ns(&java(&j, &format!("runlock w1 {name}")).await);
        reader.release().await.unwrap();
        assert_eq!(redis.cmd(&["EXISTS", &name]).int(), Some(0));

        // A Java writer excludes Rust readers and writers.
        ok_ns(&java(&j, &format!("wlock w1 {name} -1")).await);
        assert!(is_busy(rw.read().try_acquire(Duration::ZERO).await));
        assert!(is_busy(rw.write().try_acquire(Duration::ZERO).await));
        let info = rw.write().info().await.unwrap().expect("held");
        assert_eq!(info.holders[0].mode, HoldMode::Write, "{info:?}");
        ok_ns(&java(&j, &format!("wunlock w1 {name}")).await);

        // A Rust writer excludes Java readers and writers.
        let writer = rw.write().try_acquire(Duration::ZERO).await.unwrap();
        assert!(!java_gets(&j, 'r', "w2", &name).await, "{version}");
        assert!(!java_gets(&j, 'w', "w2", &name).await, "{version}");
        assert_eq!(java(&j, &format!("wlocked w1 {name}")).await, "ok true");
        writer.release().await.unwrap();
        assert!(java_gets(&j, 'r', "w2", &name).await, "{version}");
        ok_ns(&java(&j, &format!("runlock w2 {name}")).await);
    }
}

/// Spawns a Rust task that waits up to 20 s for `lock`; returns when it got it and its guard.
fn waiting(
    lock: lock_runtime::Lock,
) -> tokio::task::JoinHandle<(u64, Result<LockGuard, LockError>)> {
    super::timed(async move { lock.try_acquire(Duration::from_secs(20)).await })
}

/// The delay from `since` to each waiter's grant, all of which must come within 2 s (every
/// lease is 30 s: only an unlock message explains it); the longest, and the guards.
async fn all_granted(
    waiters: Vec<tokio::task::JoinHandle<(u64, Result<LockGuard, LockError>)>>,
    since: u64,
    what: &str,
) -> (u64, Vec<LockGuard>) {
    let mut longest = 0;
    let mut guards = Vec::new();
    for waiter in waiters {
        let (at, guard) = waiter.await.unwrap();
        guards.push(guard.unwrap_or_else(|e| panic!("{what}: {e}")));
        longest = longest.max(at.saturating_sub(since));
    }
    assert!(longest < 2_000_000_000, "{what}: {} ms", ms(longest));
    (longest, guards)
}

/// The Java reply `ticket` is `ok <nanos>` within 2 s of `since`; the delay.
async fn java_granted(ticket: lock_tests::redisson::Ticket, since: u64, what: &str) -> u64 {
    let at = ok_ns(&ticket.reply().await);
    let delay = at.saturating_sub(since);
    assert!(delay < 2_000_000_000, "{what}: {} ms", ms(delay));
    delay
}

/// Wake-ups cross both ways without waiting for a lease: a Java write unlock wakes every Rust
/// reader (of two clients), a Rust write unlock a Java writer and every Java reader, a Java read
/// unlock a Rust writer, a Rust read unlock a Java writer; and after a Java writer's downgrade a
/// read unlock's single `0` lets every waiting Rust reader in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_ups_cross_both_ways() {
    let redis = RedisServer::start();
    let a = rust_client(&redis.url(), Duration::from_secs(30)).await;
    let b = rust_client(&redis.url(), Duration::from_secs(30)).await;
    for version in REDISSON_VERSIONS {
        let j = Redisson::start(version, &redis.url(), Duration::from_secs(30));
        let name = format!("bin:{version}");
        let settle = Duration::from_millis(300);

        // Java write unlock (`1`) → every Rust reader, in both clients.
        ok_ns(&java(&j, &format!("wlock w1 {name} -1")).await);
        let readers: Vec<_> = [&a, &a, &a, &b, &b]
            .iter()
            .map(|c| waiting(c.rw_lock(&name).read().clone()))
            .collect();
        tokio::time::sleep(settle).await;
        assert!(readers.iter().all(|r| !r.is_finished()), "{version}");
        let unlocked = mono_ns();
        ok_ns(&java(&j, &format!("wunlock w1 {name}")).await);
        let (java_w_to_rust_r, guards) =
            all_granted(readers, unlocked, "Java write unlock → Rust readers").await;
        drop(guards);
        tokio::time::sleep(Duration::from_millis(100)).await;

        // Rust write unlock (`1`) → a Java writer.
        let w = a.rw_lock(&name).write().acquire().await.unwrap();
        let java_w = j.send(&format!("trywlock w2 {name} 20000 -1"));
        tokio::time::sleep(settle).await;
        let released = mono_ns();
        w.release().await.unwrap();
        let rust_w_to_java_w = java_granted(java_w, released, "Rust → Java writer").await;
        ok_ns(&java(&j, &format!("wunlock w2 {name}")).await);

        // Rust write unlock (`1`) → every Java reader.
        let w = a.rw_lock(&name).write().acquire().await.unwrap();
        let java_rs: Vec<_> = ["w3", "w4"]
            .map(|worker| j.send(&format!("tryrlock {worker} {name} 20000 -1")))
            .into();
        tokio::time::sleep(settle).await;
        let released = mono_ns();
        w.release().await.unwrap();
        let mut rust_w_to_java_r = 0;
        for ticket in java_rs {
            let d = java_granted(ticket, released, "Rust → Java readers").await;
            rust_w_to_java_r = rust_w_to_java_r.max(d);
        }
        for worker in ["w3", "w4"] {
            ok_ns(&java(&j, &format!("runlock {worker} {name}")).await);
        }

        // Java read unlock (`0`) → a Rust writer.
        ok_ns(&java(&j, &format!("rlock w1 {name} -1")).await);
        let writer = waiting(b.rw_lock(&name).write().clone());
        tokio::time::sleep(settle).await;
        assert!(!writer.is_finished());
        let unlocked = mono_ns();
        ok_ns(&java(&j, &format!("runlock w1 {name}")).await);
        let (java_r_to_rust_w, guards) =
            all_granted(vec![writer], unlocked, "Java read unlock → Rust writer").await;

        // Rust read unlock (`0`) → a Java writer.
        drop(guards);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let r = a.rw_lock(&name).read().acquire().await.unwrap();
        let java_w = j.send(&format!("trywlock w2 {name} 20000 -1"));
        tokio::time::sleep(settle).await;
        let released = mono_ns();
        r.release().await.unwrap();
        let rust_r_to_java_w = java_granted(java_w, released, "Rust reader → Java writer").await;
        ok_ns(&java(&j, &format!("wunlock w2 {name}")).await);

        // A Java writer downgrades (takes the read side too), then lets the write side go: the
        // lock is in read mode but nothing was published. Its read unlock then publishes one
        // `0`, which wakes one Rust reader per process; that reader wakes the others.
        ok_ns(&java(&j, &format!("wlock w1 {name} -1")).await);
        ok_ns(&java(&j, &format!("rlock w1 {name} -1")).await);
        let readers: Vec<_> = (0..3)
            .map(|_| waiting(a.rw_lock(&name).read().clone()))
            .collect();
        tokio::time::sleep(settle).await;
        ok_ns(&java(&j, &format!("wunlock w1 {name}")).await);
        assert_eq!(redis.cmd(&["HGET", &name, "mode"]).text(), Some("read"));
        let unlocked = mono_ns();
        ok_ns(&java(&j, &format!("runlock w1 {name}")).await);
        let (downgrade, guards) = all_granted(
            readers,
            unlocked,
            "Java read unlock `0` → every Rust reader",
        )
        .await;
        drop(guards);
        tokio::time::sleep(Duration::from_millis(100)).await;

        eprintln!(
            "redisson {version} rwlock wake-ups: Java write unlock→5 Rust readers {:.2} ms (slowest), \
             Rust write unlock→Java writer {:.2} ms, →2 Java readers {:.2} ms, \
             Java read unlock→Rust writer {:.2} ms, Rust read unlock→Java writer {:.2} ms, \
             one `0`→3 Rust readers {:.2} ms",
            ms(java_w_to_rust_r),
            ms(rust_w_to_java_w),
            ms(rust_w_to_java_r),
            ms(java_r_to_rust_w),
            ms(rust_r_to_java_w),
            ms(downgrade),
        );
    }
}

/// The interop trap: a Java reader's unlock re-arms the hash from the readers' timeout keys
/// and deletes it when none is left. Ours has its own, so the Rust read hold survives a Java
/// read unlock, and a Java writer still waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_read_unlock_leaves_the_rust_reader_holding() {
    let redis = RedisServer::start();
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    for version in REDISSON_VERSIONS {
        let j = Redisson::start(version, &redis.url(), Duration::from_secs(30));
        let name = format!("trap:{version}");
        ok_ns(&java(&j, &format!("rlock w1 {name} -1")).await);
        let reader = rust.rw_lock(&name).read().acquire().await.unwrap();
        ok_ns(&java(&j, &format!("runlock w1 {name}")).await);

        assert_eq!(
            redis.cmd(&["HGET", &name, reader.owner()]).text(),
            Some("1"),
            "{version}: the Rust hold is still there"
        );
        assert_eq!(redis.cmd(&["HGET", &name, "mode"]).text(), Some("read"));
        let left = pttl(&redis, &name);
        assert!(
            left > 25_000,
            "{version}: re-armed from our timeout key: {left}"
        );
        assert!(!java_gets(&j, 'w', "w2", &name).await, "{version}");
        let java_w = j.send(&format!("trywlock w2 {name} 20000 -1"));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!reader.is_lost());
        assert_eq!(redis.cmd(&["HGET", &name, "mode"]).text(), Some("read"));
        let released = mono_ns();
        reader.release().await.unwrap();
        let delay = java_granted(java_w, released, "Rust reader → Java writer").await;
        ok_ns(&java(&j, &format!("wunlock w2 {name}")).await);
        eprintln!(
            "redisson {version}: the Rust reader outlived a Java read unlock; its release woke the Java writer in {:.2} ms",
            ms(delay)
        );
    }
}

/// Watchdogs on both sides hold past the lease (a Rust reader renews its timeout key, so a Java
/// read unlock after the first lease still leaves it in); a Java reader killed with SIGKILL
/// frees the lock for a Rust writer once its lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdogs_hold_past_the_lease_and_a_killed_java_reader_frees_the_lock() {
    let redis = RedisServer::start();
    let lease = Duration::from_millis(1200);
    let rust = rust_client(&redis.url(), lease).await;
    for version in REDISSON_VERSIONS {
        let j = Redisson::start(version, &redis.url(), lease);
        let name = format!("lease:{version}");
        let rw = rust.rw_lock(&name);

        // Java's reader holds past its lease.
        ok_ns(&java(&j, &format!("rlock w1 {name} -1")).await);
        tokio::time::sleep(lease * 3 / 2).await;
        assert!(
            is_busy(rw.write().try_acquire(Duration::ZERO).await),
            "{version}"
        );

        // Ours too, timeout key included: a lease and a half later a Java reader comes and goes,
        // and the lock is still ours to keep (Java's unlock found our key alive).
        let reader = rw.read().acquire().await.unwrap();
        ok_ns(&java(&j, &format!("runlock w1 {name}")).await);
        tokio::time::sleep(lease * 3 / 2).await;
        ok_ns(&java(&j, &format!("rlock w1 {name} -1")).await);
        ok_ns(&java(&j, &format!("runlock w1 {name}")).await);
        assert!(!java_gets(&j, 'w', "w2", &name).await, "{version}");
        assert!(!reader.is_lost());
        reader.release().await.unwrap();

        // Our writer holds past its lease.
        let writer = rw.write().acquire().await.unwrap();
        tokio::time::sleep(lease * 3 / 2).await;
        assert!(!java_gets(&j, 'r', "w2", &name).await, "{version}");
        writer.release().await.unwrap();

        // A Java reader dies: the Rust writer gets in once its lease has run out.
        ok_ns(&java(&j, &format!("rlock w1 {name} -1")).await);
        let killed = Instant::now();
        j.kill9();
        let writer = rw
            .write()
            .try_acquire(Duration::from_secs(10))
            .await
            .expect("the lock comes free when the dead reader's lease ends");
        let after = killed.elapsed();
        assert!(
            after < lease + Duration::from_secs(2),
            "{version}: {after:?}"
        );
        writer.release().await.unwrap();
        eprintln!(
            "redisson {version}: rwlock free {after:?} after kill -9 of the Java reader (lease {lease:?})"
        );
    }
}

/// Waits up to 3 s for a guard's loss (`lost_owned`) and checks it was a deletion.
async fn lost_within(lost: impl std::future::Future<Output = LockError>) {
    let lost = tokio::time::timeout(Duration::from_secs(3), lost)
        .await
        .expect("the watchdog notices");
    assert_eq!(lock_tests::loss_reason(&lost), Some(LossReason::Deleted));
}

/// Java's force unlocks (read and write) make our guards' `lost()` fire; ours deletes Java's
/// holds of either mode. Our fencing tokens keep increasing meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_both_ways() {
    let redis = RedisServer::start();
    let rust = rust_client(&redis.url(), Duration::from_millis(600)).await;
    for version in REDISSON_VERSIONS {
        let j = Redisson::start(version, &redis.url(), Duration::from_secs(30));
        let name = format!("forced:{version}");
        let rw = rust.rw_lock(&name);
        let reader = rw.read().acquire().await.unwrap();
        assert_eq!(java(&j, &format!("wforce w1 {name}")).await, "ok false");
        assert_eq!(java(&j, &format!("rforce w1 {name}")).await, "ok true");
        lost_within(reader.lost_owned()).await;
        // Issued with the grant; asked for now, a lost hold gets `Lost`.
        let t1 = reader.issued_token().unwrap();
        assert!(reader.fencing_token().await.is_err());
        drop(reader);

        let writer = rw.write().acquire().await.unwrap();
        assert!(writer.fencing_token().await.unwrap() > t1);
        assert_eq!(java(&j, &format!("rforce w1 {name}")).await, "ok false");
        assert_eq!(java(&j, &format!("wforce w1 {name}")).await, "ok true");
        lost_within(writer.lost_owned()).await;
        let t2 = writer.issued_token().unwrap();
        drop(writer);

        ok_ns(&java(&j, &format!("rlock w1 {name} -1")).await);
        assert!(rw.read().force_unlock().await.unwrap());
        assert_eq!(java(&j, &format!("rlocked w1 {name}")).await, "ok false");
        assert!(
            java(&j, &format!("runlock w1 {name}"))
                .await
                .starts_with("err ")
        );

        ok_ns(&java(&j, &format!("wlock w1 {name} -1")).await);
        assert!(rw.write().force_unlock().await.unwrap());
        assert_eq!(java(&j, &format!("wlocked w1 {name}")).await, "ok false");
        assert!(
            java(&j, &format!("wunlock w1 {name}"))
                .await
                .starts_with("err ")
        );
        assert!(!rw.write().force_unlock().await.unwrap(), "already free");

        let reader = rw.read().acquire().await.unwrap();
        assert!(reader.fencing_token().await.unwrap() > t2);
        reader.release().await.unwrap();
    }
}

/// Three processes (a JVM with Redisson 3, a JVM with Redisson 4, and this Rust process), two
/// workers each, increment one counter with a non-atomic GET and SET under the write lock,
/// while a Rust reader keeps checking that the value never changes under its read lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_never_lose_an_increment_under_the_write_lock() {
    const ROUNDS: u32 = 30;
    let redis = RedisServer::start();
    let javas = start_javas(&redis);
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    let started = Instant::now();
    let reader = async {
        let mut conn = connect(redis.url()).await;
        let mut reads = 0;
        while reads < 20 {
            let guard = rust.rw_lock("pantry").read().acquire().await.unwrap();
            let get = || redis::cmd("GET").arg("rwcounter").clone();
            let before: Option<u64> = get().query_async(&mut conn).await.unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
            let after: Option<u64> = get().query_async(&mut conn).await.unwrap();
            assert_eq!(before, after, "written under a read lock");
            guard.release().await.unwrap();
            reads += 1;
        }
    };
    let writer = rust.clone();
    // The helper sends the Java commands and spawns the Rust writers at its first poll; the
    // reader then runs alongside them.
    tokio::join!(
        never_lose_an_increment(
            &redis,
            &javas,
            "rwcounter",
            ROUNDS,
            |w| format!("wcontend {w} pantry rwcounter {ROUNDS}"),
            move || {
                let rust = writer.clone();
                async move { rust.rw_lock("pantry").write().acquire().await.unwrap() }
            },
        ),
        reader
    );
    eprintln!(
        "{} write-locked increments by 2 JVMs and 1 Rust process (with a Rust reader) in {:?}",
        6 * ROUNDS,
        started.elapsed()
    );
}

/// On a Redis 7 cluster Redisson publishes with `SPUBLISH`, as our sharded scripts do: a Java
/// write unlock wakes a Rust reader and our write unlock a Java writer, without waiting for a
/// lease; our reader's watchdog renews its timeout key in the name's slot (a Java read unlock
/// after the first lease leaves it in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_sharded_pub_sub() {
    use lock_tests::topology::RedisCluster;

    let cluster = RedisCluster::start(3, 0);
    // Renewed every second: a loaded machine (a CI run beside builds and the failover suites)
    // has delayed a renewal by more than the 0.8 s a 1.2 s lease leaves, so that the reader's
    // hold lapsed and a Java writer got in.
    let lease = Duration::from_secs(3);
    let rust = lock_runtime::LockClient::cluster_builder([cluster.seed_url()])
        .layout(lock_runtime::Layout::Redisson)
        .watchdog_timeout(lease)
        .build()
        .await
        .expect("connect to the cluster");
    for version in REDISSON_VERSIONS {
        let j = Redisson::start_cluster(version, &cluster.urls(), Duration::from_secs(30));
        for i in 0..2 {
            let name = format!("sharded-rw:{version}:{i}");
            let rw = rust.rw_lock(&name);
            ok_ns(&java(&j, &format!("wlock w1 {name} -1")).await);
            let reader = waiting(rw.read().clone());
            tokio::time::sleep(Duration::from_millis(300)).await;
            let unlocked = mono_ns();
            ok_ns(&java(&j, &format!("wunlock w1 {name}")).await);
            let (to_rust, mut guards) =
                all_granted(vec![reader], unlocked, "Java write unlock → Rust reader").await;
            let reader = guards.pop().unwrap();

            ok_ns(&java(&j, &format!("rlock w1 {name} -1")).await);
            tokio::time::sleep(lease * 3 / 2).await;
            ok_ns(&java(&j, &format!("runlock w1 {name}")).await);
            assert!(
                !java_gets(&j, 'w', "w2", &name).await,
                "{version}: our reader holds"
            );
            assert!(!reader.is_lost());
            reader.release().await.unwrap();

            let writer = rw.write().acquire().await.unwrap();
            let java_w = j.send(&format!("trywlock w2 {name} 20000 -1"));
            tokio::time::sleep(Duration::from_millis(300)).await;
            let released = mono_ns();
            writer.release().await.unwrap();
            let to_java = java_granted(java_w, released, "Rust write unlock → Java writer").await;
            ok_ns(&java(&j, &format!("wunlock w2 {name}")).await);
            eprintln!(
                "redisson {version} cluster rwlock {name}: Java→Rust {:.2} ms, Rust→Java {:.2} ms",
                ms(to_rust),
                ms(to_java)
            );
        }
    }
}
