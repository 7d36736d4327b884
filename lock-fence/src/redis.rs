//! A fenced compare-and-set for a Redis store (feature `redis`).
//!
//! A fenced value lives in a hash at its key, next to the token of the newest holder that
//! touched it:
//!
//! | field | holds |
//! |---|---|
//! | `token` | the newest accepted fencing token, in decimal |
//! | `value` | the value (absent while only [`advance`] has been called) |
//!
//! One key, so value and token are always in one cluster slot and one Lua script checks and
//! writes them atomically. [`set`] stores the value only if its token is not older than the
//! recorded one (the same holder may write again); [`advance`] records the token without
//! writing; [`get`] and [`newest`] read. A key that holds anything else (a string, a list, a
//! hash with other fields) is [`FenceError::ForeignData`] and is left untouched. Tokens are
//! compared as decimal strings, so the whole `u64` range works.
//!
//! Do not put a TTL on a fenced key: once it expires, the recorded token is gone and a stale
//! holder could write again.
//!
//! # Read-modify-write
//!
//! The script fences the write; what the write is computed from is your business under the
//! lock. Call [`advance`] *before* reading, so that a holder that lost the lock cannot slip a
//! write in between your read and your write (after your `advance` its `set` is refused;
//! before it, your read sees its write):
//!
//! ```no_run
//! # async fn demo(
//! #     guard: lock_runtime::LockGuard,
//! #     mut redis: redis::aio::ConnectionManager,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! use lock_fence::redis as fenced;
//!
//! let token = guard.fencing_token().await?;
//! fenced::advance(&mut redis, "stock:42", token).await?;
//! let qty: u32 = fenced::get(&mut redis, "stock:42").await?.unwrap_or(0);
//! if qty > 0 {
//!     // Refused with `FenceError::Stale` if a newer holder has touched the key since.
//!     fenced::set(&mut redis, "stock:42", qty - 1, token).await?;
//! }
//! # Ok(()) }
//! ```

use std::sync::LazyLock;

use ::redis::aio::ConnectionLike;
use ::redis::{FromRedisValue, Script, ToSingleRedisArg, Value};

use crate::FenceError;

static FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("redis/fence.lua")));

/// Stores `value` at `key` if `token` is not older than the newest token recorded there (or
/// none is), and records `token`.
///
/// # Errors
/// - [`FenceError::Stale`] (with the newest token) when a newer holder has touched the key.
/// - [`FenceError::ForeignData`] when the key holds something that is not a fenced value.
/// - [`FenceError::Redis`].
pub async fn set<C, V>(conn: &mut C, key: &str, value: V, token: u64) -> Result<(), FenceError>
where
    C: ConnectionLike + Send,
    V: ToSingleRedisArg + Send + Sync,
{
    let reply: Value = FENCE
        .key(key)
        .arg("set")
        .arg(token.to_string())
        .arg(value)
        .invoke_async(conn)
        .await?;
    parse(key, token, reply).map(drop)
}

/// Records `token` at `key` without writing a value, unless a newer token is recorded: from
/// now on, holders with older tokens cannot [`set`] the key. Call it before the read of a
/// read-modify-write.
///
/// # Errors
/// As for [`set`].
pub async fn advance<C>(conn: &mut C, key: &str, token: u64) -> Result<(), FenceError>
where
    C: ConnectionLike + Send,
{
    let reply: Value = FENCE
        .key(key)
        .arg("advance")
        .arg(token.to_string())
        .invoke_async(conn)
        .await?;
    parse(key, token, reply).map(drop)
}

/// The value at `key`; `None` when there is none (no key, or only a token recorded).
///
/// # Errors
/// [`FenceError::ForeignData`], [`FenceError::Redis`] (also when the value does not convert to
/// `V`).
pub async fn get<C, V>(conn: &mut C, key: &str) -> Result<Option<V>, FenceError>
where
    C: ConnectionLike + Send,
    V: FromRedisValue,
{
    let (_, value) = read(conn, key).await?;
    match value {
        Value::Nil => Ok(None),
        value => Ok(Some(
            V::from_redis_value(value).map_err(::redis::RedisError::from)?,
        )),
    }
}

/// The newest token recorded at `key`, if any.
///
/// # Errors
/// [`FenceError::ForeignData`], [`FenceError::Redis`].
pub async fn newest<C>(conn: &mut C, key: &str) -> Result<Option<u64>, FenceError>
where
    C: ConnectionLike + Send,
{
    read(conn, key).await.map(|(token, _)| token)
}

async fn read<C>(conn: &mut C, key: &str) -> Result<(Option<u64>, Value), FenceError>
where
    C: ConnectionLike + Send,
{
    let reply: Value = FENCE.key(key).arg("get").invoke_async(conn).await?;
    parse(key, 0, reply)
}

/// Turns the script's reply into the token and value, or the error it stands for.
fn parse(key: &str, token: u64, reply: Value) -> Result<(Option<u64>, Value), FenceError> {
    let mut items = match reply {
        Value::Array(items) => items.into_iter(),
        other => return Err(unexpected(&other)),
    };
    let status = items.next().map(text).unwrap_or_default();
    let second = items.next().map(text).unwrap_or_default();
    match status.as_deref() {
        Some("ok") => {
            let recorded = second.map(|t| parse_token(&t)).transpose()?;
            Ok((recorded, items.next().unwrap_or(Value::Nil)))
        }
        Some("stale") => Err(FenceError::Stale {
            name: key.to_string(),
            token,
            newest: parse_token(second.as_deref().unwrap_or_default())?,
        }),
        Some("foreign") => Err(FenceError::ForeignData {
            key: key.to_string(),
            found: second.unwrap_or_default(),
        }),
        _ => Err(unexpected(&Value::Nil)),
    }
}

/// A bulk or simple string as text; `None` for nil (and anything else).
fn text(value: Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

fn parse_token(text: &str) -> Result<u64, FenceError> {
    // The script only ever records (and accepts) canonical u64 decimals.
    text.parse().map_err(|_| {
        FenceError::Redis(::redis::RedisError::from((
            ::redis::ErrorKind::UnexpectedReturnType,
            "fence script returned a malformed token",
            text.to_string(),
        )))
    })
}

fn unexpected(reply: &Value) -> FenceError {
    FenceError::Redis(::redis::RedisError::from((
        ::redis::ErrorKind::UnexpectedReturnType,
        "unexpected reply from the fence script",
        format!("{reply:?}"),
    )))
}
