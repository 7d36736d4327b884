//! Sending script calls: one call ([`send`], with `WAIT` in the same pipeline when replicas
//! must acknowledge) or a pipeline of them ([`query_reloading`]), on any connection; both
//! load a script (or the library of functions) the server lost and retry once. Used by the
//! backend's operations (`operations.rs`) and by a cluster's per-lock releases (`cluster.rs`).

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, RedisResult, Value};

use super::replica_ack::ReplicaAck;
use crate::script::{self, Call, Dialect};

/// Runs one script call, followed by `WAIT` in the same pipeline on the same connection when
/// `ack` is given (so `WAIT` counts exactly this write); loads the script (or the library of
/// functions) and retries once if the server lost it. Returns the reply and, with `ack`, how
/// many replicas acknowledged.
pub(crate) async fn send<T: FromRedisValue>(
    conn: &mut (impl ConnectionLike + Send),
    dialect: &Dialect,
    call: &Call,
    ack: Option<ReplicaAck>,
) -> RedisResult<(T, Option<u32>)> {
    // The recovery and the acknowledged path are boxed: every request in flight keeps this
    // future (an acquire's, a release's), and inline they would make it three times as large
    // (928 bytes, against 280) for paths that a request rarely takes.
    let Some(ack) = ack else {
        // `query_async`, not the raw request: it turns an error reply into an `Err`.
        let reply: Value = match dialect.cmd(call).query_async(&mut *conn).await {
            Err(e) => Box::pin(send_recovered(conn, dialect, call, e)).await?,
            Ok(reply) => reply,
        };
        return Ok((T::from_redis_value(reply)?, None));
    };
    let (reply, acked): (T, Value) = FromRedisValue::from_redis_value(Value::Array(
        Box::pin(query_reloading(
            conn,
            dialect,
            std::slice::from_ref(call),
            Some(ack),
        ))
        .await?,
    ))?;
    Ok((reply, Some(ReplicaAck::acknowledged(&acked))))
}

/// After `e` from a call [`send`] sent: makes what it needs available (see
/// [`Dialect::recover`]) and sends it once more, or returns `e` when that would not help.
async fn send_recovered(
    conn: &mut (impl ConnectionLike + Send),
    dialect: &Dialect,
    call: &Call,
    e: redis::RedisError,
) -> RedisResult<Value> {
    if !dialect
        .recover(&mut *conn, &[&e], call.script().as_slice())
        .await?
    {
        return Err(e);
    }
    dialect.cmd(call).query_async(conn).await
}

/// Runs a pipeline of script calls, followed by `WAIT` when `ack` is given; if the server
/// lost a script (or the library of functions), loads what the calls use and runs the
/// pipeline once more.
pub(crate) async fn query_reloading(
    conn: &mut (impl ConnectionLike + Send),
    dialect: &Dialect,
    calls: &[Call],
    ack: Option<ReplicaAck>,
) -> RedisResult<Vec<Value>> {
    let pipeline = || {
        let mut pipe = redis::pipe();
        for call in calls {
            pipe.add_command(dialect.cmd(call).into_owned());
        }
        if let Some(ack) = ack {
            ack.append_wait(&mut pipe);
        }
        pipe
    };
    match pipeline().query_async::<Vec<Value>>(&mut *conn).await {
        Err(e) => {
            if !dialect
                .recover(&mut *conn, &[&e], &script::scripts_of(calls))
                .await?
            {
                return Err(e);
            }
            pipeline().query_async(conn).await
        }
        other => other,
    }
}
