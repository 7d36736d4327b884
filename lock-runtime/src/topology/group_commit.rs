//! Group commit for acknowledged writes: when replicas must acknowledge (`replica_ack`), the
//! writes of one client that queue while one of its writes is in flight go out together when it
//! returns, in one pipeline, followed by one `WAIT` for all of them.
//!
//! The group is what keeps the throughput: a `WAIT` holds up everything behind it on the
//! connection until the replicas answer, so one `WAIT` per write would let one write through
//! per replica round trip, whatever the number of tasks. Alone, a write goes out at once.
//!
//! Order is kept: one request of this client's writes is in flight at a time, and a queue is
//! sent in the order it was made, so a release queued after an acquire (a cancelled acquire's
//! clean-up) never overtakes it, also when some of its calls found no script and are sent
//! again (`run`: every call from the first of them on goes again, in order). The writer whose
//! request is in flight passes the queue on to a task when it is done, or when it is
//! cancelled, so a queue never waits on a caller that left.
//!
//! Used on one server and behind Sentinel; a cluster sends each call to its slot's node. (An
//! option merged a group's mutex operations into one script call; it cost Redis more CPU per
//! lock than it saved on every primitive measured, and was removed: CHANGELOG.)

use std::sync::{Arc, Mutex, MutexGuard};

use redis::aio::ConnectionLike;
use redis::{RedisError, RedisResult, Value};
use tokio::sync::oneshot;

use super::Conn;
use super::replica_ack::ReplicaAck;
use crate::backend::Acked;
use crate::script::{self, Call, Dialect};

/// The writes of one client, committed in groups.
pub(crate) struct GroupCommit {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Conn,
    dialect: Dialect,
    /// `WAIT` after each request, for every write it carried.
    ack: ReplicaAck,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// A request of this client's writes is in flight (or a task is sending the queue).
    busy: bool,
    queue: Vec<Queued>,
}

/// A write waiting for its turn, and where its reply goes.
struct Queued {
    call: Call,
    /// The generation of the master it was built for (`Conn::pin`), if it carries its epoch.
    pin: Option<u64>,
    reply: oneshot::Sender<RedisResult<Acked<Value>>>,
}

