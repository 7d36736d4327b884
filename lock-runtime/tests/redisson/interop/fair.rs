//! Redisson's `RFairLock` shared by Rust (`LockClient::fair_lock` with `Layout::Redisson`) and
//! Java (`RedissonClient.getFairLock`, the driver's `fair*` commands): exclusion and wake-ups
//! both ways, one FIFO queue across the languages, a Rust waiter that gives up leaving at once,
//! leases and watchdogs, force unlocks, three processes incrementing under the lock, and a
//! JVM-free check of the bytes on Redis.

use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, LossReason};
use lock_tests::redisson::REDISSON_VERSIONS;
use lock_tests::{RedisServer, Redisson, mono_ns};

use super::{ms, never_lose_an_increment, ok_ns, rust_client, start_javas};

fn queue_key(name: &str) -> String {
    format!("redisson_lock_queue:{{{name}}}")
}

fn timeout_key(name: &str) -> String {
    format!("redisson_lock_timeout:{{{name}}}")
}

fn queue(redis: &RedisServer, name: &str) -> Vec<String> {
    redis
        .cmd(&["LRANGE", &queue_key(name), "0", "-1"])
        .items()
        .iter()
        .filter_map(|w| w.text().map(str::to_owned))
        .collect()
}

fn deadline(redis: &RedisServer, name: &str, owner: &str) -> Option<i64> {
    redis
        .cmd(&["ZSCORE", &timeout_key(name), owner])
        .text()
        .map(|s| s.parse::<f64>().unwrap() as i64)
}

/// Waits (5 s at most) until the queue of `name` has `len` waiters; returns them.
async fn queued(redis: &RedisServer, name: &str, len: usize) -> Vec<String> {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let q = queue(redis, name);
        if q.len() == len {
            return q;
        }
        assert!(
            Instant::now() < until,
            "{name}: queue {q:?}, expected {len} waiters"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn java_fair_lock(java: &Redisson, worker: &str, name: &str) -> u64 {
    ok_ns(&java.call(&format!("fairlock {worker} {name} -1")).await)
}

async fn java_fair_unlock(java: &Redisson, worker: &str, name: &str) -> u64 {
    ok_ns(&java.call(&format!("fairunlock {worker} {name}")).await)
}

async fn java_flag(java: &Redisson, command: &str, name: &str) -> bool {
    let reply = java.call(&format!("{command} w9 {name}")).await;
    match reply.as_str() {
        "ok true" => true,
        "ok false" => false,
        other => panic!("{command}: {other}"),
    }
}

/// A Rust task that waits for the fair lock, notes when it got it, holds it `hold`, releases.
fn rust_turn(rust: &LockClient, name: &str, hold: Duration) -> tokio::task::JoinHandle<u64> {
    let (rust, name) = (rust.clone(), name.to_owned());
    tokio::spawn(async move {
        let guard = rust.fair_lock(&name).acquire().await.expect("fair acquire");
        let at = mono_ns();
        tokio::time::sleep(hold).await;
        guard.release().await.unwrap();
        at
    })
}

/// Java holds, Rust is excluded and then woken by Java's unlock; Rust holds, Java is excluded
/// and then woken by our release. Both leases are 30 s: only the message explains the wake-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_locks_exclude_and_wake_each_other() {
    let redis = RedisServer::start();
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    for version in REDISSON_VERSIONS {
        let java = Redisson::start(version, &redis.url(), Duration::from_secs(30));
        let name = format!("fair-wake:{version}");
        java_fair_lock(&java, "w1", &name).await;
        let busy = rust
            .fair_lock(&name)
            .try_acquire(Duration::ZERO)
            .await
            .unwrap_err();
        assert!(busy.is_busy(), "{version}: {busy:?}");
        // A try without a wait leaves no place behind.
        assert!(queued(&redis, &name, 0).await.is_empty());

        let waiter = {
            let (rust, name) = (rust.clone(), name.clone());
            super::timed(async move {
                rust.fair_lock(&name)
                    .try_acquire(Duration::from_secs(20))
                    .await
            })
        };
        queued(&redis, &name, 1).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !waiter.is_finished(),
            "{version}: Rust got a lock Java holds"
        );
        let unlocked = mono_ns();
        java_fair_unlock(&java, "w1", &name).await;
        let (acquired, guard) = waiter.await.unwrap();
        let guard = guard.expect("the Rust waiter gets the lock");
        let java_to_rust = acquired.saturating_sub(unlocked);
        assert!(queue(&redis, &name).is_empty());

        // Rust holds: Java is excluded, then woken by our release.
        assert_eq!(
            java.call(&format!("fairtry w2 {name} 0 -1")).await,
            "busy",
            "{version}: Java got a lock Rust holds"
        );
        let java_wait = java.send(&format!("fairtry w2 {name} 20000 -1"));
        queued(&redis, &name, 1).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let released = mono_ns();
        guard.release().await.unwrap();
        let rust_to_java = ok_ns(&java_wait.reply().await).saturating_sub(released);
        assert!(java_flag(&java, "fairlocked", &name).await);
        java_fair_unlock(&java, "w2", &name).await;
        eprintln!(
            "redisson {version} fair lock: wake-up Java→Rust {:.2} ms, Rust→Java {:.2} ms",
            ms(java_to_rust),
            ms(rust_to_java)
        );
        // Without the message a Rust waiter would retry within 1.7 s, a Java one within 30 s.
        for (what, delay, bound) in [
            ("Java→Rust", java_to_rust, 1_000_000_000),
            ("Rust→Java", rust_to_java, 2_000_000_000),
        ] {
            assert!(
                delay < bound,
                "{version}: {what} wake-up took {} ms",
                ms(delay)
            );
        }
    }
}

