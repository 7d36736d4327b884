//! `Layout::Redisson` on the wire, without a JVM: the test plays the Java side with the raw
//! commands Redisson's scripts run (restated in `shared/research/redisson-wire.md`, §1 and §5),
//! and checks the bytes our client leaves on Redis. `interop.rs` checks the same
//! against real Redisson.

use std::time::Duration;

use crate::common::eventually;
use lock_runtime::{Layout, LockClient, LockError, LossReason};
use lock_tests::{RedisServer, Resp};

async fn redisson_client(redis: &RedisServer, watchdog: Duration) -> LockClient {
    lock_tests::client_with(redis, |b| {
        b.layout(Layout::Redisson).watchdog_timeout(watchdog)
    })
    .await
}

/// A Java `RLock.lock()` by owner `field`: takes the hash if free or ours, else returns PTTL.
fn java_lock(redis: &RedisServer, name: &str, field: &str, lease_ms: u64) -> bool {
    let script = "if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then \
                    redis.call('HINCRBY', KEYS[1], ARGV[2], 1); redis.call('PEXPIRE', KEYS[1], ARGV[1]); return -3 \
                  end; return redis.call('PTTL', KEYS[1])";
    redis
        .cmd(&["EVAL", script, "1", name, &lease_ms.to_string(), field])
        .int()
        == Some(-3)
}

/// A Java `unlock()` of a hold with count 1: `DEL` and publish `0`.
fn java_unlock(redis: &RedisServer, name: &str, field: &str) {
    assert_eq!(redis.cmd(&["HEXISTS", name, field]).int(), Some(1));
    redis.cmd(&["DEL", name]);
    redis.cmd(&[
        "PUBLISH",
        &format!("redisson_lock__channel:{{{name}}}"),
        "0",
    ]);
}

#[tokio::test]
async fn the_lock_is_a_redisson_hash_with_its_channel_and_token_key() {
    let redis = RedisServer::start();
    let locks = redisson_client(&redis, Duration::from_secs(30)).await;
    let guard = locks.lock("stock:42").acquire().await.unwrap();

    // The hash is the name itself; its one field is `<client uuid>:<n>` with count 1.
    let fields = redis.cmd(&["HGETALL", "stock:42"]);
    let fields = fields.items();
    assert_eq!(fields.len(), 2, "one owner field: {fields:?}");
    let owner = fields[0].text().unwrap();
    let (client, n) = owner.rsplit_once(':').unwrap();
    assert_eq!(client, locks.id());
    assert!(uuid_like(client), "{client}");
    assert!(n.parse::<u64>().is_ok(), "{owner}");
    assert_eq!(fields[1].text(), Some("1"));
    let pttl = redis.cmd(&["PTTL", "stock:42"]).int().unwrap();
    assert!(
        pttl > 25_000 && pttl <= 30_000,
        "the watchdog lease: {pttl}"
    );

    // RFencedLock's token key, with no TTL, holding the guard's token.
    let token = redis.cmd(&["GET", "redisson_lock_token:{stock:42}"]);
    assert_eq!(
        token.text().and_then(|t| t.parse::<u64>().ok()),
        Some(guard.fencing_token().await.unwrap())
    );
    assert_eq!(
        redis.cmd(&["PTTL", "redisson_lock_token:{stock:42}"]).int(),
        Some(-1)
    );
    // Nothing under our own prefix.
    assert!(redis.keys("lock:*").is_empty());

    guard.release().await.unwrap();
    assert_eq!(redis.cmd(&["EXISTS", "stock:42"]).int(), Some(0));
}

fn uuid_like(s: &str) -> bool {
    let parts: Vec<_> = s.split('-').map(str::len).collect();
    parts == [8, 4, 4, 4, 12] && s.chars().all(|c| c == '-' || c.is_ascii_hexdigit())
}

