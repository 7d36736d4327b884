//! `lock_fence::redis` against a real `redis-server`, with real locks from `lock-runtime`.

mod common;

use lock_fence::FenceError;
use lock_fence::redis::{advance, get, newest, set};
use lock_tests::{RedisServer, Resp};
use redis::aio::MultiplexedConnection;

use common::{LIMIT, acquire_short_lease, assert_stale, until_lease_ran_out};

async fn connect(server: &RedisServer) -> MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test]
async fn stale_token_is_refused_and_newest_or_equal_goes_through() {
    let server = RedisServer::start();
    let mut con = connect(&server).await;

    assert_eq!(get::<_, String>(&mut con, "stock:42").await.unwrap(), None);
    set(&mut con, "stock:42", "9", 5).await.unwrap();
    set(&mut con, "stock:42", "8", 5).await.unwrap();
    let refused = set(&mut con, "stock:42", "1", 4).await;
    assert!(refused.as_ref().unwrap_err().is_stale());
    assert_stale(refused, 4, 5);
    assert_eq!(get::<_, u32>(&mut con, "stock:42").await.unwrap(), Some(8));
    set(&mut con, "stock:42", "7", 6).await.unwrap();
    assert_eq!(newest(&mut con, "stock:42").await.unwrap(), Some(6));
    // The layout is documented: a hash with `token` and `value`.
    assert_eq!(
        server.cmd(&["HGET", "stock:42", "value"]),
        Resp::Bulk(Some("7".into()))
    );
    assert_eq!(
        server.cmd(&["HGET", "stock:42", "token"]),
        Resp::Bulk(Some("6".into()))
    );
}

#[tokio::test]
async fn advance_shuts_out_older_holders_before_a_value_exists() {
    let server = RedisServer::start();
    let mut con = connect(&server).await;

    advance(&mut con, "stock:42", 3).await.unwrap();
    assert_eq!(get::<_, String>(&mut con, "stock:42").await.unwrap(), None);
    assert_eq!(newest(&mut con, "stock:42").await.unwrap(), Some(3));
    assert_stale(set(&mut con, "stock:42", "x", 2).await, 2, 3);
    assert_stale(advance(&mut con, "stock:42", 2).await, 2, 3);
    set(&mut con, "stock:42", "x", 3).await.unwrap();
    assert_eq!(
        get::<_, String>(&mut con, "stock:42").await.unwrap(),
        Some("x".into())
    );
    // Advancing keeps the value.
    advance(&mut con, "stock:42", 4).await.unwrap();
    assert_eq!(
        get::<_, String>(&mut con, "stock:42").await.unwrap(),
        Some("x".into())
    );
}

/// Lua numbers are doubles: 2^53 and 2^53 + 1 are the same number there. Tokens are compared
/// exactly.
#[tokio::test]
async fn tokens_beyond_2_pow_53_compare_exactly() {
    let server = RedisServer::start();
    let mut con = connect(&server).await;
    let big = 1_u64 << 53;

    set(&mut con, "k", "a", big + 1).await.unwrap();
    assert_stale(set(&mut con, "k", "b", big).await, big, big + 1);
    set(&mut con, "k", "c", u64::MAX).await.unwrap();
    assert_stale(
        set(&mut con, "k", "d", u64::MAX - 1).await,
        u64::MAX - 1,
        u64::MAX,
    );
    // Shorter decimals are older, whatever their first digit.
    set(&mut con, "short", "a", 10).await.unwrap();
    assert_stale(set(&mut con, "short", "b", 9).await, 9, 10);
    assert_eq!(
        get::<_, String>(&mut con, "k").await.unwrap(),
        Some("c".into())
    );
}

#[tokio::test]
async fn foreign_data_at_the_key_is_reported_and_left_untouched() {
    let server = RedisServer::start();
    let mut con = connect(&server).await;
    server.cmd(&["SET", "plain", "hello"]);
    server.cmd(&["RPUSH", "list", "a", "b"]);
    server.cmd(&["HSET", "hash", "token", "1", "value", "v", "owner", "me"]);
    server.cmd(&["HSET", "tokenless", "value", "v"]);
    server.cmd(&["HSET", "bad-token", "token", "01", "value", "v"]);

    for (key, found) in [
        ("plain", "a string"),
        ("list", "a list"),
        ("hash", "a hash with fields other than token and value"),
        ("tokenless", "a hash without a fencing token"),
        ("bad-token", "a hash without a fencing token"),
    ] {
        for result in [
            set(&mut con, key, "x", 9).await,
            advance(&mut con, key, 9).await,
            newest(&mut con, key).await.map(drop),
            get::<_, String>(&mut con, key).await.map(drop),
        ] {
            match result {
                Err(FenceError::ForeignData { key: k, found: f }) => {
                    assert_eq!((k.as_str(), f.as_str()), (key, found))
                }
                other => panic!("{key}: expected ForeignData, got {other:?}"),
            }
        }
    }
    assert_eq!(
        server.cmd(&["GET", "plain"]),
        Resp::Bulk(Some("hello".into()))
    );
    assert_eq!(server.cmd(&["LLEN", "list"]), Resp::Int(2));
    assert_eq!(server.cmd(&["HLEN", "hash"]), Resp::Int(3));
    assert_eq!(
        server.cmd(&["HGET", "hash", "token"]),
        Resp::Bulk(Some("1".into()))
    );
    assert_eq!(server.cmd(&["HLEN", "tokenless"]), Resp::Int(1));
}

/// A read-modify-write as documented: A advances and reads, loses its lease, B does a full
/// read-modify-write, A's late write is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_after_the_lease_ran_out_is_refused() {
    let server = RedisServer::start();
    let mut con = connect(&server).await;
    set(&mut con, "stock:42", 1_u32, 1).await.unwrap();
    let locks = lock_tests::client(&server).await;
    let lock = locks.lock("stock:42");

    let a = acquire_short_lease(&lock).await;
    let a_token = a.fencing_token().await.unwrap();
    advance(&mut con, "stock:42", a_token).await.unwrap();
    let a_read: u32 = get(&mut con, "stock:42").await.unwrap().unwrap();
    until_lease_ran_out(&a).await;

    let b = lock.try_acquire(LIMIT).await.unwrap();
    let b_token = b.fencing_token().await.unwrap();
    advance(&mut con, "stock:42", b_token).await.unwrap();
    let b_read: u32 = get(&mut con, "stock:42").await.unwrap().unwrap();
    set(&mut con, "stock:42", b_read - 1, b_token)
        .await
        .unwrap();
    b.release().await.unwrap();

    assert_stale(
        set(&mut con, "stock:42", a_read - 1, a_token).await,
        a_token,
        b_token,
    );
    assert_eq!(get::<_, u32>(&mut con, "stock:42").await.unwrap(), Some(0));
    assert_eq!(newest(&mut con, "stock:42").await.unwrap(), Some(b_token));
}
