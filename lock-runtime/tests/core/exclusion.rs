//! Fencing on Redis: the counter's retention, and tokens that keep increasing after it is gone.
//! (Exclusion under contention and increasing tokens across holders are shared behaviour
//! tests: `behaviour/mod.rs`, run against Redis by `behaviour_redis.rs`.)

use crate::common;

use lock_tests::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_keep_increasing_after_the_counter_is_deleted() {
    let redis = RedisServer::start();
    let a = common::client(&redis).await;
    let b = common::client(&redis).await;
    let first = a.lock("fenced").acquire().await.unwrap();
    let last = first.fencing_token().await.unwrap();
    first.release().await.unwrap();
    // The counter expires after its retention, but restarts from the server clock, so tokens
    // still increase after it is gone.
    redis.cmd(&["DEL", "lock:{fenced}:fence"]);
    let guard = b.lock("fenced").acquire().await.unwrap();
    assert!(guard.fencing_token().await.unwrap() > last);
    let ttl = redis.cmd(&["PTTL", "lock:{fenced}:fence"]).int().unwrap();
    assert!(
        ttl > 0,
        "the fencing counter must carry a retention TTL, got {ttl}"
    );
}

/// A counter ahead of the server clock (tokens issued faster than one per microsecond, or a
/// server clock that went back): a fenced grant of a free lock takes the counter + 1, and a
/// counter at the largest integer the scripts count exactly (2^53 - 1) is foreign data, the
/// lock left free and the counter as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_grant_continues_a_counter_ahead_of_the_clock() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    // The server clock is about 1.8e15 µs: this is decades ahead of it.
    let ahead: u64 = 4_000_000_000_000_000;
    redis.cmd(&["SET", "lock:{ahead}:fence", &ahead.to_string()]);
    let guard = locks.lock("ahead").fenced().acquire().await.unwrap();
    assert_eq!(guard.fencing_token().await.unwrap(), ahead + 1);
    guard.release().await.unwrap();
    let guard = locks.lock("ahead").fenced().acquire().await.unwrap();
    assert_eq!(guard.fencing_token().await.unwrap(), ahead + 2);
    guard.release().await.unwrap();

    let limit = "9007199254740991";
    redis.cmd(&["SET", "lock:{ahead}:fence", limit]);
    let err = locks.lock("ahead").fenced().acquire().await.unwrap_err();
    assert!(
        matches!(&err, lock_runtime::LockError::ForeignData { found, .. } if found == "string"),
        "{err:?}"
    );
    assert_eq!(redis.mutex_holder("lock:{ahead}"), None, "taken back");
    assert_eq!(
        redis.cmd(&["GET", "lock:{ahead}:fence"]).text(),
        Some(limit)
    );
}