/// Java `w1` holds; Rust A, Java `w2`, Rust B and Java `w3` queue in that order (each once the
/// previous one is in the queue): they are granted in exactly that order, each woken on its
/// own channel by the release before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_fifo_queue_across_the_languages() {
    let redis = RedisServer::start();
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    for version in REDISSON_VERSIONS {
        let java = Redisson::start(version, &redis.url(), Duration::from_secs(30));
        let name = format!("fair-fifo:{version}");
        java_fair_lock(&java, "w1", &name).await;
        let hold = Duration::from_millis(100);

        // (After a Rust waiter queues, a moment for its next attempt, which raises its own
        // deadline: the one a later waiter chains from.)
        let settle = Duration::from_millis(300);
        let a = rust_turn(&rust, &name, hold);
        let q = queued(&redis, &name, 1).await;
        tokio::time::sleep(settle).await;
        let w2 = java.send(&format!("fairlock w2 {name} -1"));
        let w2_unlock = java.send(&format!("fairunlock w2 {name}"));
        queued(&redis, &name, 2).await;
        let b = rust_turn(&rust, &name, hold);
        queued(&redis, &name, 3).await;
        tokio::time::sleep(settle).await;
        let w3 = java.send(&format!("fairlock w3 {name} -1"));
        let w3_unlock = java.send(&format!("fairunlock w3 {name}"));
        let order = queued(&redis, &name, 4).await;
        assert_eq!(order[0], q[0], "{version}: A stays first");
        assert!(order[0].starts_with(rust.id()) && order[2].starts_with(rust.id()));
        assert!(!order[1].starts_with(rust.id()) && !order[3].starts_with(rust.id()));
        // Java's deadlines chain from ours and ours from Java's: each is the one ahead plus
        // at least 300 s (a Rust waiter raises its own by up to 5 s more).
        let deadlines: Vec<i64> = order
            .iter()
            .map(|w| deadline(&redis, &name, w).expect("queued waiters have a deadline"))
            .collect();
        for pair in deadlines.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(
                (300_000..=305_000).contains(&gap),
                "{version}: {deadlines:?}"
            );
        }

        let started = mono_ns();
        java_fair_unlock(&java, "w1", &name).await;
        let t_a = a.await.unwrap();
        let t_w2 = ok_ns(&w2.reply().await);
        w2_unlock.reply().await;
        let t_b = b.await.unwrap();
        let t_w3 = ok_ns(&w3.reply().await);
        w3_unlock.reply().await;
        let grants = [t_a, t_w2, t_b, t_w3];
        assert!(
            grants.windows(2).all(|p| p[0] < p[1]),
            "{version}: granted out of order: A {t_a}, w2 {t_w2}, B {t_b}, w3 {t_w3}"
        );
        assert!(queue(&redis, &name).is_empty());
        assert_eq!(redis.cmd(&["EXISTS", &timeout_key(&name)]).int(), Some(0));
        eprintln!(
            "redisson {version} fair lock: A, w2, B, w3 granted in order, {:.1} ms for the four hand-overs ({} ms holds by Rust)",
            ms(t_w3 - started),
            hold.as_millis()
        );
    }
}

/// A queued Java waiter sent its `fairlock` at `sent` and was granted at `granted`: it was woken
/// by the unlock message on its channel, not by its retry timer. That timer is set at each of
/// its attempts (none after it queued, unless woken) to the hint the script returned: the
/// holder's PTTL (Redisson 3.32+), at least 20 s under a 30 s watchdog that renews every 10 s,
/// or its deadline less its wait (before 3.32), minutes here. So a grant earlier than 20 s after
/// it was sent came from the message, however slow the machine.
fn woken_by_the_message(version: &str, sent: u64, granted: u64) {
    let after = granted.saturating_sub(sent);
    assert!(
        after < 20_000_000_000,
        "{version}: granted {} ms after it queued: by its retry timer, not the message",
        ms(after)
    );
}

