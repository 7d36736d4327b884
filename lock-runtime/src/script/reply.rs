//! Reading the scripts' replies: a lock operation's `{code, detail}` pair, `inspect.lua`'s
//! state, and the errors that say a script call must be sent again differently.

use redis::Value;

use crate::backend::{LockState, Reply};

impl redis::FromRedisValue for Reply {
    /// The `{code, detail}` pair every single-key script returns (or a bare `code`, for
    /// `{code, 0}`): `{1, n}` done, `{0, n}` not done, `{2, token}` released and handed over, `{3, capacity}` more permits asked than a
    /// semaphore has, `{-1, type}` foreign data.
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let (code, detail): (i64, Value) = match v {
            // A bare code stands for `{code, 0}` (the release's common answer: a number costs
            // the server less than a table).
            Value::Int(code) => (code, Value::Int(0)),
            v => redis::FromRedisValue::from_redis_value(v)?,
        };
        let int = |v: Value| -> Result<i64, redis::ParsingError> {
            redis::FromRedisValue::from_redis_value(v)
        };
        match code {
            1 => Ok(Reply::Done(int(detail)?)),
            0 => Ok(Reply::NotDone(int(detail)?)),
            2 => Ok(Reply::HandedOff(int(detail)?)),
            3 => Ok(Reply::Exceeds(int(detail)?)),
            -1 => Ok(Reply::Foreign(redis::FromRedisValue::from_redis_value(
                detail,
            )?)),
            other => Err(format!("unexpected lock script status {other}").into()),
        }
    }
}

impl redis::FromRedisValue for LockState {
    /// `inspect.lua`'s reply: `{type, pttl, holders, holder count, token, queued, writers,
    /// subscribers, capacity}`. Text that is not UTF-8 (a foreign hash's fields) is read lossily.
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let fields: Vec<Value> = redis::FromRedisValue::from_redis_value(v)?;
        let [
            kind,
            pttl,
            holders,
            count,
            token,
            queued,
            writers,
            subscribers,
            capacity,
        ] = <[Value; 9]>::try_from(fields)
            .map_err(|f| format!("inspect replied {} fields, not 9", f.len()))?;
        let int = |v: Value| -> Result<i64, redis::ParsingError> {
            redis::FromRedisValue::from_redis_value(v)
        };
        let text = |v: Value| -> Result<String, redis::ParsingError> {
            match v {
                Value::BulkString(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
                v => redis::FromRedisValue::from_redis_value(v),
            }
        };
        let count_of = |v: Value| int(v).map(|n| u64::try_from(n).unwrap_or(0));
        let flat: Vec<Value> = redis::FromRedisValue::from_redis_value(holders)?;
        let mut pairs = Vec::with_capacity(flat.len() / 2);
        let mut flat = flat.into_iter();
        while let (Some(owner), Some(detail)) = (flat.next(), flat.next()) {
            // A foreign hash's value need not be a number.
            let detail = text(detail)?.trim().parse().unwrap_or(0);
            pairs.push((text(owner)?, detail));
        }
        let optional = |v: Value| -> Result<Option<String>, redis::ParsingError> {
            match v {
                Value::Nil => Ok(None),
                v => text(v).map(Some),
            }
        };
        Ok(LockState {
            kind: text(kind)?,
            pttl: int(pttl)?,
            holders: pairs,
            holder_count: count_of(count)?,
            token: optional(token)?.and_then(|t| t.parse().ok()),
            queued: count_of(queued)?,
            writers: count_of(writers)?,
            subscribers: count_of(subscribers)?,
            capacity: optional(capacity)?.and_then(|c| c.parse().ok()),
        })
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
        // A bare code: `{code, 0}`.
        assert_eq!(
            Reply::from_redis_value(Value::Int(1)).unwrap(),
            Reply::Done(0)
        );
    }

    #[test]
    fn inspect_replies_parse() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = Value::Array(vec![
            Value::SimpleString("zset".into()),
            Value::Int(900),
            Value::Array(vec![bulk("c:1#2"), bulk("900"), bulk("c:2#1"), bulk("40")]),
            Value::Int(2),
            bulk("1700000000000001"),
            Value::Int(0),
            Value::Int(0),
            Value::Int(3),
            bulk("5"),
        ]);
        let state = LockState::from_redis_value(reply).unwrap();
        assert_eq!(state.kind, "zset");
        assert_eq!(state.pttl, 900);
        assert_eq!(
            state.holders,
            [("c:1#2".to_owned(), 900), ("c:2#1".to_owned(), 40)]
        );
        assert_eq!(state.token, Some(1_700_000_000_000_001));
        assert_eq!((state.subscribers, state.capacity), (3, Some(5)));
        assert!(state.held());
        let free = Value::Array(vec![
            bulk("none"),
            Value::Int(0),
            Value::Array(vec![]),
            Value::Int(0),
            Value::Nil,
            Value::Int(0),
            Value::Int(0),
            Value::Int(0),
            Value::Nil,
        ]);
        let state = LockState::from_redis_value(free).unwrap();
        assert!(!state.held());
        assert_eq!((state.token, state.capacity), (None, None));
        assert!(LockState::from_redis_value(Value::Array(vec![Value::Int(1)])).is_err());
    }
}