#[tokio::test]
async fn a_java_holder_excludes_us_and_its_unlock_wakes_our_waiter() {
    let redis = RedisServer::start();
    let locks = redisson_client(&redis, Duration::from_secs(30)).await;
    let java = "0a3e7a38-7f55-4e6c-9d8a-6b1f0e2d4c11:57";
    assert!(java_lock(&redis, "sku-1", java, 30_000));

    let busy = locks
        .lock("sku-1")
        .try_acquire(Duration::ZERO)
        .await
        .unwrap_err();
    assert!(busy.is_busy(), "{busy:?}");

    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let g = locks.lock("sku-1").acquire().await.unwrap();
            (lock_tests::mono_ns(), g)
        })
    };
    let subscribed = eventually(Duration::from_secs(2), || {
        redis.pubsub_channels("redisson_lock__channel:*") == ["redisson_lock__channel:{sku-1}"]
    })
    .await;
    assert!(subscribed, "{:?}", redis.pubsub_channels("*"));
    assert!(!waiter.is_finished());
    let unlocked = lock_tests::mono_ns();
    java_unlock(&redis, "sku-1", java);
    let (woken, guard) = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("Java's unlock message wakes the waiter, long before the 30 s lease")
        .unwrap();
    assert!(woken - unlocked < 1_000_000_000);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn our_release_publishes_what_a_java_waiter_listens_for_and_java_can_then_lock() {
    let redis = RedisServer::start();
    let locks = redisson_client(&redis, Duration::from_secs(30)).await;
    let java = "0a3e7a38-7f55-4e6c-9d8a-6b1f0e2d4c11:58";
    let guard = locks.lock("sku-2").acquire().await.unwrap();
    assert!(!java_lock(&redis, "sku-2", java, 30_000), "we hold it");

    let client = redis::Client::open(redis.url()).unwrap();
    let (mut sink, mut stream) = client.get_async_pubsub().await.unwrap().split();
    sink.subscribe("redisson_lock__channel:{sku-2}")
        .await
        .unwrap();
    guard.release().await.unwrap();
    let msg = tokio::time::timeout(
        Duration::from_secs(2),
        futures_util::StreamExt::next(&mut stream),
    )
    .await
    .expect("an unlock message")
    .unwrap();
    assert_eq!(msg.get_channel_name(), "redisson_lock__channel:{sku-2}");
    // Redisson parses the payload as a Java long: `0` is UNLOCK_MESSAGE.
    assert_eq!(msg.get_payload::<String>().unwrap(), "0");
    assert!(java_lock(&redis, "sku-2", java, 30_000));
}

#[tokio::test]
async fn a_java_force_unlock_is_a_loss_and_tokens_keep_rising_with_java_incr() {
    let redis = RedisServer::start();
    // A watchdog period of 333 ms: short enough to notice soon, long enough that a loaded
    // machine's slow round trip is not itself taken for a loss (`RenewalFailed`).
    let locks = redisson_client(&redis, Duration::from_secs(1)).await;
    let first = locks.lock("sku-3").acquire().await.unwrap();
    let t1 = first.fencing_token().await.unwrap();

    // Java's forceUnlock(): DEL and publish.
    redis.cmd(&["DEL", "sku-3"]);
    redis.cmd(&["PUBLISH", "redisson_lock__channel:{sku-3}", "0"]);
    let lost = tokio::time::timeout(Duration::from_secs(3), first.lost())
        .await
        .expect("the watchdog notices within its period");
    assert_eq!(
        lock_tests::loss_reason(&lost),
        Some(LossReason::Deleted),
        "{lost:?}"
    );
    drop(first);

    // A Java RFencedLock grant: INCR of the same key.
    let java = redis
        .cmd(&["INCR", "redisson_lock_token:{sku-3}"])
        .int()
        .unwrap();
    assert!(java as u64 > t1);
    let second = locks.lock("sku-3").acquire().await.unwrap();
    assert!(second.fencing_token().await.unwrap() > java as u64);
    assert_eq!(
        redis.cmd(&["PTTL", "redisson_lock_token:{sku-3}"]).int(),
        Some(-1)
    );
    second.release().await.unwrap();
}