/// A Rust waiter that times out, or whose acquire is cancelled, leaves the queue at once (with
/// Redisson's give-up), and the Java waiter behind it gets the lock when it is free, woken by
/// the unlock message (its place and its deadline intact: it was not dropped and queued again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_waiter_that_gives_up_leaves_the_queue_at_once() {
    let redis = RedisServer::start();
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    for version in REDISSON_VERSIONS {
        let java = Redisson::start(version, &redis.url(), Duration::from_secs(30));
        let name = format!("fair-leave:{version}");
        java_fair_lock(&java, "w1", &name).await;

        // Timed out.
        let timing_out = {
            let (rust, name) = (rust.clone(), name.clone());
            tokio::spawn(async move {
                rust.fair_lock(&name)
                    .try_acquire(Duration::from_millis(1200))
                    .await
            })
        };
        let a = queued(&redis, &name, 1).await.remove(0);
        let w2_sent = mono_ns();
        let w2 = java.send(&format!("fairlock w2 {name} -1"));
        let w2_owner = queued(&redis, &name, 2).await.remove(1);
        let before = deadline(&redis, &name, &w2_owner).unwrap();
        let e = timing_out.await.unwrap().unwrap_err();
        assert!(matches!(e, LockError::WaitTimeout { .. }), "{e:?}");
        let gave_up = Instant::now();
        assert_eq!(queued(&redis, &name, 1).await, [w2_owner.as_str()]);
        let left_after = gave_up.elapsed();
        assert_eq!(deadline(&redis, &name, &a), None);
        // Redisson's give-up: the waiters behind get our wait off their deadline.
        assert_eq!(
            deadline(&redis, &name, &w2_owner),
            Some(before - 300_000),
            "{version}"
        );
        let unlocked = mono_ns();
        java_fair_unlock(&java, "w1", &name).await;
        let w2_granted = ok_ns(&w2.reply().await);
        let w2_wait = w2_granted.saturating_sub(unlocked);
        woken_by_the_message(version, w2_sent, w2_granted);

        // Cancelled: w2 holds; Rust B queues, Java w3 behind it; B's acquire is dropped.
        let cancelled = {
            let (rust, name) = (rust.clone(), name.clone());
            tokio::spawn(async move { rust.fair_lock(&name).acquire().await })
        };
        queued(&redis, &name, 1).await;
        let w3_sent = mono_ns();
        let w3 = java.send(&format!("fairlock w3 {name} -1"));
        let w3_owner = queued(&redis, &name, 2).await.remove(1);
        cancelled.abort();
        let aborted = Instant::now();
        assert_eq!(queued(&redis, &name, 1).await, [w3_owner]);
        let cancelled_left_after = aborted.elapsed();
        let unlocked = mono_ns();
        java_fair_unlock(&java, "w2", &name).await;
        let w3_granted = ok_ns(&w3.reply().await);
        let w3_wait = w3_granted.saturating_sub(unlocked);
        woken_by_the_message(version, w3_sent, w3_granted);
        java_fair_unlock(&java, "w3", &name).await;
        eprintln!(
            "redisson {version} fair lock: a timed-out Rust waiter left the queue within {left_after:?}, a cancelled one within {cancelled_left_after:?}; the Java waiters behind got the lock {:.2} / {:.2} ms after the unlock",
            ms(w2_wait),
            ms(w3_wait)
        );
    }
}

/// Watchdogs renew on both sides (each holds well past its 1.5 s lease); a Java holder killed
/// with SIGKILL frees the lock for the Rust waiter once its lease ends; a force unlock from
/// either side deletes the other's hold and wakes the first waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_leases_kill_and_force_unlock() {
    let redis = RedisServer::start();
    let lease = Duration::from_millis(1500);
    let rust = rust_client(&redis.url(), lease).await;
    for version in REDISSON_VERSIONS {
        let name = format!("fair-lease:{version}");
        let java = Redisson::start(version, &redis.url(), lease);
        java_fair_lock(&java, "w1", &name).await;
        tokio::time::sleep(lease * 2).await;
        let busy = rust.fair_lock(&name).try_acquire(Duration::ZERO).await;
        assert!(
            busy.unwrap_err().is_busy(),
            "{version}: Java's watchdog renews"
        );
        java_fair_unlock(&java, "w1", &name).await;

        let guard = rust.fair_lock(&name).acquire().await.unwrap();
        tokio::time::sleep(lease * 2).await;
        assert_eq!(java.call(&format!("fairtry w2 {name} 0 -1")).await, "busy");
        // Java force-unlocks a Rust holder: the guard learns it lost the lock.
        assert!(java_flag(&java, "fairforce", &name).await);
        let lost = tokio::time::timeout(Duration::from_secs(3), guard.lost())
            .await
            .expect("the watchdog notices");
        assert_eq!(lock_tests::loss_reason(&lost), Some(LossReason::Deleted));
        drop(guard);

        // Rust force-unlocks a Java holder: the Rust waiter first in the queue is woken.
        java_fair_lock(&java, "w1", &name).await;
        let waiter = rust_turn(&rust, &name, Duration::ZERO);
        queued(&redis, &name, 1).await;
        let forced = mono_ns();
        assert!(rust.fair_lock(&name).force_unlock().await.unwrap());
        let woken = waiter.await.unwrap().saturating_sub(forced);
        assert!(woken < 1_000_000_000, "{version}: {} ms", ms(woken));
        assert_eq!(java.call(&format!("fairheld w1 {name}")).await, "ok false");

        // A Java holder killed with SIGKILL: the lock comes free when its lease ends.
        java_fair_lock(&java, "w1", &name).await;
        let killed = Instant::now();
        java.kill9();
        let guard = rust
            .fair_lock(&name)
            .try_acquire(Duration::from_secs(10))
            .await
            .expect("the dead holder's lease ends");
        let after = killed.elapsed();
        assert!(
            after < lease + Duration::from_secs(2),
            "{version}: {after:?}"
        );
        guard.release().await.unwrap();
        eprintln!(
            "redisson {version} fair lock: free {after:?} after kill -9 of the Java holder; Rust waiter woken {:.2} ms after a force unlock",
            ms(woken)
        );
    }
}