impl GroupCommit {
    /// Groups on `conn`, one `WAIT` after each request acknowledging every write it carried.
    pub(crate) fn new(conn: Conn, dialect: Dialect, ack: ReplicaAck) -> GroupCommit {
        GroupCommit {
            inner: Arc::new(Inner {
                conn,
                dialect,
                ack,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Runs `call`: at once when nothing of this client's is in flight, else with the queue
    /// once the request in flight returns. The reply is the script's, or the error of the
    /// request that carried it. `pin`: the generation of the master the call was built for
    /// (`Conn::pin`): sent only to that master, else failed unsent.
    pub(crate) async fn send(&self, call: Call, pin: Option<u64>) -> RedisResult<Acked<Value>> {
        let queued = {
            let mut state = self.inner.lock();
            if state.busy || !state.queue.is_empty() {
                let (reply, rx) = oneshot::channel();
                state.queue.push(Queued { call, pin, reply });
                Err(rx)
            } else {
                state.busy = true;
                Ok(call)
            }
        };
        match queued {
            Ok(call) => {
                // Passes the queue on when this request is done, or dropped mid-flight.
                let _turn = Turn(&self.inner);
                let mut conn = self.inner.conn.pinned(pin);
                let dialect = &self.inner.dialect;
                let calls = std::slice::from_ref(&call);
                let (mut results, acked) = run(&mut conn, dialect, calls, self.inner.ack).await;
                let reply = results.pop().unwrap_or_else(|| Err(lost_reply()))?;
                Ok(ReplicaAck::judged(Some(self.inner.ack), reply, acked))
            }
            Err(rx) => {
                // Queued behind writes that nothing sends yet (see `send_all`).
                Inner::pass_on(&self.inner, false);
                rx.await.unwrap_or_else(|_| Err(lost_reply()))
            }
        }
    }

    /// Runs `calls` in order (each as [`GroupCommit::send`] would) and returns their replies.
    pub(crate) async fn send_all(&self, calls: Vec<Call>) -> Vec<RedisResult<Acked<Value>>> {
        let receivers: Vec<_> = {
            let mut state = self.inner.lock();
            calls
                .into_iter()
                .map(|call| {
                    let (reply, rx) = oneshot::channel();
                    state.queue.push(Queued {
                        call,
                        pin: None,
                        reply,
                    });
                    rx
                })
                .collect()
        };
        // If nothing is in flight, the queue goes out now, by a task of its own; else when the
        // request in flight returns.
        Inner::pass_on(&self.inner, false);
        let mut replies = Vec::with_capacity(receivers.len());
        for rx in receivers {
            replies.push(rx.await.unwrap_or_else(|_| Err(lost_reply())));
        }
        replies
    }
}

/// The turn of a caller whose own request is in flight; dropping it passes the queue on.
struct Turn<'a>(&'a Arc<Inner>);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        Inner::pass_on(self.0, true);
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a flag and a queue, consistent at every unlock.
        crate::sync::lock(&self.state)
    }

    /// If writes are queued and nothing is in flight (or `ending_turn`: only the caller's own
    /// request was, and it is over), a task sends them, and what queues meanwhile, until the
    /// queue is empty. The flag and the queue change together, so no write can slip in between.
    fn pass_on(inner: &Arc<Inner>, ending_turn: bool) {
        let batch = {
            let mut state = inner.lock();
            if ending_turn {
                state.busy = false;
            }
            if state.busy || state.queue.is_empty() {
                return;
            }
            state.busy = true;
            std::mem::take(&mut state.queue)
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to send from (the last caller left as the runtime shut down): the
            // queued callers get an error (their senders are dropped), as for a lost connection.
            inner.lock().busy = false;
            return;
        };
        let mut drain = Drain {
            inner: inner.clone(),
            finished: false,
        };
        runtime.spawn(async move {
            let mut batch = batch;
            loop {
                drain.inner.send_queue(batch).await;
                let mut state = drain.inner.lock();
                if state.queue.is_empty() {
                    state.busy = false;
                    drop(state);
                    drain.finish();
                    return;
                }
                batch = std::mem::take(&mut state.queue);
            }
        });
    }

    /// Sends a queue in one pipeline and hands each caller its reply.
    async fn send_queue(&self, queue: Vec<Queued>) {
        // Writes built for a master the client has switched away from fail unsent (their
        // callers build them again for the new one); the rest go to the master of the
        // moment, pinned to it if any of them carries its epoch.
        let current = self.conn.generation();
        let (queue, moved): (Vec<Queued>, Vec<Queued>) =
            (queue.into_iter()).partition(|queued| queued.pin.is_none() || queued.pin == current);
        for queued in moved {
            let _ = queued.reply.send(Err(super::moved_before_sent()));
        }
        if queue.is_empty() {
            return;
        }
        let pinned = queue.iter().any(|queued| queued.pin.is_some());
        let mut conn = self.conn.pinned(current.filter(|_| pinned));
        let calls: Vec<Call> = queue.iter().map(|queued| queued.call.clone()).collect();
        let (results, acked) = run(&mut conn, &self.dialect, &calls, self.ack).await;
        for (queued, result) in queue.into_iter().zip(results) {
            let _ = queued
                .reply
                .send(result.map(|r| ReplicaAck::judged(Some(self.ack), r, acked)));
        }
    }
}

/// The task sending the queue. If it is dropped before it finished (its runtime shuts down),
/// the queued callers get an error and the next write starts afresh.
struct Drain {
    inner: Arc<Inner>,
    finished: bool,
}

impl Drain {
    fn finish(&mut self) {
        self.finished = true;
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        if !self.finished {
            let mut state = self.inner.lock();
            state.busy = false;
            state.queue.clear();
        }
    }
}

/// Runs `calls` in one pipeline, followed by `WAIT`; each gets its own reply or error, and all
/// share the `WAIT`'s count (`None` when it failed).
///
/// When some found no script (or function), what they use is loaded and every call from the
/// first of them on is sent again, in order: the calls after it that ran meanwhile (a call that
/// finds its script or function where the one before it found none) must not have overtaken
/// it. A release of a cancelled acquire
/// that ran before its acquire found nothing to release; run again after it, it releases. Our
/// lock operations are idempotent per owner id (a re-take, a release of what is no longer
/// held), so the second run ends in the state the queue's order gives. A call that had already
/// succeeded the first time keeps that reply (a release handed over, an acquire granted; see
/// [`first_or_again`]); the others get their second.
///
/// The `WAIT` goes after every write of the request on the same connection, so it counts them
/// all; after a second run it is the second `WAIT` that counts (it comes after both).
async fn run(
    conn: &mut Conn,
    dialect: &Dialect,
    calls: &[Call],
    ack: ReplicaAck,
) -> (Vec<RedisResult<Value>>, Option<u32>) {
    let cmds: Vec<redis::Cmd> = calls.iter().map(|c| dialect.cmd(c).into_owned()).collect();
    let (mut results, mut acked) = send_acked(conn, cmds, ack).await;
    let missing: Vec<usize> = (0..results.len())
        .filter(|&i| matches!(&results[i], Err(e) if script::is_missing(e)))
        .collect();
    let Some(&from) = missing.first() else {
        return (results, acked);
    };
    let errors: Vec<RedisError> = missing
        .iter()
        .filter_map(|&i| results[i].as_ref().err().cloned())
        .collect();
    let errors: Vec<&RedisError> = errors.iter().collect();
    let scripts = script::scripts_of(calls);
    match dialect.recover(conn, &errors, &scripts).await {
        Ok(true) => {}
        Ok(false) => return (results, acked),
        Err(e) => {
            for &i in &missing {
                results[i] = Err(e.clone());
            }
            return (results, acked);
        }
    }
    let again: Vec<redis::Cmd> = calls[from..]
        .iter()
        .map(|call| dialect.cmd(call).into_owned())
        .collect();
    let seconds;
    (seconds, acked) = send_acked(conn, again, ack).await;
    for (i, second) in (from..).zip(seconds) {
        let first = std::mem::replace(&mut results[i], Err(lost_reply()));
        results[i] = if missing.contains(&i) {
            second
        } else {
            first_or_again(first, second)
        };
    }
    (results, acked)
}

/// [`send_pipeline`] of `cmds`, then `WAIT` in the same pipeline: the commands' results, and
/// the `WAIT`'s count (`None` when it failed).
async fn send_acked(
    conn: &mut Conn,
    mut cmds: Vec<redis::Cmd>,
    ack: ReplicaAck,
) -> (Vec<RedisResult<Value>>, Option<u32>) {
    cmds.push(ack.wait_cmd());
    let mut results = send_pipeline(conn, &cmds).await;
    let acked = match results.pop() {
        Some(Ok(reply)) => Some(ReplicaAck::acknowledged(&reply)),
        _ => None,
    };
    (results, acked)
}

/// The reply to give a call that ran twice (see [`run`]): the first when it succeeded (`1`
/// or `{1, …}` done, `{2, …}` handed over, nil for a plain `SET` that took the lock: the second
/// run of an acquire granted is a re-take, of a release done finds nothing), else the second.
fn first_or_again(first: RedisResult<Value>, second: RedisResult<Value>) -> RedisResult<Value> {
    let succeeded = |reply: &Value| match reply {
        Value::Int(1) | Value::Nil => true,
        Value::Array(items) => matches!(items.first(), Some(Value::Int(1 | 2))),
        _ => false,
    };
    match (first, second) {
        (Ok(first), _) if succeeded(&first) => Ok(first),
        (_, second) => second,
    }
}

/// One pipeline of `cmds`, a result per command (an error reply is that command's error; a
/// failed request is every command's).
async fn send_pipeline(conn: &mut Conn, cmds: &[redis::Cmd]) -> Vec<RedisResult<Value>> {
    if let [cmd] = cmds {
        return vec![
            conn.req_packed_command(cmd)
                .await
                .and_then(Value::extract_error),
        ];
    }
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for cmd in cmds {
        pipe.add_command(cmd.clone());
    }
    match pipe.query_async::<Vec<Value>>(conn).await {
        Ok(values) if values.len() == cmds.len() => {
            values.into_iter().map(Value::extract_error).collect()
        }
        Ok(_) => {
            let e = RedisError::from((
                redis::ErrorKind::Parse,
                "a pipeline returned the wrong number of replies",
            ));
            cmds.iter().map(|_| Err(e.clone())).collect()
        }
        Err(e) => cmds.iter().map(|_| Err(e.clone())).collect(),
    }
}

/// The error of a write whose reply cannot come: the task sending it was stopped (its runtime
/// shut down). Its outcome is unknown.
fn lost_reply() -> RedisError {
    RedisError::from((
        redis::ErrorKind::Io,
        "lock write dropped before its reply arrived (runtime shutting down)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(items: &[i64]) -> Value {
        Value::Array(items.iter().map(|&i| Value::Int(i)).collect())
    }

    #[test]
    fn a_call_that_succeeded_the_first_time_keeps_its_first_reply() {
        // A release done (a bare 1), then found nothing the second time.
        let kept = first_or_again(Ok(Value::Int(1)), Ok(reply(&[0, 0])));
        assert_eq!(kept.unwrap(), Value::Int(1));
        // An acquire granted: the second run re-took it with a later token.
        let kept = first_or_again(Ok(reply(&[1, 5])), Ok(reply(&[1, 6])));
        assert_eq!(kept.unwrap(), reply(&[1, 5]));
        // Busy the first time, granted the second.
        let again = first_or_again(Ok(reply(&[0, 100])), Ok(reply(&[1, 7])));
        assert_eq!(again.unwrap(), reply(&[1, 7]));
    }
}