#[tokio::test]
async fn names_and_primitives_redisson_cannot_share_are_typed_errors() {
    let redis = RedisServer::start();
    let locks = redisson_client(&redis, Duration::from_secs(30)).await;
    for name in ["a{b", "a}b", "{}x"] {
        let e = locks
            .lock(name)
            .try_acquire(Duration::ZERO)
            .await
            .unwrap_err();
        assert!(matches!(e, LockError::InvalidName { .. }), "{name}: {e:?}");
    }
    let e = locks
        .fair_lock("redisson_lock_queue:{x}")
        .try_acquire(Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(e, LockError::InvalidName { .. }), "{e:?}");
    // Another fair lock's queue is refused to a mutex too: taking it would make fair lock `x`
    // fail with foreign data.
    let e = locks
        .lock("redisson_lock_queue:{x}")
        .try_acquire(Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(e, LockError::InvalidName { .. }), "{e:?}");
    assert_eq!(
        redis.cmd(&["EXISTS", "redisson_lock_queue:{x}"]).int(),
        Some(0)
    );
    // Another semaphore's lease set (`suffixName("x:{t}", "timeout")`).
    let e = locks
        .semaphore("x:{t}:timeout", 2)
        .try_acquire(Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(e, LockError::InvalidName { .. }), "{e:?}");
    let e = locks.scan("*").next_batch().await.unwrap_err();
    assert!(matches!(e, LockError::InvalidConfig(_)), "{e:?}");
    // A name with its own tag works, and its keys share the tag's slot.
    let g = locks.lock("order:{user:7}").acquire().await.unwrap();
    assert_eq!(redis.cmd(&["EXISTS", "order:{user:7}"]).int(), Some(1));
    assert!(matches!(
        redis.cmd(&["GET", "redisson_lock_token:order:{user:7}"]),
        Resp::Bulk(Some(_))
    ));
    g.release().await.unwrap();
    // Nothing was written for the refused names.
    assert_eq!(
        redis.cmd(&["DBSIZE"]).int(),
        Some(1),
        "only the token key is left"
    );
}