/// Two JVMs (Redisson 3 and 4, two workers each) and this process (two tasks) increment one
/// counter with a non-atomic GET and SET under one fair lock: no increment is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_never_lose_an_increment_under_a_fair_lock() {
    const ROUNDS: u32 = 25;
    let redis = RedisServer::start();
    let javas = start_javas(&redis);
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    let started = Instant::now();
    never_lose_an_increment(
        &redis,
        &javas,
        "counter",
        ROUNDS,
        |w| format!("faircontend {w} fair-cart counter {ROUNDS}"),
        move || {
            let rust = rust.clone();
            async move { rust.fair_lock("fair-cart").acquire().await.unwrap() }
        },
    )
    .await;
    assert!(queue(&redis, "fair-cart").is_empty());
    eprintln!(
        "{} fair-locked increments by 2 JVMs and 1 Rust process in {:?}",
        6 * ROUNDS,
        started.elapsed()
    );
}

/// The messages published on `channel`, collected by a plain subscriber (for 20 s).
fn listen(url: &str, channel: &str) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    let channel = channel.to_owned();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut pubsub = conn.as_pubsub();
        pubsub.subscribe(&channel).unwrap();
        pubsub
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        ready_tx.send(()).unwrap();
        while let Ok(msg) = pubsub.get_message() {
            if tx.send(msg.get_payload::<String>().unwrap()).is_err() {
                return;
            }
        }
    });
    ready_rx.recv().unwrap();
    rx
}

