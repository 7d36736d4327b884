//! Semaphores shared with Redisson: `RPermitExpirableSemaphore` (the Rust default in the
//! Redisson layout) and `RSemaphore` (`Semaphore::without_leases`), against real Redisson 3.x
//! and 4.x (the driver's `psem-…` and `sem-…` commands, `SemaphoreCommands.java`), plus a
//! JVM-free check of the bytes on Redis.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lock_runtime::{LockClient, LockError, LockGuard, LockOptions, LossReason};
use lock_tests::redisson::REDISSON_VERSIONS;
use lock_tests::{RedisServer, Redisson, mono_ns};
use tokio::sync::mpsc;

use super::{ms, never_lose_an_increment, rust_client, start_javas};

/// The permit ids of an expirable semaphore's guard (`permits:<id>,<id>#<n>`), comma-joined
/// as the driver takes them.
fn permit_ids(guard: &LockGuard) -> String {
    let owner = guard.owner();
    let rest = owner.strip_prefix("permits:").expect("a permit owner id");
    rest.rsplit_once('#').unwrap().0.to_owned()
}

/// `ok NANOS [IDS]` → (NANOS, IDS).
fn ok_reply(reply: &str) -> (u64, String) {
    let rest = reply
        .strip_prefix("ok ")
        .unwrap_or_else(|| panic!("expected `ok …`, got `{reply}`"));
    let mut words = rest.split(' ');
    let nanos = words.next().unwrap().parse().unwrap();
    (nanos, words.next().unwrap_or_default().to_owned())
}

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// The next message on the subscription, as text.
async fn next_payload(
    stream: &mut (impl futures_util::Stream<Item = redis::Msg> + Unpin),
) -> String {
    let msg = tokio::time::timeout(Duration::from_secs(2), stream.next())
        .await
        .expect("a message on redisson_sc")
        .unwrap();
    msg.get_payload::<String>().unwrap()
}

