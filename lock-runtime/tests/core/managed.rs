//! Clients built from the application's own `redis::Client` or `ConnectionInfo`; ACL users
//! with exactly the commands the crate docs list for the server's version; servers that lack
//! what the client needs (no scripting, no `WAIT`), refused when the client is built.

use crate::common;

use std::time::Duration;

use lock_runtime::{LockClient, LockError};
use lock_tests::{RedisServer, Resp};

/// The ACL rules of the crate docs' "Redis ACLs" section, for the default prefix.
const LOCK_USER_RULES: &[&str] = &[
    "~lock:*",
    "&lock:*",
    "-@all",
    "+fcall",
    "+function|load",
    "+evalsha",
    "+script|load",
    "+subscribe",
    "+unsubscribe",
    "+scan",
    "+del",
    "+exists",
    "+get",
    "+set",
    "+type",
    "+pexpire",
    "+pttl",
    "+time",
    "+publish",
    "+pubsub|numsub",
    "+hdel",
    "+hexists",
    "+hgetall",
    "+hlen",
    "+hscan",
    "+hset",
    "+zadd",
    "+zcard",
    "+zcount",
    "+zrange",
    "+zrangebyscore",
    "+zrem",
    "+zremrangebyscore",
    "+zscore",
];

/// What the crate docs add for Redis 7.2 and later and for Valkey: the client library's name
/// and version, which redis-rs sends on every connection (`CLIENT SETINFO`, unknown to 7.0,
/// whose ACL does not know the subcommand either).
const LOCK_USER_RULES_SINCE_7_2: &[&str] = &["+client|setinfo"];

/// What the crate docs add for Valkey 9.0 and later: `DELIFEQ`, a release without waiters.
const LOCK_USER_RULES_SINCE_VALKEY_9: &[&str] = &["+delifeq"];

/// The documented rules for `redis`'s server and version.
fn documented_rules(redis: &RedisServer) -> Vec<&'static str> {
    let (name, version) = redis.server_version();
    let mut rules = LOCK_USER_RULES.to_vec();
    if name == "valkey" || version >= (7, 2, 0) {
        rules.extend_from_slice(LOCK_USER_RULES_SINCE_7_2);
    }
    if name == "valkey" && version >= (9, 0, 0) {
        rules.extend_from_slice(LOCK_USER_RULES_SINCE_VALKEY_9);
    }
    rules
}

/// Creates the user `name` (password `pw`) with `rules`, after `reset on >pw`.
fn create_user(redis: &RedisServer, name: &str, rules: &[&str]) {
    let mut args = vec!["ACL", "SETUSER", name, "reset", "on", ">pw"];
    args.extend_from_slice(rules);
    let reply = redis.cmd(&args);
    assert!(
        matches!(reply, Resp::Simple(ref ok) if ok == "OK"),
        "{reply:?}"
    );
}

fn user_url(redis: &RedisServer, name: &str) -> String {
    format!("redis://{name}:pw@127.0.0.1:{}", redis.port())
}

