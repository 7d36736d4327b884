//! Group commit: acquires (and releases) of one client that queue while earlier ones are in
//! flight go to Redis as one script call.
//!
//! At most [`MAX_IN_FLIGHT`] calls of a kind are in flight at once. A request that finds a
//! free slot goes out alone at once, so an uncontended client pays nothing; one that finds
//! them all taken queues, and the call that finishes first sends everything queued as one batch
//! (`acquire_batch.lua`, `release_batch.lua`) on a spawned task, and so on until the queue is
//! empty. On a busy client this turns many script calls into one: Redis parses, dispatches and
//! answers once, and the per-lock work is all that is left of the cost.
//!
//! Only on one server and a Sentinel master: the keys of one call on a cluster must share a
//! slot. A proxy in front of a cluster rejects a batch spanning slots (CROSSSLOT); the backend
//! then stops grouping (the flag it also uses for renewals) and this batch goes out one call
//! per lock.
//!
//! A caller that stops waiting (cancelled) while its request is queued or in a batch loses
//! nothing: an acquire that the batch granted is released at once, since nobody will hold it,
//! and a release happens anyway.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use redis::{FromRedisValue, RedisResult, Value};
use tokio::sync::oneshot;

use super::Conn;
use super::operations::send;
use super::replica_ack::ReplicaAck;
use crate::backend::{Acked, Reply};
use crate::names::LockNames;
use crate::script::{self, Call, Publishing};
use crate::sync;

/// Calls of one kind in flight at once before requests queue.
const MAX_IN_FLIGHT: usize = 2;
/// Requests per batch call.
const MAX_BATCH: usize = 128;

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Acquire,
    Release,
}

/// One queued request.
struct Queued {
    names: LockNames,
    owner: String,
    /// The lease and the fencing counter's retention, for an acquire.
    lease_ms: u64,
    retention_ms: u64,
    tx: oneshot::Sender<RedisResult<Acked<Reply>>>,
}

#[derive(Default)]
struct State {
    in_flight: usize,
    queue: Vec<Queued>,
}

/// The queues of one client's Redis backend.
#[derive(Default)]
pub(crate) struct Groups {
    acquires: Mutex<State>,
    releases: Mutex<State>,
}

/// What [`Groups::enter`] decided.
pub(crate) enum Entry {
    /// Send the call yourself; keep the `Lead` until it is answered (dropping it hands the
    /// slot to whatever queued meanwhile).
    Lead(Lead),
    /// Queued: the answer comes here.
    Queued(oneshot::Receiver<RedisResult<Acked<Reply>>>),
}

/// How a batch is sent: what a spawned batch task needs of the backend.
#[derive(Clone)]
pub(crate) struct Sender {
    pub(crate) conn: Conn,
    pub(crate) ack: Option<ReplicaAck>,
    pub(crate) publishing: Publishing,
    /// Set once a proxy rejected a batch as cross-slot: no more grouping.
    pub(crate) per_slot: Arc<AtomicBool>,
}

/// A request sent on its own; its slot passes on when it is dropped.
pub(crate) struct Lead {
    groups: Arc<Groups>,
    kind: Kind,
    sender: Option<Sender>,
}

impl Groups {
    fn state(&self, kind: Kind) -> &Mutex<State> {
        match kind {
            Kind::Acquire => &self.acquires,
            Kind::Release => &self.releases,
        }
    }

    /// Takes an in-flight slot, or queues the request.
    pub(crate) fn enter(
        self: &Arc<Self>,
        kind: Kind,
        names: &LockNames,
        owner: &str,
        (lease_ms, retention_ms): (u64, u64),
        sender: impl FnOnce() -> Sender,
    ) -> Entry {
        let mut state = sync::lock(self.state(kind));
        if state.in_flight < MAX_IN_FLIGHT {
            state.in_flight += 1;
            drop(state);
            return Entry::Lead(Lead {
                groups: self.clone(),
                kind,
                sender: Some(sender()),
            });
        }
        let (tx, rx) = oneshot::channel();
        state.queue.push(Queued {
            names: names.clone(),
            owner: owner.to_owned(),
            lease_ms,
            retention_ms,
            tx,
        });
        Entry::Queued(rx)
    }

    /// A call of `kind` finished: send what queued meanwhile as the next batch, or free the slot.
    fn finish(self: &Arc<Self>, kind: Kind, sender: Sender) {
        let batch = {
            let mut state = sync::lock(self.state(kind));
            if state.queue.is_empty() {
                state.in_flight -= 1;
                return;
            }
            let n = state.queue.len().min(MAX_BATCH);
            state.queue.drain(..n).collect::<Vec<_>>()
        };
        tokio::spawn(self.clone().run(kind, sender, batch));
    }

