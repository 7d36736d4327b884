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