/// A plain `RSemaphore` records no holders, so only the Rust hold's own marker keeps its
/// releases exact: the watchdog's release at `max_hold` gives the permit back, the guard's own
/// release afterwards gives nothing more, and a retried acquire takes nothing more.
#[tokio::test]
async fn a_plain_semaphore_gives_each_permit_back_once() {
    let redis = RedisServer::start();
    let locks = redisson_client(&redis, Duration::from_secs(1)).await;
    let exports = locks.semaphore("exports", 2).without_leases();
    let count = || redis.cmd(&["GET", "exports"]).text().map(str::to_owned);

    let capped = exports
        .acquire_with(lock_runtime::LockOptions::new().max_hold(Duration::from_millis(200)))
        .await
        .unwrap();
    assert_eq!(count().as_deref(), Some("1"));
    let marker = format!("{{exports}}:{}", capped.owner());
    assert_eq!(redis.cmd(&["EXISTS", &marker]).int(), Some(1), "{marker}");
    let lost = tokio::time::timeout(Duration::from_secs(3), capped.lost())
        .await
        .expect("max_hold ends the hold");
    assert_eq!(
        lock_tests::loss_reason(&lost),
        Some(LossReason::MaxHoldExceeded)
    );
    assert!(
        eventually(Duration::from_secs(3), || count().as_deref() == Some("2")).await,
        "the watchdog gives the permit back"
    );
    // The guard's own release finds the hold gone: the count stays at the capacity.
    let _ = capped.release().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(count().as_deref(), Some("2"));
    assert_eq!(redis.cmd(&["EXISTS", &marker]).int(), Some(0));

    // Both permits taken, then given back once each, however often released.
    let a = exports.acquire().await.unwrap();
    let b = exports.acquire().await.unwrap();
    assert_eq!(count().as_deref(), Some("0"));
    a.release().await.unwrap();
    drop(b);
    assert!(eventually(Duration::from_secs(3), || count().as_deref() == Some("2")).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(count().as_deref(), Some("2"));
    assert!(redis.keys("{exports}:plain:*").is_empty());
}

/// The bytes Redis received so far (`INFO stats`).
fn input_bytes(redis: &RedisServer) -> u64 {
    let info = redis.cmd(&["INFO", "stats"]);
    let text = info.text().unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("total_net_input_bytes:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_net_input_bytes")
}

/// An `RPermitExpirableSemaphore` hold's owner id carries one 16-byte id per permit, so a
/// request for more permits than the capacity is refused before that id is built and sent
/// (`acquire_many(1_000_000)` used to send a 33 MB id for the script to answer "exceeds"),
/// and a hold is capped at `MAX_PERMITS_PER_HOLD` permits whatever the capacity.
#[tokio::test]
async fn permits_beyond_the_capacity_are_refused_before_an_id_is_sent() {
    let redis = RedisServer::start();
    let locks = redisson_client(&redis, Duration::from_secs(30)).await;
    let sem = locks.semaphore("bulk", 3);
    let before = input_bytes(&redis);
    let e = sem.acquire_many(1_000_000, Default::default()).await;
    assert!(
        matches!(
            e,
            Err(LockError::InvalidPermits {
                requested: 1_000_000,
                ..
            })
        ),
        "{:?}",
        e.map(|g| g.permits())
    );
    let sent = input_bytes(&redis) - before;
    assert!(sent < 100_000, "{sent} bytes sent to refuse it");
    // Above the capacity in force: refused, with that capacity.
    let e = sem.acquire_many(5, Default::default()).await;
    assert!(
        matches!(
            e,
            Err(LockError::InvalidPermits {
                requested: 5,
                capacity: 3,
                ..
            })
        ),
        "{:?}",
        e.map(|g| g.permits())
    );
    // A capacity raised in Redis (Java's `setPermits`) is the one in force: within it, granted.
    sem.set_capacity(10).await.unwrap();
    let g = sem.acquire_many(5, Default::default()).await.unwrap();
    assert_eq!(g.permits(), 5);
    g.release().await.unwrap();
    // Above the cap per hold, refused even within the capacity.
    let big = locks.semaphore("huge", 100_000);
    let e = big.acquire_many(50_000, Default::default()).await;
    assert!(
        matches!(
            e,
            Err(LockError::InvalidPermits {
                requested: 50_000,
                capacity: 1024,
                ..
            })
        ),
        "{:?}",
        e.map(|g| g.permits())
    );
    assert!(redis.keys("{huge}:timeout").is_empty());
}

/// After Java's `drainPermits()` (or `addPermits(-k)`) leaves fewer permits than asked for and
/// none leased, a Rust `acquire()` waits, as Java's does, and is woken by Java's
/// `addPermits` (its message on `redisson_sc:{N}`), instead of failing with `InvalidPermits`.
/// A request above the handle's capacity as well is still refused.
#[tokio::test]
async fn a_drained_semaphore_makes_acquire_wait_not_fail() {
    let redis = RedisServer::start();
    let locks = redisson_client(&redis, Duration::from_secs(30)).await;
    let sem = locks.semaphore("drained", 3);
    assert_eq!(sem.available().await.unwrap(), 3);
    // Java's drainPermits(): N = 0, nothing leased.
    redis.cmd(&["SET", "drained", "0"]);
    let e = sem.try_acquire(Duration::ZERO).await.unwrap_err();
    assert!(e.is_busy(), "{e:?}");
    let e = sem.acquire_many(4, Default::default()).await.unwrap_err();
    assert!(
        matches!(e, LockError::InvalidPermits { requested: 4, .. }),
        "{e:?}"
    );
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "{:?}",
        waiter.await.map(|r| r.map(|g| g.permits()))
    );
    // Java's addPermits(1): INCRBY and the new count on the channel.
    redis.cmd(&["INCRBY", "drained", "1"]);
    redis.cmd(&["PUBLISH", "redisson_sc:{drained}", "1"]);
    let g = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("granted once Java added a permit")
        .unwrap()
        .unwrap();
    assert_eq!(g.permits(), 1);
    g.release().await.unwrap();
}

