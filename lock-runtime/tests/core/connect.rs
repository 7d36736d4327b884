//! Connecting: passwords and ACL users in the URL, wrong credentials, client settings.

use crate::common;

use std::time::Duration;

use lock_runtime::LockClient;
use lock_tests::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_and_an_acl_user_in_the_url_work_for_both_connections() {
    let redis = RedisServer::start_with(&["--requirepass", "s3cret"]);
    // The harness' raw connection is unauthenticated: create the ACL user through AUTH.
    let port = redis.port();
    let admin = redis::Client::open(format!("redis://:s3cret@127.0.0.1:{port}")).unwrap();
    let mut admin = admin.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "locker", "on", ">pw", "~lock:*", "&lock:*", "+@all",
        ])
        .query_async(&mut admin)
        .await
        .unwrap();

    for url in [
        format!("redis://:s3cret@127.0.0.1:{port}"),
        format!("redis://locker:pw@127.0.0.1:{port}"),
    ] {
        let a = LockClient::connect(&url).await.unwrap();
        let b = LockClient::connect(&url).await.unwrap();
        // b waits through its (authenticated) pub/sub connection and is woken by the release.
        common::contend_and_wake(&a, &b, "auth").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_a_typed_error() {
    let redis = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let url = format!("redis://:wrong@127.0.0.1:{}", redis.port());
    let err = LockClient::connect(&url).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(err.to_string().contains("connect"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prefix_and_watchdog_settings_are_applied() {
    let redis = RedisServer::start();
    let locks = LockClient::builder(&redis.url())
        .prefix("shop")
        .watchdog_timeout(Duration::from_secs(3))
        .build()
        .await
        .unwrap();
    assert_eq!(locks.prefix(), "shop");
    assert_eq!(locks.watchdog_timeout(), Duration::from_secs(3));
    // Fenced: the grant writes the fencing counter, whose key is checked below.
    let guard = locks
        .lock("order:{user:7}")
        .fenced()
        .acquire()
        .await
        .unwrap();
    assert_eq!(guard.key(), "shop:#order:{user:7}");
    let ttl = redis.cmd(&["PTTL", "shop:#order:{user:7}"]).int().unwrap();
    assert!(ttl > 2000 && ttl <= 3000, "{ttl}");
    assert!(guard.owner().starts_with(locks.id()));
    // The fencing counter's role goes before a name with its own tag (so that no other name
    // can end in `:fence` and reach it); the tag still decides the slot.
    assert!(!redis.keys("shop:fence:#order:{user:7}").is_empty());
    guard.release().await.unwrap();
}
