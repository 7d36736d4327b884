//! Rust and Java services lock the same products: `Layout::Redisson` against real Redisson (the
//! newest 3.x and 4.x from Maven Central, each in a JVM of its own, see `lock_tests::redisson`).
//! Every test runs against both versions.

mod fair;
mod rwlock;
mod semaphore;

use std::time::{Duration, Instant};

use lock_runtime::{Layout, LockClient, LockGuard, LossReason};
use lock_tests::redisson::REDISSON_VERSIONS;
use lock_tests::{RedisServer, Redisson, mono_ns};

/// `acquire` in a task of its own that notes when it returned (`CLOCK_MONOTONIC` nanoseconds,
/// which the JVMs' `System.nanoTime()` reads too): a waiter whose wake-up a test times.
fn timed<T: Send + 'static>(
    acquire: impl std::future::Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<(u64, T)> {
    tokio::spawn(async move {
        let out = acquire.await;
        (mono_ns(), out)
    })
}

async fn rust_client(url: &str, watchdog: Duration) -> LockClient {
    LockClient::builder(url)
        .layout(Layout::Redisson)
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("connect")
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The nanoseconds of a driver's `ok <nanos>` reply.
fn ok_ns(reply: &str) -> u64 {
    reply
        .strip_prefix("ok ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("expected `ok <nanos>`, got `{reply}`"))
}

/// A JVM for each Redisson version, on `redis`, with a 30 s lock watchdog.
fn start_javas(redis: &RedisServer) -> Vec<Redisson> {
    REDISSON_VERSIONS
        .iter()
        .map(|v| Redisson::start(v, &redis.url(), Duration::from_secs(30)))
        .collect()
}

/// A connection of its own to `url`.
async fn connect(url: String) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Two workers in each of `javas` (each sent `java_command(worker)`, a driver `…contend`
/// command) and two Rust tasks here increment `counter` `rounds` times each with a non-atomic
/// GET and SET, a Rust round holding a guard from `acquire`: every Java worker reports its
/// rounds done and no increment is lost.
async fn never_lose_an_increment<A, F>(
    redis: &RedisServer,
    javas: &[Redisson],
    counter: &'static str,
    rounds: u32,
    java_command: impl Fn(&str) -> String,
    acquire: A,
) where
    A: Fn() -> F + Clone + Send + 'static,
    F: Future<Output = LockGuard> + Send,
{
    let tickets: Vec<_> = (javas.iter())
        .flat_map(|java| ["w1", "w2"].map(|w| java.send(&java_command(w))))
        .collect();
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let (acquire, url) = (acquire.clone(), redis.url());
            tokio::spawn(async move {
                let mut conn = connect(url).await;
                for _ in 0..rounds {
                    let guard = acquire().await;
                    let value: Option<u64> = redis::cmd("GET")
                        .arg(counter)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    if rand::random::<bool>() {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    let _: () = redis::cmd("SET")
                        .arg(counter)
                        .arg(value.unwrap_or(0) + 1)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for ticket in tickets {
        assert_eq!(ticket.reply().await, format!("ok {rounds}"));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let workers = 2 * javas.len() as u32 + 2;
    let total = redis.cmd(&["GET", counter]).text().map(str::to_owned);
    assert_eq!(
        total,
        Some((workers * rounds).to_string()),
        "{counter}: lost increments"
    );
}

/// Java's worker `w1` holds `name` (taken by the caller); a Rust task waits for it and is woken
/// by Java's unlock, well before the 30 s lease could end it. The Rust guard, and the delay
/// from sending the unlock (Java's own reply may come after our wake-up) to our grant.
async fn java_unlock_wakes_rust(
    java: &Redisson,
    rust: &LockClient,
    name: &str,
) -> (LockGuard, u64) {
    let waiter = {
        let (rust, name) = (rust.clone(), name.to_owned());
        timed(async move { rust.lock(&name).try_acquire(Duration::from_secs(20)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "{name}: Rust got a lock Java holds");
    let unlocked = mono_ns();
    java.unlock("w1", name).await.expect("Java unlock");
    let (acquired, guard) = waiter.await.unwrap();
    let guard = guard.expect("the Rust waiter gets the lock");
    let delay = acquired.saturating_sub(unlocked);
    assert!(
        delay < 2_000_000_000,
        "{} {name}: Rust woken {} ms after Java's unlock",
        java.version(),
        ms(delay)
    );
    (guard, delay)
}

/// `guard` holds `name`; a Java `tryLock` on worker `w2` waits and is woken by our release.
/// The delay from our release to Java's grant.
async fn rust_release_wakes_java(java: &Redisson, guard: LockGuard, name: &str) -> u64 {
    let java_wait = java.send(&format!("trylock w2 {name} 20000 -1"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(java.is_locked(name).await);
    let released = mono_ns();
    guard.release().await.unwrap();
    let acquired = ok_ns(&java_wait.reply().await);
    let delay = acquired.saturating_sub(released);
    assert!(
        delay < 2_000_000_000,
        "{} {name}: Java woken {} ms after our release",
        java.version(),
        ms(delay)
    );
    delay
}

/// A Java holder excludes a Rust acquirer and its unlock wakes the Rust waiter at once; a Rust
/// holder excludes a Java `tryLock` and its release wakes the Java waiter at once (both leases
/// are 30 s: only the unlock message can explain a prompt wake-up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_rust_exclude_and_wake_each_other() {
    let redis = RedisServer::start();
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    for version in REDISSON_VERSIONS {
        let java = Redisson::start(version, &redis.url(), Duration::from_secs(30));
        let name = format!("stock:{version}");

        // Java holds; Rust waits and is woken by Java's unlock.
        java.lock("w1", &name).await;
        let busy = rust
            .lock(&name)
            .try_acquire(Duration::ZERO)
            .await
            .unwrap_err();
        assert!(busy.is_busy(), "{version}: {busy:?}");
        let (guard, java_to_rust) = java_unlock_wakes_rust(&java, &rust, &name).await;

        // Rust holds; a Java tryLock waits and is woken by our release.
        assert!(!java.held("w2", &name).await);
        let rust_to_java = rust_release_wakes_java(&java, guard, &name).await;
        assert!(java.held("w2", &name).await);
        java.unlock("w2", &name).await.expect("Java unlock");
        eprintln!(
            "redisson {version}: wake-up Java→Rust {:.2} ms, Rust→Java {:.2} ms",
            ms(java_to_rust),
            ms(rust_to_java)
        );
    }
}

/// Three processes (a JVM with Redisson 3, a JVM with Redisson 4, and this Rust process), two
/// workers each, increment one counter with a non-atomic GET and SET under the shared lock: no
/// increment is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_never_lose_an_increment() {
    const ROUNDS: u32 = 40;
    let redis = RedisServer::start();
    let javas = start_javas(&redis);
    let rust = rust_client(&redis.url(), Duration::from_secs(30)).await;
    let started = Instant::now();
    never_lose_an_increment(
        &redis,
        &javas,
        "counter",
        ROUNDS,
        |w| format!("contend {w} cart counter {ROUNDS}"),
        move || {
            let rust = rust.clone();
            async move { rust.lock("cart").acquire().await.unwrap() }
        },
    )
    .await;
    eprintln!(
        "{} locked increments by 2 JVMs and 1 Rust process in {:?}",
        6 * ROUNDS,
        started.elapsed()
    );
}

/// A Java holder killed with SIGKILL: its watchdog stops, and the Rust waiter gets the lock once
/// the lease (1.5 s here) runs out. Watchdog renewal works on both sides: each holds for well
/// past its lease and the other side stays excluded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdogs_renew_on_both_sides_and_a_killed_java_holder_frees_the_lock() {
    let redis = RedisServer::start();
    let lease = Duration::from_millis(1500);
    let rust = rust_client(&redis.url(), lease).await;
    for version in REDISSON_VERSIONS {
        let name = format!("sku:{version}");
        let java = Redisson::start(version, &redis.url(), lease);
        java.lock("w1", &name).await;
        tokio::time::sleep(lease * 2).await;
        let busy = rust.lock(&name).try_acquire(Duration::ZERO).await;
        assert!(
            busy.unwrap_err().is_busy(),
            "{version}: Java's watchdog renews"
        );

        // Rust holds past its lease too.
        java.unlock("w1", &name).await.unwrap();
        let guard = rust.lock(&name).acquire().await.unwrap();
        tokio::time::sleep(lease * 2).await;
        assert!(java.try_lock("w2", &name, Duration::ZERO).await.is_none());
        guard.release().await.unwrap();

        java.lock("w1", &name).await;
        let killed = Instant::now();
        java.kill9();
        let guard = rust
            .lock(&name)
            .try_acquire(Duration::from_secs(10))
            .await
            .expect("the lock comes free when the dead holder's lease ends");
        let after = killed.elapsed();
        assert!(
            after < lease + Duration::from_secs(2),
            "{version}: {after:?}"
        );
        guard.release().await.unwrap();
        eprintln!("redisson {version}: lock free {after:?} after kill -9 of the Java holder");
    }
}

/// Fencing tokens keep rising whichever side takes the lock (Java through `RFencedLock`), and
/// a force-unlock from either side is seen by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_and_force_unlock_cross_the_languages() {
    let redis = RedisServer::start();
    let rust = rust_client(&redis.url(), Duration::from_millis(600)).await;
    for version in REDISSON_VERSIONS {
        let name = format!("fenced:{version}");
        let java = Redisson::start(version, &redis.url(), Duration::from_secs(30));
        let t1 = java.fenced_lock("w1", &name).await;
        java.fenced_unlock("w1", &name).await;
        let guard = rust.lock(&name).acquire().await.unwrap();
        let t2 = guard.fencing_token().await.unwrap();
        assert!(t2 > t1, "{version}: {t2} after Java's {t1}");

        // Java force-unlocks a Rust holder: its guard learns it lost the lock.
        assert!(java.force_unlock(&name).await);
        let lost = tokio::time::timeout(Duration::from_secs(3), guard.lost())
            .await
            .expect("the watchdog notices");
        assert_eq!(
            lock_tests::loss_reason(&lost),
            Some(LossReason::Deleted),
            "{lost:?}"
        );
        drop(guard);

        let t3 = java.fenced_lock("w1", &name).await;
        assert!(t3 > t2, "{version}: Java's {t3} after our {t2}");
        // Rust force-unlocks a Java holder.
        assert!(rust.lock(&name).force_unlock().await.unwrap());
        assert!(!java.is_locked(&name).await);
        assert!(!java.held("w1", &name).await);
        let unlock = java.unlock("w1", &name).await;
        assert!(unlock.is_err(), "{version}: {unlock:?}");

        // A Rust force unlock wakes a Java waiter at once (Redisson reads the message as a
        // number), not when the 30 s watchdog lease of the holder it saw would have ended.
        java.lock("w1", &name).await;
        let waiting = java.send(&format!("trylock w2 {name} 20000 -1"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let forced = Instant::now();
        assert!(rust.lock(&name).force_unlock().await.unwrap());
        let reply = waiting.reply().await;
        assert!(reply.starts_with("ok "), "{version}: {reply}");
        eprintln!(
            "{version}: a Java waiter got the lock {:?} after a Rust force unlock",
            forced.elapsed()
        );
        assert!(forced.elapsed() < Duration::from_secs(5), "{version}");
        java.unlock("w2", &name).await.unwrap();
    }
}

/// What a fleet of Java (`RFencedLock`) and Rust services sharing one name gets from its fencing
/// counter when a failover loses the counter's last writes: the master promoted is a replica
/// that had not received the last two grants' writes, its clock in step with the old master's or
/// 5 s behind it (played here on one server, restarted empty with the counter as the replica had
/// it; its clock shifted by `lock_tests::topology::clock_skew`). In Redisson's layout a token
/// is the counter's next value (Java's `INCR`) or the granting server's clock (a Rust grant),
/// never the failover epoch, which Java's script cannot carry: what follows is measured, and
/// SAFETY.md (promise 16, and "What Redis gives up") states it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_fleets_tokens_after_a_failover_that_lost_the_counters_last_writes() {
    let mut redis = RedisServer::start();
    for version in REDISSON_VERSIONS {
        for skew_us in [0, -5_000_000] {
            let name = format!("mixed:{version}:{skew_us}");
            let counter = format!("redisson_lock_token:{{{name}}}");
            let rust = rust_client(&redis.url(), Duration::from_secs(10)).await;
            let java = Redisson::start(version, &redis.url(), Duration::from_secs(30));
            let java_grant = async || {
                let token = java.fenced_lock("w1", &name).await;
                java.fenced_unlock("w1", &name).await;
                token
            };
            let rust_grant = async || {
                let guard = rust.lock(&name).acquire().await.expect("acquire");
                let token = guard.fencing_token().await.expect("a token");
                guard.release().await.expect("release");
                token
            };

            // Before: the languages take turns, each token above the one before (promise 16).
            let (j1, r1) = (java_grant().await, rust_grant().await);
            let replicated = redis
                .cmd(&["GET", &counter])
                .text()
                .expect("the counter")
                .to_owned();
            let (j2, r2) = (java_grant().await, rust_grant().await);
            assert!(
                j1 < r1 && r1 < j2 && j2 < r2,
                "{version}: {j1} {r1} {j2} {r2}"
            );

            // The failover: the promoted replica's counter misses the last two grants.
            if skew_us == 0 {
                redis.restart();
            } else {
                redis.restart_with_clock(skew_us);
            }
            redis.cmd(&["SET", &counter, &replicated]);

            // After: a Java grant first, then a Rust one, then Java again.
            let j3 = java_grant().await;
            let r3 = rust_grant().await;
            let j4 = java_grant().await;
            eprintln!(
                "{version}, promoted clock {skew_us:+} µs: before {j1} {r1} {j2} {r2}; \
                 after: Java {j3}, Rust {r3}, Java {j4}"
            );
            // Java's `INCR` on the lagging counter issues j2 again, below r2: the legitimate
            // Java holder is refused by a fenced store that saw r2.
            assert_eq!(j3, j2, "{version}: Java's first token after the failover");
            if skew_us == 0 {
                // A Rust grant floors its token by the clock: above every token issued before
                // the failover, and Java's next INCR goes on from there.
                assert!(r3 > r2 && j4 > r3, "{version}: {r2} {r3} {j4}");
            } else {
                // With the promoted clock behind, the Rust grant's floor is behind too: its
                // token, and Java's after it, stay below r2 until that clock passes r2.
                assert!(r3 < r2 && j4 < r2 && j4 > r3, "{version}: {r2} {r3} {j4}");
                let clock_passed = async {
                    // The promoted server's own clock (`TIME`), to the millisecond.
                    while redis.time_ms() * 1_000 <= r2 {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                };
                tokio::time::timeout(Duration::from_secs(30), clock_passed)
                    .await
                    .expect("the promoted clock passes the last token");
                let r4 = rust_grant().await;
                assert!(r4 > r2, "{version}: {r4} once the clock passed {r2}");
                redis.restart();
            }
        }
    }
}

/// On a Redis 7 cluster Redisson publishes with `SPUBLISH` (its `AUTO` sharded mode), as we
/// do: wake-ups cross the languages in both directions without waiting for a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_sharded_pub_sub() {
    use lock_tests::topology::RedisCluster;

    let cluster = RedisCluster::start(3, 0);
    let rust = LockClient::cluster_builder([cluster.seed_url()])
        .layout(Layout::Redisson)
        .build()
        .await
        .expect("connect to the cluster");
    for version in REDISSON_VERSIONS {
        let java = Redisson::start_cluster(version, &cluster.urls(), Duration::from_secs(30));
        for i in 0..3 {
            let name = format!("sharded:{version}:{i}");
            java.lock("w1", &name).await;
            let (guard, _) = java_unlock_wakes_rust(&java, &rust, &name).await;
            rust_release_wakes_java(&java, guard, &name).await;
            java.unlock("w2", &name).await.unwrap();
        }
    }
}