/// Without a JVM: the keys, fields, TTLs, deadlines and channels a Rust fair waiter and holder
/// write, next to a Java holder and waiter written by hand as Redisson writes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bytes_on_redis_are_redissons() {
    let redis = RedisServer::start();
    let lease = Duration::from_secs(10);
    let rust = rust_client(&redis.url(), lease).await;
    let name = "drop:7";
    let (q, t) = (queue_key(name), timeout_key(name));
    let channel = |owner: &str| format!("redisson_lock__channel:{{{name}}}:{owner}");
    // A Java holder, and a Java waiter queued behind it (deadline: now + PTTL + 300 s).
    let java_holder = "0b1c2d3e-0000-4000-8000-000000000001:41";
    let java_waiter = "0b1c2d3e-0000-4000-8000-000000000001:42";
    redis.cmd(&["HSET", name, java_holder, "1"]);
    redis.cmd(&["PEXPIRE", name, "30000"]);
    let java_deadline = redis.time_ms() + 30_000 + 300_000;
    redis.cmd(&["RPUSH", &q, java_waiter]);
    redis.cmd(&["ZADD", &t, &java_deadline.to_string(), java_waiter]);

    // A Rust waiter queues behind the Java waiter, with Redisson's arithmetic.
    let waiter = rust_turn(&rust, name, Duration::from_millis(1500));
    let order = queued(&redis, name, 2).await;
    assert_eq!(order[0], java_waiter);
    let owner = order[1].clone();
    assert!(owner.starts_with(&format!("{}:", rust.id())), "{owner}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mine = deadline(&redis, name, &owner).unwrap();
    // Enqueued at the Java deadline + 300 s, raised by its refresh to + 305 s at most.
    let gap = mine - java_deadline as i64;
    assert!((300_000..=305_000).contains(&gap), "{gap}");
    assert!(
        redis
            .pubsub_channels("redisson_lock__channel:*")
            .contains(&channel(&owner)),
        "{:?}",
        redis.pubsub_channels("*")
    );
    let info = rust.fair_lock(name).info().await.unwrap().expect("held");
    assert_eq!(info.waiting(), 2);
    assert_eq!(info.holders[0].owner, java_holder);

    // The Java waiter gives up as Redisson does (§3.3): ours moves up by its 300 s.
    redis.cmd(&["ZINCRBY", &t, "-300000", &owner]);
    redis.cmd(&["ZREM", &t, java_waiter]);
    redis.cmd(&["LREM", &q, "0", java_waiter]);
    // The Java holder unlocks as Redisson does (§3.4): DEL, then `0` on the first waiter's
    // channel. Ours is woken and takes the lock.
    redis.cmd(&["DEL", name]);
    let published = redis.cmd(&["PUBLISH", &channel(&owner), "0"]).int();
    assert_eq!(published, Some(1));
    let until = Instant::now() + Duration::from_secs(2);
    while redis.cmd(&["HGET", name, &owner]).text() != Some("1") {
        assert!(Instant::now() < until, "not granted on the message");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Granted: out of the queue and the deadlines, the hash with a lease, the token for ever.
    assert_eq!(redis.cmd(&["EXISTS", &q, &t]).int(), Some(0));
    let pttl = redis.cmd(&["PTTL", name]).int().unwrap();
    assert!(pttl > 0 && pttl <= lease.as_millis() as i64, "{pttl}");
    let token = format!("redisson_lock_token:{{{name}}}");
    assert_eq!(redis.cmd(&["PTTL", &token]).int(), Some(-1));

    // A Java waiter queues behind our hold; our release wakes it on its own channel.
    let java_next = "0b1c2d3e-0000-4000-8000-000000000001:43";
    let messages = listen(&redis.url(), &channel(java_next));
    let next_deadline = redis.time_ms() + pttl as u64 + 300_000;
    redis.cmd(&["RPUSH", &q, java_next]);
    redis.cmd(&["ZADD", &t, &next_deadline.to_string(), java_next]);
    waiter.await.unwrap();
    assert_eq!(
        messages.recv_timeout(Duration::from_secs(2)).as_deref(),
        Ok("0")
    );
    assert_eq!(redis.cmd(&["EXISTS", name]).int(), Some(0));
    // Not popped: the Java waiter leaves the queue when it takes the lock.
    assert_eq!(queue(&redis, name), [java_next]);

    // A Rust waiter that times out behind it (the lock is free: the Java waiter's turn)
    // leaves the queue and the deadlines.
    let e = rust
        .fair_lock(name)
        .try_acquire(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(e.is_busy(), "{e:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(queue(&redis, name), [java_next]);
    assert_eq!(redis.cmd(&["ZCARD", &t]).int(), Some(1));

    // A Rust waiter first in the queue that gives up while the lock is free tells the next
    // one at once (Redisson's own give-up would not).
    redis.cmd(&["DEL", &q, &t]);
    redis.cmd(&["HSET", name, java_holder, "1"]);
    redis.cmd(&["PEXPIRE", name, "30000"]);
    let first = {
        let (rust, name) = (rust.clone(), name.to_owned());
        tokio::spawn(async move { rust.fair_lock(&name).acquire().await })
    };
    let first_owner = queued(&redis, name, 1).await.remove(0);
    let now = redis.time_ms();
    redis.cmd(&["RPUSH", &q, java_next]);
    redis.cmd(&["ZADD", &t, &(now + 900_000).to_string(), java_next]);
    // The holder vanishes without a message (its lease ended), then our waiter is cancelled.
    redis.cmd(&["DEL", name]);
    first.abort();
    assert_eq!(
        messages.recv_timeout(Duration::from_secs(2)).as_deref(),
        Ok("0")
    );
    assert_eq!(queue(&redis, name), [java_next]);
    assert_eq!(deadline(&redis, name, &first_owner), None);
    // Redisson's give-up arithmetic on the waiter behind it: minus our 300 s.
    assert_eq!(
        deadline(&redis, name, java_next),
        Some(now as i64 + 600_000)
    );

    // Fencing tokens rise with each Rust grant, in Redisson's token key.
    redis.cmd(&["DEL", &q, &t]);
    let first = rust.fair_lock(name).acquire().await.unwrap();
    let t1 = first.fencing_token().await.unwrap();
    first.release().await.unwrap();
    let second = rust.fair_lock(name).acquire().await.unwrap();
    let t2 = second.fencing_token().await.unwrap();
    assert!(t2 > t1, "{t2} after {t1}");
    assert_eq!(
        redis.cmd(&["GET", &token]).text(),
        Some(t2.to_string().as_str())
    );
    second.release().await.unwrap();

    // Foreign data at the queue: a typed error, nothing written.
    redis.cmd(&["DEL", &q, &t]);
    redis.cmd(&["SET", &q, "not a queue"]);
    let e = rust.fair_lock(name).acquire().await.unwrap_err();
    assert!(matches!(e, LockError::ForeignData { .. }), "{e:?}");
    assert_eq!(redis.cmd(&["EXISTS", name]).int(), Some(0));
    // Names that are another fair lock's queue or deadlines are refused.
    for bad in ["redisson_lock_queue:{x}", "redisson_lock_timeout:x"] {
        let e = rust.fair_lock(bad).acquire().await.unwrap_err();
        assert!(matches!(e, LockError::InvalidName { .. }), "{e:?}");
    }
}

/// Redisson's purge step as every Java script runs it first (redisson-wire.md §3): drops the
/// waiters at the head whose deadline passed (Java's clock: here the server's).
const JAVA_PURGE: &str = "local now = tonumber(ARGV[1]) \
    while true do \
      local head = redis.call('LINDEX', KEYS[1], 0) \
      if not head then return end \
      local d = redis.call('ZSCORE', KEYS[2], head) \
      if d and tonumber(d) <= now then redis.call('ZREM', KEYS[2], head); redis.call('LPOP', KEYS[1]) \
      else return end \
    end";

/// The crux of the `wait`: a Java `lock()` waiter at the head, whose deadline is nearly due,
/// is granted and lowers every deadline behind it by its 300 s (as Redisson does). The Rust
/// waiter behind it keeps its place: right after the grant, and while the Java holder keeps the
/// lock well past the Rust deadline as the grant left it, with Java purges running meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_waiter_keeps_its_place_when_a_java_head_lowers_the_deadlines() {
    let redis = RedisServer::start();
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    let name = "crux";
    let (q, t) = (queue_key(name), timeout_key(name));
    let purge = |now: u64| {
        redis.cmd(&["EVAL", JAVA_PURGE, "2", &q, &t, &now.to_string()]);
    };
    let holder = "0b1c2d3e-0000-4000-8000-000000000002:1";
    let head = "0b1c2d3e-0000-4000-8000-000000000002:2";
    redis.cmd(&["HSET", name, holder, "1"]);
    redis.cmd(&["PEXPIRE", name, "30000"]);
    // The Java head has waited long: its deadline is 500 ms away.
    let head_deadline = redis.time_ms() + 500;
    redis.cmd(&["RPUSH", &q, head]);
    redis.cmd(&["ZADD", &t, &head_deadline.to_string(), head]);
    let waiter = rust_turn(&rust, name, Duration::ZERO);
    let owner = queued(&redis, name, 2).await.remove(1);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The holder unlocks; the Java head is granted as Redisson grants (§3.2 step 2).
    redis.cmd(&["DEL", name]);
    redis.cmd(&["LPOP", &q]);
    redis.cmd(&["ZREM", &t, head]);
    redis.cmd(&["ZINCRBY", &t, "-300000", &owner]);
    redis.cmd(&["HSET", name, head, "1"]);
    redis.cmd(&["PEXPIRE", name, "30000"]);
    let granted = redis.time_ms();
    let left = deadline(&redis, name, &owner).unwrap() - granted as i64;
    assert!(left > 3_000, "the grant left the Rust waiter {left} ms");
    purge(redis.time_ms());
    assert_eq!(queue(&redis, name), [owner.as_str()]);

    // The Java holder keeps the lock past that deadline; Java purges keep running.
    let until = Instant::now() + Duration::from_millis(left as u64 + 1_500);
    while Instant::now() < until {
        purge(redis.time_ms());
        assert_eq!(queue(&redis, name), [owner.as_str()], "lost its place");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Java's unlock: DEL, `0` on the first waiter's channel. The Rust waiter takes its turn.
    redis.cmd(&["DEL", name]);
    let channel = format!("redisson_lock__channel:{{{name}}}:{owner}");
    redis.cmd(&["PUBLISH", &channel, "0"]);
    tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("woken by the message")
        .unwrap();
    eprintln!(
        "a Java head's grant left the Rust waiter behind it {left} ms; it kept its place through {} ms of Java purges",
        left + 1_500
    );
}

/// The waiter behind a Rust waiter that outlived its Redisson deadline (a holder kept the lock
/// longer than the deadline the queue gave it): the Rust waiter raised its own deadline to stay,
/// and raised the Java `lock()` waiter's behind it by as much, so its grant (which takes its
/// 300 s off every deadline, as Redisson's does) leaves the Java waiter a deadline still ahead
/// and its place. Without the second raise, the grant put the Java deadline in the past and the
/// next purge dropped it from the queue (review M3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_waiter_that_outlives_its_deadline_keeps_the_java_waiter_behind_it() {
    let redis = RedisServer::start();
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    let name = "outlived";
    let (q, t) = (queue_key(name), timeout_key(name));
    let purge = |now: u64| {
        redis.cmd(&["EVAL", JAVA_PURGE, "2", &q, &t, &now.to_string()]);
    };
    let holder = "0b1c2d3e-0000-4000-8000-000000000008:1";
    redis.cmd(&["HSET", name, holder, "1"]);
    redis.cmd(&["PEXPIRE", name, "30000"]);
    let waiter = rust_turn(&rust, name, Duration::ZERO);
    let r = queued(&redis, name, 1).await.remove(0);
    // As if R had queued minutes ago: its deadline is nearly due. A Java `lock()` waiter J
    // queues behind it as Redisson does: R's deadline plus its 300 s. In one script, so that
    // no attempt of R's falls between the two (the one it makes once its subscription is
    // confirmed came late on a loaded machine: it raised R's deadline before J queued, so
    // nothing raised J's, and R's grant left J's in the past).
    let d_r = redis.time_ms() + 2_000;
    let j = "0b1c2d3e-0000-4000-8000-000000000009:1";
    redis.cmd(&[
        "EVAL",
        "redis.call('ZADD', KEYS[1], 'XX', ARGV[1], ARGV[2]) \
         redis.call('RPUSH', KEYS[2], ARGV[3]) redis.call('ZADD', KEYS[1], ARGV[4], ARGV[3])",
        "2",
        &t,
        &q,
        &d_r.to_string(),
        &r,
        j,
        &(d_r + 300_000).to_string(),
    ]);
    // R's next attempt (woken at once by a stray message) raises its deadline: it lives on.
    let channel = format!("redisson_lock__channel:{{{name}}}:{r}");
    redis.cmd(&["PUBLISH", &channel, "0"]);
    let until = Instant::now() + Duration::from_secs(20);
    while deadline(&redis, name, &r) == Some(d_r as i64) {
        assert!(
            Instant::now() < until,
            "the Rust waiter never raised its deadline"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(queue(&redis, name), [r.as_str(), j]);
    // Java's unlock: DEL, `0` on the first waiter's channel. R is granted and takes 300 s off J.
    redis.cmd(&["DEL", name]);
    redis.cmd(&["PUBLISH", &channel, "0"]);
    waiter.await.unwrap();
    // A Java purge, once R's original deadline has passed.
    while redis.time_ms() <= d_r {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let now = redis.time_ms();
    purge(now);
    assert_eq!(queue(&redis, name), [j], "the Java waiter lost its place");
    let left = deadline(&redis, name, j).unwrap() - now as i64;
    assert!(left > 0, "{left}");
    eprintln!("after the Rust grant the Java waiter behind it had {left} ms left as head");
}

/// With real Redisson: a Java `lock()` waiter queued behind a Rust waiter that outlives its
/// Redisson deadline (both deadlines set as if they had queued minutes ago) keeps its place:
/// the Rust waiter is granted, holds past its original deadline, releases, and the Java
/// waiter gets the lock woken by that release's message. Before, the Rust grant left the
/// Java deadline in the past, the release's purge dropped the Java waiter, and it got the lock
/// only when its retry timer fired (review M3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_waiter_behind_a_rust_waiter_that_outlived_its_deadline_keeps_its_place() {
    let redis = RedisServer::start();
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    for version in REDISSON_VERSIONS {
        let java = Redisson::start(version, &redis.url(), Duration::from_secs(30));
        let name = format!("fair-outlived:{version}");
        let t = timeout_key(&name);
        java_fair_lock(&java, "w1", &name).await;
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let rust_waiter = {
            let (rust, name) = (rust.clone(), name.clone());
            tokio::spawn(async move {
                let guard = rust.fair_lock(&name).acquire().await.expect("fair acquire");
                released.await.unwrap();
                guard.release().await.unwrap();
            })
        };
        let r = queued(&redis, &name, 1).await.remove(0);
        let w2_sent = mono_ns();
        let w2 = java.send(&format!("fairlock w2 {name} -1"));
        let w2_owner = queued(&redis, &name, 2).await.remove(1);
        // As if both had queued minutes ago: R's deadline nearly due, w2's 300 s after it. In
        // one command, so that no attempt of R's falls between the two (it would raise R's
        // deadline alone, and R's grant would leave w2's in the past).
        let d_r = redis.time_ms() + 2_000;
        let d_w2 = (d_r + 300_000).to_string();
        redis.cmd(&["ZADD", &t, "XX", &d_r.to_string(), &r, &d_w2, &w2_owner]);
        // R's next attempt (woken at once by a stray message) raises its deadline.
        let channel = format!("redisson_lock__channel:{{{name}}}:{r}");
        redis.cmd(&["PUBLISH", &channel, "0"]);
        let until = Instant::now() + Duration::from_secs(20);
        while deadline(&redis, &name, &r) == Some(d_r as i64) {
            assert!(
                Instant::now() < until,
                "the Rust waiter never raised its deadline"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // w1 unlocks: R is granted, and holds until its original deadline has passed.
        java_fair_unlock(&java, "w1", &name).await;
        let until = Instant::now() + Duration::from_secs(20);
        while redis.cmd(&["HEXISTS", &name, &r]).int() != Some(1) {
            assert!(Instant::now() < until, "the Rust waiter was never granted");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        while redis.time_ms() <= d_r {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(queue(&redis, &name), [w2_owner.as_str()], "{version}");
        release.send(()).unwrap();
        rust_waiter.await.unwrap();
        let w2_granted = ok_ns(&w2.reply().await);
        woken_by_the_message(version, w2_sent, w2_granted);
        java_fair_unlock(&java, "w2", &name).await;
        eprintln!(
            "redisson {version}: the Java waiter behind a Rust waiter that outlived its deadline got the lock {:.0} ms after it queued",
            ms(w2_granted - w2_sent)
        );
    }
}

/// A Rust waiter that dies deep in the queue (here: written as a Rust waiter queues, never
/// refreshed) reaches the head with the deadline of the last live waiter granted ahead of it:
/// at most `wait` + `PLACE_TTL` (305 s) plus the lease left when the queue formed, however many
/// waiters were ahead of it. Before,
/// each live waiter ahead kept its deadline 305 s after the one ahead while each grant took off
/// 300 s, so the stall grew by 5 s per position (about 350 s behind 70; review M4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_rust_waiter_stalls_the_queue_no_longer_deep_in_it() {
    const AHEAD: usize = 70;
    let redis = RedisServer::start();
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    let name = "dead-deep";
    let t = timeout_key(name);
    let holder = "0b1c2d3e-0000-4000-8000-00000000000b:1";
    redis.cmd(&["HSET", name, holder, "1"]);
    redis.cmd(&["PEXPIRE", name, "30000"]);
    let mut live = Vec::new();
    for k in 1..=AHEAD {
        live.push(rust_turn(&rust, name, Duration::ZERO));
        queued(&redis, name, k).await;
    }
    // Give every live waiter one more attempt (each raises what it raises), then let the dead
    // one queue behind the tail as fair_acquire.lua queues: the tail's deadline plus 300 s.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let tail = queue(&redis, name).pop().unwrap();
    let dead = "dead-rust-waiter";
    let d = deadline(&redis, name, &tail).unwrap() + 300_000;
    redis.cmd(&["RPUSH", &queue_key(name), dead]);
    redis.cmd(&["ZADD", &t, &d.to_string(), dead]);
    // Java's unlock: the live waiters are granted in turn, each waking the next.
    let head = queue(&redis, name).remove(0);
    redis.cmd(&["DEL", name]);
    redis.cmd(&[
        "PUBLISH",
        &format!("redisson_lock__channel:{{{name}}}:{head}"),
        "0",
    ]);
    for waiter in live {
        waiter.await.unwrap();
    }
    assert_eq!(queue(&redis, name), [dead]);
    let stall = deadline(&redis, name, dead).unwrap() - redis.time_ms() as i64;
    // 300 s of `wait`, 5 s of `PLACE_TTL`, and the 30 s the holder's lease had left when the
    // queue formed (the first waiter's deadline came from it, as Redisson's does).
    assert!(
        stall <= 335_000,
        "a dead waiter behind {AHEAD} stalls the free lock {stall} ms"
    );
    eprintln!("a dead Rust waiter behind {AHEAD} live ones, at the head: {stall} ms until purged");
}

/// On a Redis 7 cluster Redisson tells each fair waiter its turn with `SPUBLISH` on the waiter's
/// own shard channel (its `AUTO` sharded mode), as we do: wake-ups cross the languages both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_on_a_cluster_with_sharded_pub_sub() {
    use lock_runtime::Layout;
    use lock_tests::topology::RedisCluster;

    let cluster = RedisCluster::start(3, 0);
    let rust = LockClient::cluster_builder([cluster.seed_url()])
        .layout(Layout::Redisson)
        .build()
        .await
        .expect("connect to the cluster");
    for version in REDISSON_VERSIONS {
        let java = Redisson::start_cluster(version, &cluster.urls(), Duration::from_secs(30));
        for i in 0..2 {
            let name = format!("fair-sharded:{version}:{i}");
            java_fair_lock(&java, "w1", &name).await;
            let waiter = {
                let (rust, name) = (rust.clone(), name.clone());
                super::timed(async move {
                    rust.fair_lock(&name)
                        .try_acquire(Duration::from_secs(20))
                        .await
                })
            };
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(
                !waiter.is_finished(),
                "{version}: Rust got a lock Java holds"
            );
            let unlocked = mono_ns();
            java_fair_unlock(&java, "w1", &name).await;
            let (acquired, guard) = waiter.await.unwrap();
            let guard = guard.expect("woken by Java's SPUBLISH");
            let java_to_rust = acquired.saturating_sub(unlocked);

            let java_wait = java.send(&format!("fairtry w2 {name} 20000 -1"));
            tokio::time::sleep(Duration::from_millis(300)).await;
            let released = mono_ns();
            guard.release().await.unwrap();
            let rust_to_java = ok_ns(&java_wait.reply().await).saturating_sub(released);
            java_fair_unlock(&java, "w2", &name).await;
            assert!(
                java_to_rust < 1_000_000_000,
                "{version}: {} ms",
                ms(java_to_rust)
            );
            assert!(
                rust_to_java < 2_000_000_000,
                "{version}: {} ms",
                ms(rust_to_java)
            );
            eprintln!(
                "redisson {version} fair lock on a cluster: wake-up Java→Rust {:.2} ms, Rust→Java {:.2} ms",
                ms(java_to_rust),
                ms(rust_to_java)
            );
        }
    }
}