/// What Redis holds, byte for byte, and what each operation publishes, for both kinds; and
/// the typed errors. No JVM: the contract is redisson-wire.md §6 and §7.
#[tokio::test]
async fn semaphore_bytes_on_redis() {
    let redis = RedisServer::start();
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (mut sink, mut stream) = client.get_async_pubsub().await.unwrap().split();
    sink.subscribe("redisson_sc:{bytes}").await.unwrap();
    sink.subscribe("redisson_sc:{plainbytes}").await.unwrap();
    let get = |key: &str| redis.cmd(&["GET", key]).text().map(str::to_owned);

    // trySetPermits semantics: the handle's capacity, published.
    let sem = rust.semaphore("bytes", 4);
    assert_eq!(sem.available().await.unwrap(), 4);
    assert_eq!(next_payload(&mut stream).await, "4");
    assert_eq!(get("bytes").as_deref(), Some("4"));
    assert_eq!(redis.cmd(&["TYPE", "bytes"]).text(), Some("string"));

    let before = redis.time_ms();
    let guard = sem.acquire_many(2, LockOptions::new()).await.unwrap();
    let after = redis.time_ms();
    assert_eq!(get("bytes").as_deref(), Some("2"));
    let members: Vec<(Vec<u8>, u64)> = redis::cmd("ZRANGE")
        .arg("{bytes}:timeout")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut ours: Vec<Vec<u8>> = permit_ids(&guard).split(',').map(unhex).collect();
    let mut stored: Vec<Vec<u8>> = members.iter().map(|(id, _)| id.clone()).collect();
    ours.sort();
    stored.sort();
    assert_eq!(stored, ours, "16 raw bytes per permit id");
    assert!(stored.iter().all(|id| id.len() == 16));
    for (_, score) in &members {
        assert!(
            (before + 30_000..=after + 30_000).contains(score),
            "expiry {score} is the server's epoch ms plus the lease ({before}..{after})"
        );
    }
    let token_key = "redisson_lock_token:{bytes}";
    assert_eq!(redis.cmd(&["PTTL", token_key]).int(), Some(-1));
    assert_eq!(
        get(token_key),
        Some(guard.fencing_token().await.unwrap().to_string())
    );

    // Releasing two: Redisson's release-many publishes how many were released.
    guard.release().await.unwrap();
    assert_eq!(next_payload(&mut stream).await, "2");
    assert_eq!(get("bytes").as_deref(), Some("4"));
    assert_eq!(redis.cmd(&["EXISTS", "{bytes}:timeout"]).int(), Some(0));
    // Releasing one: the new count.
    let one = sem.acquire().await.unwrap();
    one.release().await.unwrap();
    assert_eq!(next_payload(&mut stream).await, "4");
    // setPermits publishes the new total.
    sem.set_capacity(6).await.unwrap();
    assert_eq!(next_payload(&mut stream).await, "6");
    assert_eq!(get("bytes").as_deref(), Some("6"));
    sem.reset_capacity().await.unwrap();
    assert_eq!(next_payload(&mut stream).await, "4");
    assert_eq!(sem.capacity().await.unwrap(), 4);

    // The reclaim step: an expired permit (a crashed Java holder's) comes back, published.
    let dead = [7u8; 16];
    let _: () = redis::cmd("ZADD")
        .arg("{bytes}:timeout")
        .arg(1000)
        .arg(&dead[..])
        .query_async(&mut conn)
        .await
        .unwrap();
    redis.cmd(&["DECRBY", "bytes", "1"]);
    assert_eq!(sem.available().await.unwrap(), 4);
    assert_eq!(next_payload(&mut stream).await, "4");

    // A plain RSemaphore: only the count, and the new count on release.
    let plain = rust.semaphore("plainbytes", 2).without_leases();
    assert!(!plain.has_leases() && sem.has_leases());
    assert_eq!(plain.available().await.unwrap(), 2);
    assert_eq!(next_payload(&mut stream).await, "2");
    let held = plain.acquire().await.unwrap();
    assert_eq!(held.permits(), 1);
    assert_eq!(get("plainbytes").as_deref(), Some("1"));
    assert_eq!(
        redis.cmd(&["EXISTS", "{plainbytes}:timeout"]).int(),
        Some(0)
    );
    held.release().await.unwrap();
    assert_eq!(next_payload(&mut stream).await, "2");
    assert_eq!(get("plainbytes").as_deref(), Some("2"));

    // A waiter cancelled while it waits leaves nothing behind: no permit, no subscription.
    let full = sem.acquire_many(4, LockOptions::new()).await.unwrap();
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.try_acquire(Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    full.release().await.unwrap();
    assert_eq!(next_payload(&mut stream).await, "4");
    assert_eq!(sem.available().await.unwrap(), 4);
    assert_eq!(redis.cmd(&["EXISTS", "{bytes}:timeout"]).int(), Some(0));
    tokio::time::sleep(Duration::from_millis(200)).await;
    // (Our own test subscription remains.)
    assert_eq!(
        redis
            .cmd(&["PUBSUB", "NUMSUB", "redisson_sc:{bytes}"])
            .items()
            .get(1)
            .and_then(lock_tests::Resp::int),
        Some(1)
    );

    // Typed errors.
    let unsupported = |e: LockError| matches!(e, LockError::Unsupported { .. });
    assert!(unsupported(plain.capacity().await.unwrap_err()));
    assert!(unsupported(plain.force_release_all().await.unwrap_err()));
    assert!(unsupported(
        plain
            .acquire_with(LockOptions::new().lease(Duration::from_secs(5)))
            .await
            .unwrap_err()
    ));
    let native = LockClient::connect(&redis.url()).await.unwrap();
    let native_plain = native.semaphore("n", 2).without_leases();
    assert!(unsupported(native_plain.acquire().await.unwrap_err()));
    assert!(unsupported(native_plain.available().await.unwrap_err()));
    for permits in [0, 5] {
        let e = sem
            .acquire_many(permits, LockOptions::new())
            .await
            .unwrap_err();
        assert!(
            matches!(e, LockError::InvalidPermits { requested, .. } if requested == permits),
            "{e:?}"
        );
    }
    redis.cmd(&["HSET", "foreign", "a", "b"]);
    let e = rust.semaphore("foreign", 1).acquire().await.unwrap_err();
    assert!(matches!(e, LockError::ForeignData { .. }), "{e:?}");
    let e = rust.semaphore("a{b", 1).acquire().await.unwrap_err();
    assert!(matches!(e, LockError::InvalidName { .. }), "{e:?}");
}

/// Java holds k permits, Rust gets only capacity − k, and each side's release wakes the
/// other's waiter (a Java `acquire()` waits for a message with no timeout on `RSemaphore`,
/// and up to the first lease end, 30 s here, on the expirable one), for both kinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_share_capacity_and_wake_each_other() {
    let redis = RedisServer::start();
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    for version in REDISSON_VERSIONS {
        let java = Redisson::start(version, &redis.url(), Duration::from_secs(30));

        // RPermitExpirableSemaphore, initialised by Java.
        let name = format!("psem:{version}");
        let sem = rust.semaphore(&name, 3);
        assert_eq!(
            java.call(&format!("psem-tryset w1 {name} 3")).await,
            "ok true"
        );
        let (_, java_ids) = ok_reply(&java.call(&format!("psem-acquire w1 {name} 2 30000")).await);
        assert_eq!(java_ids.split(',').count(), 2);
        assert_eq!(sem.available().await.unwrap(), 1);
        assert_eq!(sem.capacity().await.unwrap(), 3);
        let busy = sem
            .acquire_many(2, LockOptions::new().wait(Duration::ZERO))
            .await
            .unwrap_err();
        assert!(busy.is_busy(), "{busy:?}");
        let mine = sem.try_acquire(Duration::ZERO).await.unwrap();
        assert_eq!(
            java.call(&format!("psem-available w1 {name}")).await,
            "ok 0"
        );
        assert_eq!(
            java.call(&format!("psem-tryacquire w2 {name} 1 0 30000"))
                .await,
            "busy"
        );

        let waiter = {
            let sem = sem.clone();
            super::timed(async move { sem.try_acquire(Duration::from_secs(20)).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !waiter.is_finished(),
            "{version}: more permits than the capacity"
        );
        let first_java = java_ids.split(',').next().unwrap().to_owned();
        let released = mono_ns();
        java.call(&format!("psem-release w1 {name} {first_java}"))
            .await;
        let (got, guard) = waiter.await.unwrap();
        let waiter_guard = guard.expect("woken by Java's release");
        let java_to_rust = got.saturating_sub(released);

        let java_wait = java.send(&format!("psem-acquire w2 {name} 1 30000"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = mono_ns();
        mine.release().await.unwrap();
        let (acquired, java_id) = ok_reply(&java_wait.reply().await);
        let rust_to_java = acquired.saturating_sub(released);
        eprintln!(
            "redisson {version} RPermitExpirableSemaphore: wake-up Java→Rust {:.2} ms, Rust→Java {:.2} ms",
            ms(java_to_rust),
            ms(rust_to_java)
        );
        for delay in [java_to_rust, rust_to_java] {
            assert!(delay < 2_000_000_000, "{version}: {} ms", ms(delay));
        }
        let second_java = java_ids.split(',').nth(1).unwrap();
        java.call(&format!("psem-release w1 {name} {second_java},{java_id}"))
            .await;
        waiter_guard.release().await.unwrap();
        assert_eq!(
            java.call(&format!("psem-available w1 {name}")).await,
            "ok 3"
        );

        // RSemaphore, initialised by Rust.
        let name = format!("sem:{version}");
        let sem = rust.semaphore(&name, 3).without_leases();
        assert_eq!(sem.available().await.unwrap(), 3);
        assert_eq!(java.call(&format!("sem-available w1 {name}")).await, "ok 3");
        assert_eq!(
            java.call(&format!("sem-tryset w1 {name} 9")).await,
            "ok false"
        );
        java.call(&format!("sem-acquire w1 {name} 2")).await;
        let busy = sem
            .acquire_many(2, LockOptions::new().wait(Duration::ZERO))
            .await
            .unwrap_err();
        assert!(busy.is_busy(), "{busy:?}");
        let mine = sem.try_acquire(Duration::ZERO).await.unwrap();
        assert_eq!(
            java.call(&format!("sem-tryacquire w2 {name} 1 0")).await,
            "busy"
        );
        let waiter = {
            let sem = sem.clone();
            super::timed(async move { sem.try_acquire(Duration::from_secs(20)).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !waiter.is_finished(),
            "{version}: more permits than the capacity"
        );
        let released = mono_ns();
        java.call(&format!("sem-release w1 {name} 1")).await;
        let (got, guard) = waiter.await.unwrap();
        let waiter_guard = guard.expect("woken by Java's release");
        let java_to_rust = got.saturating_sub(released);
        // Java's acquire() waits for a message only: our release must publish.
        let java_wait = java.send(&format!("sem-acquire w2 {name} 1"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = mono_ns();
        mine.release().await.unwrap();
        let (acquired, _) = ok_reply(&java_wait.reply().await);
        let rust_to_java = acquired.saturating_sub(released);
        eprintln!(
            "redisson {version} RSemaphore: wake-up Java→Rust {:.2} ms, Rust→Java {:.2} ms",
            ms(java_to_rust),
            ms(rust_to_java)
        );
        for delay in [java_to_rust, rust_to_java] {
            assert!(delay < 2_000_000_000, "{version}: {} ms", ms(delay));
        }
        java.call(&format!("sem-release w1 {name} 1")).await;
        java.call(&format!("sem-release w2 {name} 1")).await;
        waiter_guard.release().await.unwrap();
        assert_eq!(java.call(&format!("sem-available w1 {name}")).await, "ok 3");
    }
}

/// A Rust release of n permits wakes up to n waiters at once (their fallback is the holder's
/// 30 s lease, so only the message explains a prompt grant); a Rust waiter for several
/// permits woken by a smaller Java release passes the wake-up on to one it can serve, and
/// gets in once Java has released enough.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_wake_as_many_waiters_as_permits() {
    let redis = RedisServer::start();
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    for version in REDISSON_VERSIONS {
        let name = format!("wake:{version}");
        let sem = rust.semaphore(&name, 3);
        let holder = sem.acquire_many(3, LockOptions::new()).await.unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        for _ in 0..4 {
            let (sem, tx) = (sem.clone(), tx.clone());
            tokio::spawn(async move {
                let guard = sem.try_acquire(Duration::from_secs(10)).await;
                let _ = tx.send((mono_ns(), guard));
            });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(rx.try_recv().is_err());
        let released = mono_ns();
        holder.release().await.unwrap();
        let mut guards = Vec::new();
        for _ in 0..3 {
            let (at, guard) = tokio::time::timeout(Duration::from_secs(2), rx.recv())
                .await
                .expect("a released permit reaches a waiter at once")
                .unwrap();
            guards.push(guard.unwrap());
            eprintln!(
                "redisson layout: Rust release of 3 → Rust waiter in {:.2} ms",
                ms(at.saturating_sub(released))
            );
        }
        assert!(
            tokio::time::timeout(Duration::from_millis(500), rx.recv())
                .await
                .is_err(),
            "a fourth waiter got a permit of three"
        );
        guards.pop().unwrap().release().await.unwrap();
        let (_, last) = tokio::time::timeout(Duration::from_secs(2), rx.recv())
            .await
            .expect("the fourth waiter")
            .unwrap();
        guards.push(last.unwrap());
        for guard in guards {
            guard.release().await.unwrap();
        }

        // Java releases one permit at a time; a Rust waiter for 2 (first in line) and one for 1.
        let java = Redisson::start(version, &redis.url(), Duration::from_secs(30));
        let (_, ids) = ok_reply(&java.call(&format!("psem-acquire w1 {name} 3 30000")).await);
        let ids: Vec<&str> = ids.split(',').collect();
        let two = {
            let sem = sem.clone();
            super::timed(async move {
                sem.acquire_many(2, LockOptions::new().wait(Duration::from_secs(10)))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let one = {
            let sem = sem.clone();
            super::timed(async move { sem.try_acquire(Duration::from_secs(10)).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = mono_ns();
        java.call(&format!("psem-release w1 {name} {}", ids[0]))
            .await;
        let (at, guard) = tokio::time::timeout(Duration::from_secs(2), one)
            .await
            .expect("the one-permit waiter gets the one released permit")
            .unwrap();
        let single = guard.unwrap();
        eprintln!(
            "redisson {version}: Java release of 1 → Rust 1-permit waiter (behind a 2-permit one) in {:.2} ms",
            ms(at.saturating_sub(released))
        );
        assert!(!two.is_finished());
        let released = mono_ns();
        java.call(&format!("psem-release w1 {name} {},{}", ids[1], ids[2]))
            .await;
        let (at, guard) = tokio::time::timeout(Duration::from_secs(2), two)
            .await
            .expect("the two-permit waiter gets in")
            .unwrap();
        let double = guard.unwrap();
        assert_eq!(double.permits(), 2);
        eprintln!(
            "redisson {version}: Java release of 2 → Rust 2-permit waiter in {:.2} ms",
            ms(at.saturating_sub(released))
        );
        single.release().await.unwrap();
        double.release().await.unwrap();

        // Java's addPermits publishes the delta: a Rust waiter for 2 gets in at once.
        let all = sem.acquire_many(3, LockOptions::new()).await.unwrap();
        let waiter = {
            let sem = sem.clone();
            super::timed(async move {
                sem.acquire_many(2, LockOptions::new().wait(Duration::from_secs(10)))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let added = mono_ns();
        java.call(&format!("psem-add w1 {name} 2")).await;
        let (at, guard) = tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("Java's addPermits wakes the waiter")
            .unwrap();
        eprintln!(
            "redisson {version}: Java addPermits(2) → Rust 2-permit waiter in {:.2} ms",
            ms(at.saturating_sub(added))
        );
        assert_eq!(sem.capacity().await.unwrap(), 5);
        guard.unwrap().release().await.unwrap();
        all.release().await.unwrap();
    }
}

/// Leases across the languages: the Rust watchdog keeps a permit past its lease while Java's
/// reclaim runs; a Java release of our permit id, and our own `force_release_all`, fire
/// `lost()`; Java's `setPermits` does not; a Java holder killed with SIGKILL gives its
/// expirable permits back when their lease ends, while a plain `RSemaphore`'s stay taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_renewal_losses_and_killed_java_holders() {
    let redis = RedisServer::start();
    // Renewal every 333 ms: a loaded machine's slow round trip is not taken for a loss.
    let watchdog = Duration::from_secs(1);
    let rust = rust_client(&redis.url(), watchdog).await;
    for version in REDISSON_VERSIONS {
        let java = Redisson::start(version, &redis.url(), Duration::from_secs(30));
        let name = format!("lease:{version}");
        let sem = rust.semaphore(&name, 1);

        // Renewal: held for over three leases while Java reclaims expired permits.
        let guard = sem.acquire().await.unwrap();
        let until = Instant::now() + watchdog * 3;
        while Instant::now() < until {
            assert_eq!(
                java.call(&format!("psem-available w1 {name}")).await,
                "ok 0"
            );
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        assert_eq!(
            java.call(&format!("psem-tryacquire w1 {name} 1 0 30000"))
                .await,
            "busy"
        );
        assert!(!guard.is_lost());

        // Java releases our permit by its id: lost.
        java.call(&format!("psem-release w1 {name} {}", permit_ids(&guard)))
            .await;
        let lost = tokio::time::timeout(Duration::from_secs(3), guard.lost())
            .await
            .expect("the watchdog notices");
        assert_eq!(lock_tests::loss_reason(&lost), Some(LossReason::Deleted));
        drop(guard);

        // Java's setPermits changes the count, not our hold.
        let guard = sem.acquire().await.unwrap();
        java.call(&format!("psem-set w1 {name} 3")).await;
        assert_eq!(sem.capacity().await.unwrap(), 3);
        assert_eq!(sem.available().await.unwrap(), 2);
        tokio::time::sleep(watchdog * 2).await;
        assert!(!guard.is_lost());

        // Our force_release_all takes Java's and our permits back.
        let (_, java_id) = ok_reply(&java.call(&format!("psem-acquire w1 {name} 1 30000")).await);
        assert!(sem.force_release_all().await.unwrap());
        let lost = tokio::time::timeout(Duration::from_secs(3), guard.lost())
            .await
            .expect("the watchdog notices");
        assert_eq!(lock_tests::loss_reason(&lost), Some(LossReason::Deleted));
        drop(guard);
        assert_eq!(
            java.call(&format!("psem-tryrelease w1 {name} {java_id}"))
                .await,
            "ok 0"
        );
        assert_eq!(
            java.call(&format!("psem-available w1 {name}")).await,
            "ok 3"
        );

        // kill -9 of a Java holder of expirable permits (lease 1.5 s).
        java.call(&format!("psem-acquire w1 {name} 3 1500")).await;
        let killed = Instant::now();
        java.kill9();
        let back = sem
            .acquire_many(3, LockOptions::new().wait(Duration::from_secs(10)))
            .await
            .expect("the dead holder's permits come back when their lease ends");
        let after = killed.elapsed();
        assert!(
            after > Duration::from_secs(1) && after < Duration::from_millis(3500),
            "{version}: back {after:?} after the kill, lease 1.5 s"
        );
        eprintln!(
            "redisson {version}: expirable permits back {after:?} after kill -9 of the Java holder (lease 1.5 s)"
        );
        back.release().await.unwrap();

        // kill -9 of a Java holder of RSemaphore permits: they stay taken for ever.
        let java = Redisson::start(version, &redis.url(), Duration::from_secs(30));
        let plain_name = format!("plainlease:{version}");
        let plain = rust.semaphore(&plain_name, 3).without_leases();
        assert_eq!(plain.available().await.unwrap(), 3);
        java.call(&format!("sem-acquire w1 {plain_name} 2")).await;
        java.kill9();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(plain.available().await.unwrap(), 1);
        let stuck = plain
            .acquire_many(2, LockOptions::new().wait(Duration::from_millis(500)))
            .await
            .unwrap_err();
        assert!(stuck.is_busy(), "{stuck:?}");
    }
}

/// Three processes (a JVM with Redisson 3, one with Redisson 4, and this one), two workers
/// each, increment one counter with a non-atomic GET and SET under a 1-permit semaphore of
/// each kind: no increment is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_never_lose_an_increment_under_one_permit() {
    const ROUNDS: u32 = 15;
    let redis = RedisServer::start();
    let javas = start_javas(&redis);
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    for plain in [false, true] {
        let (name, counter) = if plain {
            ("one-plain", "counter-plain")
        } else {
            ("one-expirable", "counter-expirable")
        };
        let sem = if plain {
            rust.semaphore(name, 1).without_leases()
        } else {
            rust.semaphore(name, 1)
        };
        assert_eq!(sem.available().await.unwrap(), 1);
        let started = Instant::now();
        never_lose_an_increment(
            &redis,
            &javas,
            counter,
            ROUNDS,
            |w| {
                if plain {
                    format!("sem-contend {w} {name} {counter} {ROUNDS}")
                } else {
                    format!("psem-contend {w} {name} {counter} {ROUNDS} 10000")
                }
            },
            move || {
                let sem = sem.clone();
                async move { sem.acquire().await.unwrap() }
            },
        )
        .await;
        eprintln!(
            "{} increments under 1-permit {} by 2 JVMs and 1 Rust process in {:?}",
            6 * ROUNDS,
            if plain {
                "RSemaphore"
            } else {
                "RPermitExpirableSemaphore"
            },
            started.elapsed()
        );
    }
}

/// On a Redis 7 cluster Redisson publishes semaphore messages with `SPUBLISH` (its `AUTO`
/// sharded mode), as our scripts' sharded twins do: wake-ups cross the languages both ways,
/// for both kinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_on_a_cluster_with_sharded_pub_sub() {
    use lock_tests::topology::RedisCluster;

    let cluster = RedisCluster::start(3, 0);
    let rust = LockClient::cluster_builder([cluster.seed_url()])
        .layout(lock_runtime::Layout::Redisson)
        .build()
        .await
        .expect("connect to the cluster");
    for version in REDISSON_VERSIONS {
        let java = Redisson::start_cluster(version, &cluster.urls(), Duration::from_secs(30));
        for plain in [false, true] {
            let name = format!("csem:{version}:{plain}");
            let (sem, prefix) = if plain {
                (rust.semaphore(&name, 1).without_leases(), "sem")
            } else {
                (rust.semaphore(&name, 1), "psem")
            };
            assert_eq!(sem.available().await.unwrap(), 1);
            let lease = if plain { "" } else { " 30000" };
            let (_, id) = ok_reply(
                &java
                    .call(&format!("{prefix}-acquire w1 {name} 1{lease}"))
                    .await,
            );
            let waiter = {
                let sem = sem.clone();
                tokio::spawn(async move { sem.try_acquire(Duration::from_secs(20)).await })
            };
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!waiter.is_finished());
            let release = if plain { "1".to_owned() } else { id };
            let started = Instant::now();
            java.call(&format!("{prefix}-release w1 {name} {release}"))
                .await;
            let guard = waiter.await.unwrap().expect("woken by Java's SPUBLISH");
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "{version} {name}"
            );
            let java_wait = java.send(&format!("{prefix}-acquire w2 {name} 1{lease}"));
            tokio::time::sleep(Duration::from_millis(300)).await;
            let started = Instant::now();
            guard.release().await.unwrap();
            let (_, id) = ok_reply(&java_wait.reply().await);
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "{version} {name}"
            );
            let release = if plain { "1".to_owned() } else { id };
            java.call(&format!("{prefix}-release w2 {name} {release}"))
                .await;
        }
    }
}