/// A client of Redisson's layout whose watchdog renews every 20 s, sharing its read/write
/// locks with Java services whose `lockWatchdogTimeout` is 1 s.
async fn reader_client(redis: &RedisServer) -> LockClient {
    lock_tests::client_with(redis, |b| {
        b.layout(Layout::Redisson)
            .watchdog_timeout(Duration::from_secs(60))
            .redisson_watchdog_timeout(Duration::from_secs(1))
    })
    .await
}

/// The timeout key of read hold `owner` (count 1) of the Redisson read/write lock `name`.
fn read_timeout_key(name: &str, owner: &str) -> String {
    format!("{{{name}}}:{owner}:rwlock_timeout:1")
}

/// The review's M1: a Java reader's renewal sets the shared hash's TTL to Java's watchdog
/// timeout (Redisson 4.x), and 3.x also re-arms every reader's timeout key to it, ours
/// included. The Java reader then dies. A writer must not get in while the Rust reader has not
/// been told: the Rust reader renews at the Java fleet's cadence (a third of the
/// `redisson_watchdog_timeout`, not of its own 60 s), so the hash is restored before it runs
/// out; and if that renewal were late, the reader would be lost by the clock before the hash
/// could expire.
#[tokio::test]
async fn a_java_readers_short_renewal_never_lets_a_writer_in_under_a_rust_reader() {
    let redis = RedisServer::start();
    let rust = reader_client(&redis).await;
    let other = redisson_client(&redis, Duration::from_secs(30)).await;
    let reader = rust.rw_lock("rw").read().acquire().await.unwrap();
    // A grant is sure only until a Java renewal could have cut the hash: 1 s, not 60 s.
    assert!(reader.remaining_validity() <= Duration::from_secs(1));
    // Java reader J: Redisson's read acquire, then its watchdog's renewal with a 1 s lease
    // (`PEXPIRE N 1000`; 3.x: every reader's timeout key too). Then J's JVM is killed.
    let j = "0b1c2d3e-0000-4000-8000-00000000000a:1";
    redis.cmd(&["HINCRBY", "rw", j, "1"]);
    redis.cmd(&["SET", &read_timeout_key("rw", j), "1", "PX", "1000"]);
    redis.cmd(&["PEXPIRE", "rw", "1000"]);
    redis.cmd(&["PEXPIRE", &read_timeout_key("rw", reader.owner()), "1000"]);
    // Past Java's lease; the Rust watchdog's own period (20 s) is far away.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let w = other
        .rw_lock("rw")
        .write()
        .try_acquire(Duration::ZERO)
        .await;
    assert!(
        w.as_ref().is_err_and(|e| e.is_busy()) || reader.is_lost(),
        "a writer holds while the Rust reader reads, untold"
    );
    drop(w);
    // Not lost: then renewed since J's renewal (the hash alone would have at most 1 s left).
    let left = redis.cmd(&["PTTL", "rw"]).int().unwrap();
    assert!(left > 30_000 || reader.is_lost(), "PTTL {left}");
    let key_left = redis
        .cmd(&["PTTL", &read_timeout_key("rw", reader.owner())])
        .int()
        .unwrap();
    assert!(key_left > 30_000 || reader.is_lost(), "PTTL {key_left}");
}

/// A Rust reader whose own timeout key is gone (expired after a Java renewal shortened it,
/// or deleted), or whose field left the hash, is told at the Java fleet's renewal cadence, not
/// at its own watchdog's (20 s here).
#[tokio::test]
async fn a_rust_reader_whose_timeout_key_or_field_is_gone_is_told_at_the_java_cadence() {
    let redis = RedisServer::start();
    let rust = reader_client(&redis).await;
    let by_key = rust.rw_lock("rw:key").read().acquire().await.unwrap();
    let by_field = rust.rw_lock("rw:field").read().acquire().await.unwrap();
    redis.cmd(&["DEL", &read_timeout_key("rw:key", by_key.owner())]);
    redis.cmd(&["HDEL", "rw:field", by_field.owner()]);
    for guard in [&by_key, &by_field] {
        let lost = tokio::time::timeout(Duration::from_secs(10), guard.lost())
            .await
            .expect("told before the watchdog's own period");
        assert_eq!(lock_tests::loss_reason(&lost), Some(LossReason::Deleted));
    }
}