/// The ACL log (denied commands, keys and channels) as text.
fn acl_log(redis: &RedisServer) -> String {
    format!("{:?}", redis.cmd(&["ACL", "LOG"]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_from_the_applications_redis_client_locks_contends_and_wakes() {
    let redis = RedisServer::start();
    let app = redis::Client::open(redis.url()).unwrap();
    let a = LockClient::builder_from_client(&app)
        .watchdog_timeout(Duration::from_secs(3))
        .build()
        .await
        .unwrap();
    let b = LockClient::connect(&redis.url()).await.unwrap();
    assert_eq!(a.watchdog_timeout(), Duration::from_secs(3));
    assert_eq!(a.prefix(), "lock");
    // The same deployment identity as a client from the URL, so MultiLocks order alike.
    assert_eq!(a.deployment_id(), b.deployment_id());
    assert_eq!(a.deployment_id(), format!("127.0.0.1:{}/0", redis.port()));
    common::contend_and_wake(&a, &b, "from-client").await;
    common::contend_and_wake(&b, &a, "from-client").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_info_carries_its_credentials_and_database_over() {
    let redis = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let port = redis.port();
    let info = redis::IntoConnectionInfo::into_connection_info(format!(
        "redis://:s3cret@127.0.0.1:{port}/3"
    ))
    .unwrap();
    let a = LockClient::builder_from_connection_info(info.clone())
        .prefix("shop")
        .build()
        .await
        .unwrap();
    let b = LockClient::builder_from_connection_info(info)
        .prefix("shop")
        .build()
        .await
        .unwrap();
    assert_eq!(a.prefix(), "shop");
    assert_eq!(a.deployment_id(), format!("127.0.0.1:{port}/3"));
    assert!(!format!("{a:?}").contains("s3cret"), "{a:?}");

    let held = a.lock("db3").acquire().await.unwrap();
    let ttl = redis.cmd(&["PTTL", "shop:{db3}"]).int().unwrap();
    assert_eq!(ttl, -2, "the lock is in database 3, not 0");
    held.release().await.unwrap();
    common::contend_and_wake(&a, &b, "db3").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_exactly_the_documented_acl_can_use_every_lock_operation() {
    let redis = RedisServer::start();
    create_user(&redis, "locker", &documented_rules(&redis));
    let url = user_url(&redis, "locker");
    let connect = || {
        LockClient::builder(&url)
            .watchdog_timeout(Duration::from_millis(300))
            .build()
    };
    let (a, b) = (connect().await.unwrap(), connect().await.unwrap());

    common::contend_and_wake(&a, &b, "acl").await;

    // Renewal: the watchdog keeps a 300 ms lease alive well past its end.
    let held = a.lock("renewed").acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(a.stats().renewal_round_trips > 0, "{:?}", a.stats());
    let info = a.lock("renewed").info().await.unwrap();
    assert!(info.is_some(), "still held after three leases");
    held.release().await.unwrap();

    // An explicit lease, a busy try, the rest of the family, inspection.
    let opts = lock_runtime::LockOptions::new()
        .wait(Duration::ZERO)
        .lease(Duration::from_secs(5));
    let leased = a.lock("leased").acquire_with(opts).await.unwrap();
    let busy = b.lock("leased").acquire_with(opts).await.unwrap_err();
    assert!(busy.is_busy(), "{busy:?}");
    leased.release().await.unwrap();

    let permit = a.semaphore("sem", 2).acquire().await.unwrap();
    assert_eq!(b.semaphore("sem", 2).available().await.unwrap(), 1);
    permit.release().await.unwrap();
    let read = a.rw_lock("rw").read().acquire().await.unwrap();
    read.release().await.unwrap();
    let write = b.rw_lock("rw").write().acquire().await.unwrap();
    write.release().await.unwrap();
    common::contend_and_wake(&a, &b, "fair").await;
    let fair = a.fair_lock("fair").acquire().await.unwrap();
    let names = b.scan("fai*").collect_up_to(10).await.unwrap();
    assert_eq!(names, ["fair"]);
    fair.release().await.unwrap();

    // Not even on connect (`CLIENT SETINFO` on Redis 7.2 and later and Valkey), and no
    // pattern subscription (`PSUBSCRIBE`, unknown on ElastiCache Serverless) was sent.
    assert_eq!(acl_log(&redis), "Array(Some([]))", "nothing was denied");
    assert_eq!(redis.command_calls("psubscribe"), 0);
}

/// The rules for Redis 7.0 are not enough on a newer server: its ACL logs the refused
/// `CLIENT SETINFO` of every connection. (On 7.0 the documented rules are exactly these.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_servers_need_client_setinfo_in_the_acl() {
    let redis = RedisServer::start();
    let (name, version) = redis.server_version();
    create_user(&redis, "locker70", LOCK_USER_RULES);
    let locks = LockClient::connect(&user_url(&redis, "locker70"))
        .await
        .unwrap();
    locks
        .lock("x")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let log = acl_log(&redis);
    if name == "valkey" || version >= (7, 2, 0) {
        assert!(log.contains("setinfo"), "{name} {version:?}: {log}");
    } else {
        assert_eq!(log, "Array(Some([]))", "{name} {version:?}");
    }
}

/// Acquires a lock as a user with `rules` (the documented rules changed by the test), which
/// must fail with a backend error: its message.
async fn refused_acquire(redis: &RedisServer, user: &str, rules: &[&str]) -> String {
    create_user(redis, user, rules);
    let locks = LockClient::connect(&user_url(redis, user)).await.unwrap();
    // Fenced: a grant with a token is a script call (a plain first attempt is one `SET`).
    let err = locks.lock("x").fenced().acquire().await.unwrap_err();
    assert!(matches!(err, LockError::NoPermission { .. }), "{err:?}");
    err.to_string()
}

/// The documented rules for `redis` without `rule`.
fn rules_without(redis: &RedisServer, rule: &str) -> Vec<&'static str> {
    rules_without_any(redis, &[rule])
}

fn rules_without_any(redis: &RedisServer, rules: &[&str]) -> Vec<&'static str> {
    documented_rules(redis)
        .into_iter()
        .filter(|r| !rules.contains(r))
        .collect()
}

/// `EVALSHA` is needed even with `FCALL` (the batch and inspect scripts are scripts
/// everywhere): a user without it is refused when the client is built, not at its first lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_evalsha_is_refused_at_connect_with_an_error_naming_it() {
    let redis = RedisServer::start();
    for (user, removed) in [
        ("no-evalsha", &["+evalsha"][..]),
        ("no-scripts", &["+evalsha", "+fcall"][..]),
    ] {
        create_user(&redis, user, &rules_without_any(&redis, removed));
        let err = LockClient::connect(&user_url(&redis, user))
            .await
            .unwrap_err();
        let LockError::NoPermission { op, denied, .. } = &err else {
            panic!("{err:?}");
        };
        assert_eq!((*op, denied.as_str()), ("connect", "the `evalsha` command"));
        let message = err.to_string();
        assert!(message.contains("NoPerm"), "{message}");
    }
    assert!(redis.keys("lock:*").is_empty());
}

/// A server without scripting (simulated: `EVALSHA` renamed away, as on a managed tier that
/// forbids scripts; a Valkey 9.1 built without its Lua module does not know it either) is a
/// typed error at build naming the cause and the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_scripting_is_refused_at_connect() {
    let redis = RedisServer::start_with(&["--rename-command", "EVALSHA", ""]);
    let err = LockClient::connect(&redis.url()).await.unwrap_err();
    let LockError::IncompatibleServer {
        server,
        missing,
        fix,
        source,
    } = &err
    else {
        panic!("{err:?}");
    };
    let (name, _) = redis.server_version();
    assert!(server.to_lowercase().starts_with(&name), "{server}");
    assert!(missing.contains("`EVALSHA`"), "{missing}");
    assert!(fix.contains("scripting"), "{fix}");
    assert!(source.is_some());
    assert!(err.to_string().contains("cannot run these locks"), "{err}");
}

