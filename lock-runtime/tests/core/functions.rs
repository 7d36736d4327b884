//! The lock scripts as a Redis function library: called with `FCALL`, loaded when missing,
//! scripts (`EVALSHA`) where the server refuses functions, releases that run when Redis is
//! out of memory.

use crate::common;

use std::time::Duration;

use lock_runtime::LockClient;
use lock_tests::RedisServer;

/// The libraries on the server, by name.
fn libraries(redis: &RedisServer) -> Vec<String> {
    let list = redis.cmd(&["FUNCTION", "LIST"]);
    list.items()
        .iter()
        .filter_map(|library| {
            let fields = library.items();
            let at = fields
                .iter()
                .position(|f| f.text() == Some("library_name"))?;
            fields.get(at + 1)?.text().map(str::to_owned)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_run_as_functions_of_one_library_loaded_on_first_use() {
    let redis = RedisServer::start();
    let locks = LockClient::connect(&redis.url()).await.unwrap();
    assert!(libraries(&redis).is_empty());
    for _ in 0..20 {
        let g = locks.lock("fn").acquire().await.unwrap();
        g.release().await.unwrap();
    }
    let loaded = libraries(&redis);
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    assert!(loaded[0].starts_with("lockrt_"), "{loaded:?}");
    // Every acquire was a plain `SET` (uncontended, no token), every release a function
    // call; the one before the library was loaded found no function, and no script was sent
    // (the one `EVALSHA` is the connect check's, of a SHA1 no script has: nothing ran).
    assert_eq!(redis.command_calls("set"), 20);
    assert_eq!(redis.command_calls("fcall"), 21);
    assert_eq!(redis.command_calls("evalsha"), 1);
    assert_eq!(redis.command_calls("function|load"), 1);

    // A second client of the same version uses the library as it is.
    let other = LockClient::connect(&redis.url()).await.unwrap();
    common::contend_and_wake(&locks, &other, "fn:wake").await;
    assert_eq!(redis.command_calls("function|load"), 1);
    assert_eq!(redis.command_calls("evalsha"), 2, "the two connect checks'");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_flushed_mid_run_is_loaded_again() {
    let redis = RedisServer::start();
    // The watchdog's renewals load it too.
    common::lock_through_flushes(&redis, &["FUNCTION", "FLUSH"]).await;
    // Once per flush at least (two calls that both found it missing may both load it).
    assert!(redis.command_calls("function|load") >= 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_the_acl_refuses_functions_gets_scripts() {
    let redis = RedisServer::start();
    // No FCALL at all; FCALL but not FUNCTION LOAD.
    for (user, refused) in [("nofcall", "-fcall"), ("noload", "-function")] {
        redis.cmd(&[
            "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", refused,
        ]);
        let url = format!("redis://{user}:pw@127.0.0.1:{}", redis.port());
        let a = LockClient::connect(&url).await.unwrap();
        let b = LockClient::connect(&url).await.unwrap();
        let before = redis.command_calls("evalsha");
        for _ in 0..5 {
            let g = a.lock(user).acquire().await.unwrap();
            g.release().await.unwrap();
        }
        common::contend_and_wake(&a, &b, &format!("{user}:wake")).await;
        assert!(
            redis.command_calls("evalsha") - before >= 5,
            "{user}: the releases ran as scripts"
        );
        assert!(libraries(&redis).is_empty(), "{user}: nothing was loaded");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_and_renewals_run_when_redis_is_out_of_memory() {
    let redis = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let locks = common::client_with_watchdog(&redis, Duration::from_millis(600)).await;
    let held = locks.lock("oom:held").acquire().await.unwrap();
    let released = locks.lock("oom:released").acquire().await.unwrap();
    redis.cmd(&["CONFIG", "SET", "maxmemory", "1"]);

    // Renewed while the server is full: still held two leases later.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert!(!held.is_lost());
    assert!(redis.cmd(&["PTTL", held.key()]).int().unwrap() > 0);
    // Released while the server is full.
    let key = released.key().to_owned();
    released.release().await.unwrap();
    assert_eq!(redis.cmd(&["EXISTS", &key]).int(), Some(0));
    // Taking a lock writes: refused with the server's error, nothing written.
    let err = locks
        .lock("oom:new")
        .try_acquire(Duration::ZERO)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("OOM"), "{err}");
    assert!(redis.keys("*oom:new*").is_empty());

    redis.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
    held.release().await.unwrap();
    locks
        .lock("oom:new")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}
