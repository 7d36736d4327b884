//! Fencing on Redis: the counter's retention, and tokens that keep increasing after it is gone.
//! (Exclusion under contention and increasing tokens across holders are shared behaviour
//! tests: `behaviour/mod.rs`, run against Redis by `behaviour_redis.rs`.)

use crate::common;

use std::time::Duration;

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
/// server clock that went back): a fenced grant of a free lock takes the counter + 1. (One at
/// the largest integer the scripts count exactly is foreign data: the next test.)
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
    // A counter ahead of the clock is kept a whole retention (7 days by default) after each
    // grant: its expiry would let tokens restart at the clock, below it.
    let ttl = redis.cmd(&["PTTL", "lock:{ahead}:fence"]).int().unwrap();
    assert!(
        ttl > 6 * 24 * 3_600_000,
        "retention refreshed, got {ttl} ms"
    );
    let guard = locks.lock("ahead").fenced().acquire().await.unwrap();
    assert_eq!(guard.fencing_token().await.unwrap(), ahead + 2);
    guard.release().await.unwrap();
}

/// A fenced grant writes the counter and reads what was there in one command: data there that
/// is no counter of ours is put back as it was, TTL included, and the grant is refused, the
/// lock left free. A counter at the largest integer the scripts count exactly (2^53 - 1) is
/// such data too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_grant_puts_foreign_data_at_the_counter_back_with_its_ttl() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    for (value, ttl) in [
        ("someone else's", Some("90000")),
        ("12ab", None),
        ("9007199254740991", None),
    ] {
        redis.cmd(&["SET", "lock:{theirs}:fence", value]);
        if let Some(ms) = ttl {
            redis.cmd(&["PEXPIRE", "lock:{theirs}:fence", ms]);
        }
        let err = locks.lock("theirs").fenced().acquire().await.unwrap_err();
        assert!(
            matches!(&err, lock_runtime::LockError::ForeignData { found, .. } if found == "string"),
            "{err:?}"
        );
        assert_eq!(redis.mutex_holder("lock:{theirs}"), None, "taken back");
        assert_eq!(
            redis.cmd(&["GET", "lock:{theirs}:fence"]).text(),
            Some(value)
        );
        let left = redis.cmd(&["PTTL", "lock:{theirs}:fence"]).int().unwrap();
        match ttl {
            Some(_) => assert!((1..=90_000).contains(&left), "its own TTL kept, got {left}"),
            None => assert_eq!(left, -1, "still without a TTL"),
        }
    }
    // A hash there: refused without a write.
    redis.cmd(&["DEL", "lock:{theirs}:fence"]);
    redis.cmd(&["HSET", "lock:{theirs}:fence", "f", "v"]);
    let err = locks.lock("theirs").fenced().acquire().await.unwrap_err();
    assert!(
        matches!(&err, lock_runtime::LockError::ForeignData { found, .. } if found == "hash"),
        "{err:?}"
    );
    assert_eq!(
        redis.cmd(&["HGET", "lock:{theirs}:fence", "f"]).text(),
        Some("v")
    );
}

/// The counter's retention is refreshed as it is used: set when a fenced grant creates it, and
/// renewed by a grant in a later tenth of the retention than the last token's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_in_use_has_its_retention_renewed() {
    let redis = RedisServer::start();
    let locks =
        lock_tests::client_with(&redis, |b| b.fence_retention(Duration::from_secs(100))).await;
    let guard = locks.lock("kept").fenced().acquire().await.unwrap();
    let first = guard.fencing_token().await.unwrap();
    guard.release().await.unwrap();
    let ttl = redis.cmd(&["PTTL", "lock:{kept}:fence"]).int().unwrap();
    assert!(
        (90_000..=100_000).contains(&ttl),
        "created with the retention, got {ttl}"
    );

    // The last token 30 s before the server clock (three tenths of the retention ago), the
    // counter left 5 s to live: the next grant renews it.
    let now = redis.cmd(&["TIME"]);
    let clock_us = now.items()[0].text().unwrap().parse::<u64>().unwrap() * 1_000_000;
    let earlier = (clock_us - 30_000_000).to_string();
    redis.cmd(&["SET", "lock:{kept}:fence", &earlier, "PX", "5000"]);
    let guard = locks.lock("kept").fenced().acquire().await.unwrap();
    let token = guard.fencing_token().await.unwrap();
    assert!(
        token > first && token > clock_us,
        "{token} after {first}, clock {clock_us}"
    );
    guard.release().await.unwrap();
    let ttl = redis.cmd(&["PTTL", "lock:{kept}:fence"]).int().unwrap();
    assert!((90_000..=100_000).contains(&ttl), "renewed, got {ttl}");
}