    /// Sends batches until the queue is empty, then frees the slot.
    async fn run(self: Arc<Self>, kind: Kind, sender: Sender, mut batch: Vec<Queued>) {
        loop {
            let replies = send_batch(&sender, kind, &batch).await;
            deliver(&sender, kind, batch, replies).await;
            let mut state = sync::lock(self.state(kind));
            if state.queue.is_empty() {
                state.in_flight -= 1;
                return;
            }
            let n = state.queue.len().min(MAX_BATCH);
            batch = state.queue.drain(..n).collect();
        }
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take() {
            self.groups.finish(self.kind, sender);
        }
    }
}

/// One batch call; one result per request, in order.
async fn send_batch(
    sender: &Sender,
    kind: Kind,
    batch: &[Queued],
) -> Vec<RedisResult<Acked<Reply>>> {
    let call = match kind {
        Kind::Acquire => Call::acquire_batch(
            batch
                .iter()
                .map(|q| (&q.names, q.owner.as_str(), q.lease_ms)),
            // One client, one setting.
            batch.first().map_or(0, |q| q.retention_ms),
        ),
        Kind::Release => Call::release_batch(batch.iter().map(|q| (&q.names, q.owner.as_str()))),
    };
    let mut conn = sender.conn.clone();
    match send::<Vec<Value>>(&mut conn, &call, sender.ack).await {
        Ok((items, acked)) if items.len() == batch.len() => {
            let shortfall = sender.ack.zip(acked).and_then(|(ack, n)| ack.shortfall(n));
            items
                .into_iter()
                .map(|item| {
                    let reply = Reply::from_redis_value(item.extract_error()?)?;
                    Ok(Acked { reply, shortfall })
                })
                .collect()
        }
        Ok((items, _)) => {
            let e = redis::RedisError::from((
                redis::ErrorKind::Parse,
                "batch reply of the wrong length",
                format!("{} replies for {} requests", items.len(), batch.len()),
            ));
            batch.iter().map(|_| Err(e.clone())).collect()
        }
        Err(e) if script::is_cross_slot(&e) => {
            tracing::warn!(error = %e, "a batch of lock calls was rejected as cross-slot (a proxy in front of a cluster); one call per lock from now on");
            sender.per_slot.store(true, Ordering::Relaxed);
            let mut out = Vec::with_capacity(batch.len());
            for q in batch {
                out.push(
                    send_one(
                        sender,
                        kind,
                        &q.names,
                        &q.owner,
                        (q.lease_ms, q.retention_ms),
                    )
                    .await,
                );
            }
            out
        }
        Err(e) => batch.iter().map(|_| Err(e.clone())).collect(),
    }
}

/// One request on its own.
async fn send_one(
    sender: &Sender,
    kind: Kind,
    names: &LockNames,
    owner: &str,
    (lease_ms, retention_ms): (u64, u64),
) -> RedisResult<Acked<Reply>> {
    let call = match kind {
        Kind::Acquire => Call::acquire(names, owner, lease_ms, retention_ms),
        Kind::Release => Call::release(sender.publishing, names, owner, None),
    };
    let (reply, acked) = send::<Reply>(&mut sender.conn.clone(), &call, sender.ack).await?;
    let shortfall = sender.ack.zip(acked).and_then(|(ack, n)| ack.shortfall(n));
    Ok(Acked { reply, shortfall })
}

/// Hands each caller its result; releases a grant whose caller is gone.
async fn deliver(
    sender: &Sender,
    kind: Kind,
    batch: Vec<Queued>,
    replies: Vec<RedisResult<Acked<Reply>>>,
) {
    for (q, reply) in batch.into_iter().zip(replies) {
        let granted = kind == Kind::Acquire
            && matches!(
                reply,
                Ok(Acked {
                    reply: Reply::Done(_),
                    ..
                })
            );
        if q.tx.send(reply).is_err() && granted {
            tracing::debug!(lock = %q.names.name, "acquire cancelled while its batch took the lock; releasing it");
            let released = send_one(sender, Kind::Release, &q.names, &q.owner, (0, 0)).await;
            if let Err(e) = released {
                tracing::warn!(lock = %q.names.name, error = %e, "could not release a lock taken for a cancelled acquire; it expires with its lease");
            }
        }
    }
}
