//! A rolling upgrade: clients of the previous release (its acquire and release scripts,
//! verbatim, in `previous_release/`) and of this one on the same names. The previous release
//! kept the mutex as a hash of holders; this one keeps it as a string (its holder's owner id),
//! the fencing counter and its turn marks unchanged. So while this release holds, the
//! previous one is refused with a typed error naming what it found (foreign data: a string);
//! while the previous one holds, this one finds the lock busy and waits. Never both hold, and
//! tokens never go backwards.

use std::time::Duration;

use lock_tests::{RedisServer, Resp};

use super::common;

/// The previous release's scripts, each after that release's whole `prelude.lua`.
const PREVIOUS_ACQUIRE: &str = concat!(
    include_str!("previous_release/prelude.lua"),
    "\n",
    include_str!("previous_release/acquire.lua")
);
const PREVIOUS_RELEASE: &str = concat!(
    include_str!("previous_release/prelude.lua"),
    "\n",
    include_str!("previous_release/release.lua")
);

/// The keys of `name` under the default prefix: lock hash, fencing counter, unlock channel.
fn keys(name: &str) -> [String; 3] {
    [
        format!("lock:{{{name}}}"),
        format!("lock:{{{name}}}:fence"),
        format!("lock:{{{name}}}:unlock"),
    ]
}

/// The previous release's acquire for `owner` (lease 30 s, counter kept a day): `(1, token)`
/// when taken, `(0, pttl)` when busy, `(-1, 0)` when refused for data it does not know (the
/// type it names is checked to be this release's string).
pub(super) fn previous_acquire(redis: &RedisServer, name: &str, owner: &str) -> (i64, i64) {
    let [key, fence, channel] = keys(name);
    let reply = redis.cmd(&[
        "EVAL",
        PREVIOUS_ACQUIRE,
        "3",
        &key,
        &fence,
        &channel,
        owner,
        "30000",
        "86400000",
        "0",
    ]);
    pair(&reply)
}

/// The previous release's release of `owner`'s hold: `(1, 0)` when released.
pub(super) fn previous_release(redis: &RedisServer, name: &str, owner: &str) -> (i64, i64) {
    let [key, fence, channel] = keys(name);
    pair(&redis.cmd(&["EVAL", PREVIOUS_RELEASE, "3", &key, &channel, &fence, owner]))
}

fn pair(reply: &Resp) -> (i64, i64) {
    let items = reply.items();
    assert_eq!(items.len(), 2, "{reply:?}");
    let code = items[0].int().expect("code");
    if code == -1 {
        assert_eq!(items[1].text(), Some("string"), "{reply:?}");
        return (code, 0);
    }
    (code, items[1].int().expect("value"))
}

#[tokio::test]
async fn clients_of_the_previous_release_and_this_one_exclude_each_other_and_tokens_increase() {
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let previous = "0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e:1";

    // This release holds without a token: the previous release is refused (foreign data, a
    // string), and writes nothing.
    let guard = locks.lock("upgrade").acquire().await.unwrap();
    assert_eq!(guard.issued_token(), None);
    let (code, _) = previous_acquire(&redis, "upgrade", previous);
    assert_eq!(code, -1, "the previous release took a held lock");
    assert_eq!(
        redis.mutex_holder("lock:{upgrade}").as_deref(),
        Some(guard.owner())
    );
    let on_demand = guard.fencing_token().await.unwrap();
    guard.release().await.unwrap();

    // The previous release takes it (its grants always issue a token): this one is refused.
    let (code, eager) = previous_acquire(&redis, "upgrade", previous);
    assert_eq!(code, 1);
    assert!(eager > on_demand as i64, "{eager} after {on_demand}");
    let err = locks
        .lock("upgrade")
        .try_acquire(Duration::ZERO)
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    // An acquire that waits (its first attempt a plain `SET`, refused by the hash) waits for
    // the previous release's holder, and takes the lock once it let go.
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move { locks.lock("upgrade").acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiter.is_finished(),
        "taken while the previous release held"
    );
    assert_eq!(previous_release(&redis, "upgrade", previous), (1, 0));
    let waited = lock_tests::granted(waiter).await;
    waited.release().await.unwrap();

    // And back: a token on demand after the previous release's is larger still.
    let guard = locks.lock("upgrade").acquire().await.unwrap();
    let after = guard.fencing_token().await.unwrap();
    assert!(after as i64 > eager, "{after} after {eager}");
    let (code, _) = previous_acquire(&redis, "upgrade", previous);
    assert_eq!(code, -1, "the previous release took a held lock");
    guard.release().await.unwrap();
}