/// `replica_ack` where the server has no `WAIT` (simulated by renaming it away, as
/// ElastiCache Serverless lacks it), or where the user may not send it: refused at build. The
/// same server without `replica_ack` is fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_ack_without_wait_is_refused_at_connect() {
    let acked = |url: String| {
        LockClient::builder(&url)
            .replica_ack(1, Duration::from_millis(100))
            .build()
    };
    let redis = RedisServer::start_with(&["--rename-command", "WAIT", ""]);
    let err = acked(redis.url()).await.unwrap_err();
    let LockError::IncompatibleServer { missing, fix, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(
        missing.contains("`WAIT`") && missing.contains("replica_ack"),
        "{missing}"
    );
    assert!(fix.contains("without `replica_ack`"), "{fix}");
    let plain = LockClient::connect(&redis.url()).await.unwrap();
    plain
        .lock("w")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    let redis = RedisServer::start();
    // The documented rules leave `+wait` to those who set `replica_ack`.
    create_user(&redis, "no-wait", &documented_rules(&redis));
    let err = acked(user_url(&redis, "no-wait")).await.unwrap_err();
    let LockError::NoPermission { denied, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(denied, "the `wait` command");
    let mut rules = documented_rules(&redis);
    rules.push("+wait");
    create_user(&redis, "with-wait", &rules);
    acked(user_url(&redis, "with-wait")).await.unwrap();
}

/// A server older than Redis 7.0 is refused at build, by its version: Redis 6.0 (which wants
/// `HELLO`'s protocol version, so the client reads `INFO`) lacks `SET … NX GET` and functions.
/// Needs a Redis 6 as `$REDIS_SERVER_BIN`: `scripts/compat.sh` runs it on Redis 6.0.9.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Redis 6 server as REDIS_SERVER_BIN: scripts/compat.sh runs it on Redis 6.0.9"]
async fn a_server_older_than_redis_7_is_refused_at_connect() {
    let redis = RedisServer::start();
    let (name, version) = redis.server_version();
    assert!(name == "redis" && version < (7, 0, 0), "{name} {version:?}");
    let err = LockClient::connect(&redis.url()).await.unwrap_err();
    let LockError::IncompatibleServer {
        server,
        missing,
        fix,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    let (major, minor, patch) = version;
    assert_eq!(server, &format!("Redis {major}.{minor}.{patch}"));
    assert!(missing.contains("Redis 7.0 or later"), "{missing}");
    assert!(fix.contains("upgrade"), "{fix}");
}

/// The client names the server by what it is, not by the `redis_version` Valkey fakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_knows_which_server_it_connected_to() {
    let redis = RedisServer::start();
    let locks = LockClient::connect(&redis.url()).await.unwrap();
    let server = locks.server().expect("HELLO names the server");
    let (name, version) = redis.server_version();
    assert_eq!(server.name(), name);
    assert_eq!(
        server.version_numbers(),
        Some(version),
        "{server}: {version:?}"
    );
    if name == "valkey" {
        let info = redis.cmd(&["INFO", "server"]);
        assert!(info.text().unwrap().contains("redis_version:7.2.4"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_a_command_the_scripts_call_gets_an_error_naming_it() {
    let redis = RedisServer::start();
    // PEXPIRE runs inside a fair lock's acquire script (a mutex's lease is set by its `SET`).
    let user = "no-pexpire";
    create_user(&redis, user, &rules_without(&redis, "+pexpire"));
    let locks = LockClient::connect(&user_url(&redis, user)).await.unwrap();
    let err = locks.fair_lock("x").acquire().await.unwrap_err();
    let LockError::NoPermission { denied, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(denied, "the `pexpire` command (called by a lock script)");
    // The ACL log agrees.
    let log = acl_log(&redis);
    assert!(log.contains("pexpire") && log.contains(user), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_publish_releases_and_waiters_fall_back_to_their_timers() {
    // PUBLISH runs inside the release scripts, after the hold is gone: the release the caller
    // asked for is done, so it is no error; only the wake-up is missing (the server logs it).
    // As functions (FCALL), and as scripts (EVALSHA) for a user without functions.
    releases_without_publish(&["+publish"]).await;
    releases_without_publish(&["+publish", "+fcall", "+function|load"]).await;
}

/// Every release script and force-unlock, as a user with the documented rules less `removed`
/// (among them `+publish`).
async fn releases_without_publish(removed: &[&str]) {
    let redis = RedisServer::start();
    let user = "no-publish";
    create_user(&redis, user, &rules_without_any(&redis, removed));
    let locks = LockClient::connect(&user_url(&redis, user)).await.unwrap();
    let admin = common::client(&redis).await;
    let client = redis::Client::open(redis.url()).unwrap();
    let mut unlocks = client.get_async_pubsub().await.unwrap();
    unlocks.subscribe("lock:{y}:unlock").await.unwrap();

    // A mutex with a short lease, and a waiter of another client sleeping on it.
    let lease = Duration::from_millis(1500);
    let guard = locks
        .lock("y")
        .acquire_with(lock_runtime::LockOptions::new().lease(lease))
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let admin = admin.clone();
        async move { admin.lock("y").acquire().await }
    });
    // Subscribed: the waiter and this test.
    let subscribers = || redis.cmd(&["PUBSUB", "NUMSUB", "lock:{y}:unlock"]).items()[1].int();
    assert!(common::eventually(Duration::from_secs(5), || subscribers() == Some(2)).await);
    let owner = guard.owner().to_owned();
    guard.release().await.unwrap();
    // No longer ours. (Not "the key is gone": on a loaded machine the subscription above can
    // take most of the lease, and the waiter's retry timer, set to the lease's end, may then
    // take the lock between the release and this look; seen in a suite run.)
    assert_ne!(
        redis.mutex_holder("lock:{y}").as_deref(),
        Some(owner.as_str()),
        "released"
    );
    // Nothing was published; the waiter takes the lock at its retry timer (the lease's end).
    let taken = lock_tests::granted(waiter).await;
    taken.release().await.unwrap();
    let mut messages = unlocks.on_message();
    let first = futures_util::StreamExt::next(&mut messages).await.unwrap();
    assert_eq!(
        first.get_payload::<String>().unwrap(),
        "0",
        "the first message is the admin's release, not the refused one"
    );

    // Every release script and force-unlock: the change is made and reported done.
    let sem = locks.semaphore("s", 2);
    sem.acquire().await.unwrap().release().await.unwrap();
    sem.set_capacity(3).await.unwrap();
    let rw = locks.rw_lock("rw");
    rw.write().acquire().await.unwrap().release().await.unwrap();
    let fair = locks.fair_lock("f");
    fair.acquire().await.unwrap().release().await.unwrap();
    let held = admin.lock("z").acquire().await.unwrap();
    assert!(locks.lock("z").force_unlock().await.unwrap());
    drop(held);
    let left: Vec<String> = redis
        .keys("lock:*")
        .into_iter()
        .filter(|k| !k.ends_with("fence") && !k.ends_with(":capacity"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // The ACL log says what was refused.
    let log = acl_log(&redis);
    assert!(log.contains("publish") && log.contains(user), "{log}");
    // Functions, or scripts for the user without them (the other client uses functions).
    // (Each client's connect check sends one `EVALSHA` of a SHA1 no script has: two clients.)
    let scripts = removed.contains(&"+fcall");
    assert_eq!(redis.command_calls("evalsha") > 2, scripts);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_access_to_the_prefix_gets_an_error_naming_the_keys() {
    let redis = RedisServer::start();
    let rules: Vec<&str> = documented_rules(&redis)
        .into_iter()
        .map(|r| if r == "~lock:*" { "~app:*" } else { r })
        .collect();
    let message = refused_acquire(&redis, "no-keys", &rules).await;
    assert!(
        message.contains("may not use the lock's keys") && message.contains("NoPerm"),
        "{message}"
    );
}

/// The TLS settings of the application's client (here: a private CA as the only root) carry
/// over; a client from the bare `rediss://` URL could not verify the server.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_from_a_tls_redis_client_keeps_its_root_certificate() {
    let tls = lock_tests::TlsRedisServer::start();
    let certs = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(tls.ca_pem()),
    };
    let app = redis::Client::build_with_tls(tls.url(), certs).unwrap();

    let a = LockClient::builder_from_client(&app).build().await.unwrap();
    let b = LockClient::builder_from_client(&app).build().await.unwrap();
    assert_eq!(a.deployment_id(), format!("127.0.0.1:{}/0", tls.tls_port()));
    common::contend_and_wake(&a, &b, "tls").await;
}

/// Whether `redis` has `DELIFEQ` (Valkey 9.0 and later), by its own account.
fn deletes_if_equal(redis: &RedisServer) -> bool {
    let (name, version) = redis.server_version();
    name == "valkey" && version >= (9, 0, 0)
}

/// What a release sends, counted on the server: `(DELIFEQ calls, lock script calls)`.
fn release_calls(redis: &RedisServer) -> (u64, u64) {
    (redis.command_calls("delifeq"), redis.script_calls())
}

/// Where the server has `DELIFEQ` (Valkey 9.0 and later) a release that no waiter marked is
/// that one command, no script; a release a waiter of another client marked still wakes it
/// (the `DELIFEQ` deletes nothing, the script releases and publishes); a release of a lock lost
/// meanwhile is still `NotOwner`. A user whose ACL lacks `+delifeq` is refused once and
/// released by the script from then on. Elsewhere every release is the script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_without_waiters_is_a_delifeq_where_the_server_has_it() {
    let redis = RedisServer::start();
    let has = deletes_if_equal(&redis);
    let locks = common::client(&redis).await;
    let other = common::client(&redis).await;
    // Loads the function library.
    let warm = other.lock("warm").acquire().await.unwrap();
    warm.release().await.unwrap();

    let before = release_calls(&redis);
    for _ in 0..5 {
        let held = locks.lock("d").acquire().await.unwrap();
        held.release().await.unwrap();
    }
    let after = release_calls(&redis);
    if has {
        assert_eq!((after.0 - before.0, after.1 - before.1), (5, 0));
    } else {
        assert_eq!((after.0, after.1 - before.1), (0, 5));
    }

    // Marked by a waiter of another client: released by the script, which wakes it.
    let held = locks.lock("d").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let other = other.clone();
        async move {
            let opts = lock_runtime::LockOptions::new().wait(Duration::from_secs(20));
            other.lock("d").acquire_with(opts).await
        }
    });
    assert!(
        common::eventually(Duration::from_secs(10), || redis
            .cmd(&["GET", "lock:{d}"])
            .text()
            .is_some_and(|v| v.ends_with('!')))
        .await,
        "the waiter marked the lock"
    );
    let before = release_calls(&redis);
    let published = redis.command_calls("publish");
    held.release().await.unwrap();
    let after = release_calls(&redis);
    assert_eq!(after.0 - before.0, u64::from(has));
    // (The waiter's own attempt, once woken, may be counted too.)
    assert!(after.1 > before.1, "the script released the marked lock");
    assert_eq!(
        redis.command_calls("publish") - published,
        1,
        "and published the unlock message"
    );
    // Woken by the unlock message: the holder's lease (30 s) outlasts the wait.
    let next = waiter.await.unwrap().unwrap();
    next.release().await.unwrap();

    // Lost meanwhile: not ours.
    let held = locks.lock("d").acquire().await.unwrap();
    redis.cmd(&["DEL", "lock:{d}"]);
    let lost = held.release().await;
    assert!(
        matches!(
            lost,
            Err(LockError::NotOwner { .. } | LockError::Lost { .. })
        ),
        "{lost:?}"
    );

    if has {
        // An ACL without `+delifeq`: refused once, then the script.
        let mut rules = documented_rules(&redis);
        rules.retain(|rule| *rule != "+delifeq");
        create_user(&redis, "nodel", &rules);
        let limited = LockClient::connect(&user_url(&redis, "nodel"))
            .await
            .unwrap();
        let before = release_calls(&redis);
        for _ in 0..3 {
            let held = limited.lock("d").acquire().await.unwrap();
            held.release().await.unwrap();
        }
        let after = release_calls(&redis);
        // A refused command is not counted as a call: the ACL log shows the one attempt.
        assert_eq!((after.0 - before.0, after.1 - before.1), (0, 3));
        let log = acl_log(&redis);
        assert_eq!(log.matches(r#"Bulk(Some("delifeq"))"#).count(), 1, "{log}");
        assert!(log.contains(r#"Bulk(Some("count")), Int(1)"#), "{log}");
    }
}
