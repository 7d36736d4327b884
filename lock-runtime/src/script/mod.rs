//! The Lua scripts that implement the lock protocol, and their replies.
//!
//! Each script is a `.lua` file next to this one, hashed once and sent with `EVALSHA`;
//! [`redis::ScriptInvocation::invoke_async`] reloads it transparently after `SCRIPT FLUSH`
//! (and [`add_renew_call`] builds the watchdog's pipelined batches).

use std::sync::LazyLock;

use redis::{Script, Value};

/// Takes (or idempotently re-takes) the lock and bumps the fencing counter.
pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("acquire.lua")));
/// Releases our hold and publishes the unlock message.
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("release.lua")));
/// Renews many leases at once.
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("renew.lua")));
/// Deletes the lock whoever holds it and publishes the unlock message.
pub(crate) static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("force_unlock.lua")));
/// [`RELEASE`] publishing on the lock's shard channel (`SPUBLISH`), for Redis Cluster.
#[cfg(feature = "cluster")]
pub(crate) static RELEASE_SHARDED: LazyLock<Script> =
    LazyLock::new(|| Script::new(&sharded(include_str!("release.lua"))));
/// [`FORCE_UNLOCK`] publishing on the lock's shard channel (`SPUBLISH`), for Redis Cluster.
#[cfg(feature = "cluster")]
pub(crate) static FORCE_UNLOCK_SHARDED: LazyLock<Script> =
    LazyLock::new(|| Script::new(&sharded(include_str!("force_unlock.lua"))));

/// The scripts that publish unlock messages, for classic or sharded pub/sub.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Publishing {
    pub(crate) release: &'static LazyLock<Script>,
    pub(crate) force_unlock: &'static LazyLock<Script>,
}

impl Publishing {
    /// `PUBLISH`/`SUBSCRIBE`: one server, or the master behind Sentinel.
    pub(crate) const CLASSIC: Publishing = Publishing {
        release: &RELEASE,
        force_unlock: &FORCE_UNLOCK,
    };
    /// `SPUBLISH`/`SSUBSCRIBE` (Redis 7): a cluster, where a classic message would be
    /// broadcast to every node.
    #[cfg(feature = "cluster")]
    pub(crate) const SHARDED: Publishing = Publishing {
        release: &RELEASE_SHARDED,
        force_unlock: &FORCE_UNLOCK_SHARDED,
    };
}

#[cfg(feature = "cluster")]
fn sharded(code: &str) -> String {
    let out = code.replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'");
    debug_assert_ne!(out, code, "script has no PUBLISH to turn into SPUBLISH");
    out
}
/// Reads the lock's state.
pub(crate) static INSPECT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("inspect.lua")));

/// The `{code, detail}` pair every single-key script returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `{1, n}`: done (taken with token `n`, released, deleted, or locked with PTTL `n`).
    Done(i64),
    /// `{0, n}`: not done (held by another with PTTL `n`, not ours, or free).
    NotDone(i64),
    /// `{-1, type}`: the key holds data of this Redis type that is not a lock.
    Foreign(String),
}

impl redis::FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let (code, detail): (i64, Value) = redis::FromRedisValue::from_redis_value(v)?;
        let int = |v: Value| -> Result<i64, redis::ParsingError> {
            redis::FromRedisValue::from_redis_value(v)
        };
        match code {
            1 => Ok(Reply::Done(int(detail)?)),
            0 => Ok(Reply::NotDone(int(detail)?)),
            -1 => Ok(Reply::Foreign(redis::FromRedisValue::from_redis_value(
                detail,
            )?)),
            other => Err(format!("unexpected lock script status {other}").into()),
        }
    }
}

/// Appends one renew script call covering `part` (`(key, owner)` pairs) to `pipe`.
pub(crate) fn add_renew_call(pipe: &mut redis::Pipeline, part: &[(&str, &str)], lease_ms: u64) {
    let cmd = pipe.cmd("EVALSHA").arg(RENEW.get_hash()).arg(part.len());
    for (key, _) in part {
        cmd.arg(*key);
    }
    cmd.arg(lease_ms);
    for (_, owner) in part {
        cmd.arg(*owner);
    }
}

/// Whether an error says a command's keys are in different cluster slots: a proxy in front of
/// a cluster (Redis Enterprise, Azure, Envoy) rejects a multi-key script call that spans slots.
pub(crate) fn is_cross_slot(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::CrossSlot)
}

/// Whether an error says the server has no script for our hash (after `SCRIPT FLUSH` or a
/// restart).
pub(crate) fn is_no_script(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::FromRedisValue;

    #[test]
    fn replies_parse() {
        let v = |code, detail| Value::Array(vec![Value::Int(code), detail]);
        assert_eq!(
            Reply::from_redis_value(v(1, Value::Int(42))).unwrap(),
            Reply::Done(42)
        );
        assert_eq!(
            Reply::from_redis_value(v(0, Value::Int(-1))).unwrap(),
            Reply::NotDone(-1)
        );
        assert_eq!(
            Reply::from_redis_value(v(-1, Value::BulkString(b"string".to_vec()))).unwrap(),
            Reply::Foreign("string".into())
        );
        assert!(Reply::from_redis_value(v(7, Value::Int(0))).is_err());
    }

    #[test]
    #[cfg(feature = "cluster")]
    fn sharded_scripts_publish_on_the_shard_channel() {
        for (classic, sharded) in [
            (&RELEASE, &RELEASE_SHARDED),
            (&FORCE_UNLOCK, &FORCE_UNLOCK_SHARDED),
        ] {
            assert_ne!(classic.get_hash(), sharded.get_hash());
        }
    }
}
