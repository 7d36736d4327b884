//! The Redis backend: the lock operations as script calls on any topology.
//!
//! Every operation is a [`Call`] from `script/`, sent by `call.rs`' [`send`] (followed by
//! `WAIT` in the same pipeline when replicas must acknowledge) or, for batches, by
//! [`query_reloading`]; both load a script the server lost and retry once. Batches are shaped per topology here:
//!
//! - **renewals**: one pipeline of renew calls (up to [`RENEW_CHUNK`] keys each, fewer under a
//!   lower argument limit) on one server
//!   or the Sentinel master; one call per slot once the endpoint turned out to be a proxy in
//!   front of a cluster (CROSSSLOT); one pipeline per node on a cluster (`cluster.rs`);
//! - **background releases**: one pipeline on one server; one call per lock on a cluster.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::{FromRedisValue, RedisResult, Value};

use super::call::{query_reloading, send};
use super::group_commit::GroupCommit;
use super::replica_ack::{self, ReplicaAck};
use super::{Conn, Pin};
use crate::backend::CapacityOp;
use crate::backend::{
    Acked, Approach, Backend, BoxFuture, HandOff, LockState, Release, Reply, ScanNode,
};
use crate::keys::LockNames;
use crate::script::{self, Call, Dialect, Publishing};

/// Keys per renewal script call at most; a batch of any size is still one pipelined round trip.
pub(crate) const RENEW_CHUNK: usize = 500;

/// Keys per renewal call within an argument limit: a call is `EVALSHA <sha> <numkeys>` (or
/// `FCALL`), the keys, the lease and an owner per key.
fn renew_chunk(max_arguments: usize) -> usize {
    (max_arguments.saturating_sub(4) / 2).clamp(1, RENEW_CHUNK)
}

// The default limit keeps the largest renewal call.
const _: () = assert!(3 + RENEW_CHUNK + 1 + RENEW_CHUNK <= crate::backend::MAX_REQUEST_ARGUMENTS);

/// The lock operations on a Redis deployment.
pub(crate) struct RedisBackend {
    conn: Conn,
    /// Our scripts as functions or as scripts, on this endpoint.
    dialect: Dialect,
    publishing: Publishing,
    ack: Option<ReplicaAck>,
    fails_over: bool,
    /// Keys per renewal call, within the client's argument limit.
    renew_chunk: usize,
    /// Releases of a mutex without an heir try `DELIFEQ` first (Valkey 9.0 and later); off
    /// for good once the endpoint refuses it (a node of an older version, an ACL without it).
    delete_if_equal: AtomicBool,
    /// Renew one slot per script call: the endpoint is a proxy in front of a cluster.
    per_slot: AtomicBool,
    /// Where the slots of the cluster live, for batching renewals per node.
    #[cfg(feature = "cluster")]
    slots: super::slots::SlotCache,
    /// Lock writes committed in groups when replicas must acknowledge, on one server and
    /// behind Sentinel (see `group_commit.rs`).
    group: Option<GroupCommit>,
}

impl RedisBackend {
    pub(crate) fn new(
        conn: Conn,
        publishing: Publishing,
        ack: Option<ReplicaAck>,
        fails_over: bool,
        max_arguments: usize,
        delete_if_equal: bool,
    ) -> RedisBackend {
        // One endpoint: one server, or the master behind Sentinel. Not a cluster (each call
        // goes to its slot's node, and a library would have to be on every master), nor the
        // unit tests' fake (which answers scripts by their hash).
        let one_endpoint = match &conn {
            Conn::Single(_) => true,
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(_) => true,
            #[allow(unreachable_patterns)]
            _ => false,
        };
        let dialect = if one_endpoint {
            Dialect::functions()
        } else {
            Dialect::scripts()
        };
        // Writes that must be acknowledged always go in groups: `WAIT` holds up everything
        // behind it on the shared connection anyway, so one `WAIT` per group instead of one
        // per write (a write's `WAIT` ended before the next write could go out: with 64 tasks
        // taking locks, 14 × fewer locks per second than without acknowledgement, measured).
        let group = ack
            .filter(|_| one_endpoint)
            .map(|ack| GroupCommit::new(conn.clone(), dialect.clone(), ack));
        RedisBackend {
            group,
            conn,
            dialect,
            publishing,
            ack,
            fails_over,
            renew_chunk: renew_chunk(max_arguments),
            delete_if_equal: AtomicBool::new(delete_if_equal),
            per_slot: AtomicBool::new(false),
            #[cfg(feature = "cluster")]
            slots: Default::default(),
        }
    }

    /// A single-lock write, acknowledged by replicas when the client asks for it.
    /// `pin`: the master a call carrying its failover epoch was built for (see [`Conn::pin`]):
    /// sent only to it, else failed unsent.
    async fn write(&self, call: Call, pin: Option<Pin>) -> RedisResult<Acked<Reply>> {
        let Acked { reply, shortfall } = self.write_value(call, pin).await?;
        Ok(Acked {
            reply: Reply::from_redis_value(reply)?,
            shortfall,
        })
    }

    /// A release: of a mutex of this crate's layout without an heir, a `DELIFEQ` first where
    /// the server has it, which deletes the lock when it is ours and no waiter marked it (the
    /// common release, which `release.lua` would end the same way: deleted, nothing
    /// published); otherwise, or when it deleted nothing, `release.lua`, which tells the other
    /// cases apart (marked: deleted and the waiters woken; not ours; foreign data).
    async fn release_one(
        &self,
        names: &LockNames,
        owner: &str,
        next: Option<HandOff<'_>>,
    ) -> RedisResult<Acked<Reply>> {
        if next.is_none()
            && self.delete_if_equal.load(Ordering::Relaxed)
            && let Some(call) = Call::delete_if_equal(names, owner)
        {
            match self.write_value(call, None).await {
                Ok(Acked {
                    reply: Value::Int(1),
                    shortfall,
                }) => {
                    return Ok(Acked {
                        reply: Reply::Done(0),
                        shortfall,
                    });
                }
                Ok(_) => {}
                Err(e) if e.code() == Some("WRONGTYPE") => {}
                Err(e) if e.code() == Some("NOPERM") || crate::server::unknown_command(&e) => {
                    // Unknown here (a node of an older version) or refused (an ACL without it):
                    // the script from now on.
                    tracing::warn!(error = %e, "DELIFEQ refused; releasing with the script from now on");
                    self.delete_if_equal.store(false, Ordering::Relaxed);
                }
                // Anything else (no reply, a demoted master, …) is the release's own outcome.
                Err(e) => return Err(e),
            }
        }
        // A release that hands the lock on grants it, with a token of the master's epoch.
        let pin = match &next {
            Some(next) => {
                let issues_token = next.fenced && names.scheme.orders_tokens_by_epoch();
                self.conn.pin(issues_token).await?
            }
            None => None,
        };
        let epoch = pin.and_then(|pin| pin.epoch);
        let call = Call::release(self.publishing, names, owner, next.as_ref(), epoch);
        self.write(call, pin).await
    }

    /// [`RedisBackend::write`], the reply as it came.
    async fn write_value(&self, call: Call, pin: Option<Pin>) -> RedisResult<Acked<Value>> {
        let generation = pin.and_then(|pin| pin.generation);
        if let Some(group) = &self.group {
            // Boxed: only a client whose writes replicas acknowledge commits in groups, and
            // inline its future (near a kilobyte) would be in every request in flight.
            return Box::pin(group.send(call, generation)).await;
        }
        let mut conn = self.conn.pinned(generation);
        let (reply, acked) = send::<Value>(&mut conn, &self.dialect, &call, self.ack).await?;
        Ok(ReplicaAck::judged(self.ack, reply, acked))
    }

    /// The first attempt at a mutex of this crate's layout, taken without a token: a plain
    /// `SET NX PX` ([`Call::plain_acquire`]). `None` when its answer needs the script: a key
    /// of another type (an earlier release's hash, a fair lock's, foreign data), which
    /// `acquire.lua` tells apart.
    async fn plain_acquire(
        &self,
        names: &LockNames,
        owner: &str,
        lease_ms: u64,
    ) -> RedisResult<Option<Acked<Reply>>> {
        let Some(call) = Call::plain_acquire(names, owner, lease_ms) else {
            return Ok(None);
        };
        let Acked { reply, shortfall } = match self.write_value(call, None).await {
            Ok(acked) => acked,
            Err(e) if e.code() == Some("WRONGTYPE") => return Ok(None),
            Err(e) => return Err(e),
        };
        let reply = match reply {
            Value::Nil => Reply::Done(0),
            Value::BulkString(held) => {
                let holder = held.strip_suffix(b"!").unwrap_or(&held);
                if holder == owner.as_bytes() {
                    // A retried request of ours had taken it.
                    Reply::Done(0)
                } else if crate::keys::owner::is_owner_id(holder) {
                    Reply::NotDone(-2)
                } else {
                    // A string that is not a lock: the script names it.
                    return Ok(None);
                }
            }
            Value::ServerError(e) if e.code() == "WRONGTYPE" => return Ok(None),
            other => {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Parse,
                    "unexpected reply to a plain acquire",
                    format!("{other:?}"),
                )));
            }
        };
        Ok(Some(Acked { reply, shortfall }))
    }

    /// A single-lock read (or an unacknowledged write).
    async fn read(&self, call: Call) -> RedisResult<Reply> {
        send::<Reply>(&mut self.conn.clone(), &self.dialect, &call, None)
            .await
            .map(|(reply, _)| reply)
    }

    async fn renew_all(
        &self,
        locks: &[(&str, &str)],
        lease_ms: u64,
        limit: Duration,
    ) -> RedisResult<Vec<Option<bool>>> {
        #[cfg(feature = "cluster")]
        if let Conn::Cluster(cluster) = &self.conn {
            // The cluster path bounds its own steps by `limit` and reports partial success;
            // the outer bound is a safety net.
            let renew = super::cluster::renew(
                cluster,
                &self.slots,
                locks,
                lease_ms,
                self.ack,
                self.renew_chunk,
                limit,
            );
            return match tokio::time::timeout(limit + limit / 16, renew).await {
                Ok(results) => Ok(results),
                Err(_) => {
                    self.slots.invalidate();
                    Err(timed_out("lock renewal timed out"))
                }
            };
        }
        let mut conn = self.conn.clone();
        let renew = renew_pipelined(
            &mut conn,
            &self.dialect,
            locks,
            lease_ms,
            self.ack,
            &self.per_slot,
            self.renew_chunk,
        );
        tokio::time::timeout(limit, renew)
            .await
            .unwrap_or_else(|_| Err(timed_out("lock renewal timed out")))
    }

    async fn release_all(&self, jobs: &[Release<'_>], limit: Duration) -> RedisResult<Vec<usize>> {
        let calls: Vec<Call> = jobs
            .iter()
            .map(|job| Call::release(self.publishing, job.names, job.owner, None, None))
            .collect();
        #[cfg(feature = "cluster")]
        if let Conn::Cluster(cluster) = &self.conn {
            // A pipeline may not span slots: one call per lock, all at once.
            let failed = super::cluster::release_each(cluster, &calls, limit).await;
            return unless_all_failed(failed, jobs.len(), None);
        }
        let _ = limit; // One pipeline on one connection, bounded by its response timeout.
        if let Some(group) = &self.group {
            // In order with this client's other writes: a cancelled acquire's clean-up never
            // overtakes the acquire.
            let results = group.send_all(calls).await;
            let failed = (0..results.len())
                .filter(|&i| results[i].is_err())
                .collect();
            let first = results.into_iter().find_map(Result::err);
            return unless_all_failed(failed, jobs.len(), first);
        }
        // The pipeline may mix the families and layouts: every script it uses is reloaded
        // after the server lost them.
        query_reloading(&mut self.conn.clone(), &self.dialect, &calls, None).await?;
        Ok(Vec::new())
    }
}

impl Backend for RedisBackend {
    fn acquire<'a>(
        &'a self,
        names: &'a LockNames,
        owner: &'a str,
        lease_ms: u64,
        retention_ms: u64,
        approach: Approach,
        fenced: bool,
    ) -> BoxFuture<'a, RedisResult<Acked<Reply>>> {
        Box::pin(async move {
            if approach == Approach::Plain
                && !fenced
                && let Some(taken_or_busy) = self.plain_acquire(names, owner, lease_ms).await?
            {
                return Ok(taken_or_busy);
            }
            let pin = self
                .conn
                .pin(fenced && names.scheme.orders_tokens_by_epoch())
                .await?;
            let call = Call::acquire(
                self.publishing,
                names,
                owner,
                lease_ms,
                retention_ms,
                pin.and_then(|pin| pin.epoch),
                approach == Approach::Waiting,
                fenced,
            );
            self.write(call, pin).await
        })
    }

    fn token<'a>(
        &'a self,
        names: &'a LockNames,
        owner: &'a str,
        retention_ms: u64,
    ) -> BoxFuture<'a, RedisResult<Acked<Reply>>> {
        Box::pin(async move {
            let pin = self.conn.pin(names.scheme.orders_tokens_by_epoch()).await?;
            let call = Call::token(names, owner, retention_ms, pin.and_then(|pin| pin.epoch));
            self.write(call, pin).await
        })
    }

    fn release<'a>(
        &'a self,
        names: &'a LockNames,
        owner: &'a str,
        next: Option<HandOff<'a>>,
    ) -> BoxFuture<'a, RedisResult<Acked<Reply>>> {
        Box::pin(self.release_one(names, owner, next))
    }

    fn release_ending_turn<'a>(
        &'a self,
        names: &'a LockNames,
        owner: &'a str,
        yield_ms: u64,
        retention_ms: u64,
    ) -> BoxFuture<'a, RedisResult<Acked<Reply>>> {
        Box::pin(async move {
            let call =
                Call::release_ending_turn(self.publishing, names, owner, yield_ms, retention_ms);
            self.write(call, None).await
        })
    }

    fn release_many<'a>(
        &'a self,
        jobs: &'a [Release<'a>],
        limit: Duration,
    ) -> BoxFuture<'a, RedisResult<Vec<usize>>> {
        Box::pin(self.release_all(jobs, limit))
    }

    fn renew<'a>(
        &'a self,
        locks: &'a [(&'a str, &'a str)],
        lease_ms: u64,
        limit: Duration,
    ) -> BoxFuture<'a, RedisResult<Vec<Option<bool>>>> {
        Box::pin(self.renew_all(locks, lease_ms, limit))
    }

    fn force_unlock<'a>(
        &'a self,
        names: &'a LockNames,
        held_by: Option<&'a [String]>,
    ) -> BoxFuture<'a, RedisResult<Reply>> {
        Box::pin(self.read(Call::force_unlock(self.publishing, names, held_by)))
    }

    fn inspect<'a>(
        &'a self,
        names: &'a LockNames,
        max_holders: u32,
    ) -> BoxFuture<'a, RedisResult<LockState>> {
        let call = Call::inspect(self.publishing, names, max_holders);
        Box::pin(async move {
            send::<LockState>(&mut self.conn.clone(), &self.dialect, &call, None)
                .await
                .map(|(state, _)| state)
        })
    }

    fn scan_nodes(&self) -> BoxFuture<'_, RedisResult<Vec<ScanNode>>> {
        Box::pin(async move {
            #[cfg(feature = "cluster")]
            if let Conn::Cluster(cluster) = &self.conn {
                // Fresh: a scan that missed a master would miss its locks.
                self.slots.invalidate();
                return match self.slots.get(cluster).await {
                    Some(map) => Ok(map.one_slot_per_master().map(ScanNode::Slot).collect()),
                    None => Err(redis::RedisError::from((
                        redis::ErrorKind::Io,
                        "CLUSTER SLOTS failed: cannot list the masters to scan",
                    ))),
                };
            }
            Ok(vec![ScanNode::Only])
        })
    }

    fn scan<'a>(
        &'a self,
        node: ScanNode,
        cursor: u64,
        pattern: &'a str,
        count: u32,
    ) -> BoxFuture<'a, RedisResult<(u64, Vec<Vec<u8>>)>> {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(count);
        Box::pin(async move {
            let reply = match node {
                ScanNode::Only => cmd.query_async::<Value>(&mut self.conn.clone()).await?,
                #[cfg(feature = "cluster")]
                ScanNode::Slot(slot) => {
                    let Conn::Cluster(cluster) = &self.conn else {
                        return Err(redis::RedisError::from((
                            redis::ErrorKind::Client,
                            "a cluster scan on a connection that is not to a cluster",
                        )));
                    };
                    super::cluster::route_to_master(cluster, cmd, slot).await?
                }
                #[cfg(not(feature = "cluster"))]
                ScanNode::Slot(_) => {
                    return Err(redis::RedisError::from((
                        redis::ErrorKind::Client,
                        "a cluster scan without the `cluster` feature",
                    )));
                }
            };
            let (cursor, keys): (String, Vec<Vec<u8>>) = FromRedisValue::from_redis_value(reply)?;
            let cursor = cursor.parse().map_err(|_| {
                redis::RedisError::from((
                    redis::ErrorKind::Parse,
                    "SCAN returned a cursor that is not a number",
                    cursor,
                ))
            })?;
            Ok((cursor, keys))
        })
    }

    fn semaphore_capacity<'a>(
        &'a self,
        names: &'a LockNames,
        default_capacity: u32,
        op: CapacityOp,
    ) -> BoxFuture<'a, RedisResult<Acked<Reply>>> {
        let call = Call::semaphore_capacity(self.publishing, names, default_capacity, op);
        match op {
            CapacityOp::Set(_) | CapacityOp::Clear => Box::pin(self.write(call, None)),
            CapacityOp::Free | CapacityOp::Capacity => Box::pin(async move {
                Ok(Acked {
                    reply: self.read(call).await?,
                    shortfall: None,
                })
            }),
        }
    }

    fn fails_over(&self) -> bool {
        self.fails_over
    }

    fn script_command(&self) -> &'static str {
        if self.dialect.uses_functions() {
            "FCALL"
        } else {
            "EVALSHA"
        }
    }
}

/// The outcome of background releases of which `failed` (indexes) failed, out of `total`: an
/// error when every one failed (`first`, the first error, if known), else the failed ones, to
/// retry.
fn unless_all_failed(
    failed: Vec<usize>,
    total: usize,
    first: Option<redis::RedisError>,
) -> RedisResult<Vec<usize>> {
    if !failed.is_empty() && failed.len() == total {
        return Err(first.unwrap_or_else(|| timed_out("every background release failed")));
    }
    Ok(failed)
}

fn timed_out(what: &'static str) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, what))
}

/// Renews on one server (or the master behind Sentinel): one pipeline, `WAIT` at its end when
/// replicas must acknowledge. Per lock: renewed, gone, or (not acknowledged) unconfirmed.
///
/// Many keys go into one script call, unless the endpoint turned out to be a proxy in front of
/// a cluster that rejects calls spanning slots (CROSSSLOT): then, from that round on, one call
/// per slot (`per_slot`), still in one pipeline.
async fn renew_pipelined(
    conn: &mut Conn,
    dialect: &Dialect,
    pairs: &[(&str, &str)],
    lease_ms: u64,
    ack: Option<ReplicaAck>,
    per_slot: &AtomicBool,
    chunk: usize,
) -> RedisResult<Vec<Option<bool>>> {
    loop {
        let grouped = per_slot.load(Ordering::Relaxed);
        match renew_grouped(conn, dialect, pairs, lease_ms, ack, grouped, chunk).await {
            Err(e) if !grouped && script::is_cross_slot(&e) => {
                tracing::warn!(
                    error = %e,
                    "renewal rejected as cross-slot: a proxy in front of a cluster; renewing one slot per call from now on"
                );
                per_slot.store(true, Ordering::Relaxed);
            }
            other => return other,
        }
    }
}

/// Splits keys into renew script calls (indexes into `keys`): at most `chunk` per call, and
/// each call within one slot if `per_slot`.
pub(crate) fn renew_groups<'a>(
    keys: impl Iterator<Item = &'a str>,
    per_slot: bool,
    chunk: usize,
) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    if per_slot {
        let mut by_slot: HashMap<u16, Vec<usize>> = HashMap::new();
        for (i, key) in keys.enumerate() {
            by_slot.entry(super::slots::slot(key)).or_default().push(i);
        }
        for group in by_slot.into_values() {
            groups.extend(group.chunks(chunk.max(1)).map(<[usize]>::to_vec));
        }
    } else {
        let all: Vec<usize> = keys.enumerate().map(|(i, _)| i).collect();
        groups.extend(all.chunks(chunk.max(1)).map(<[usize]>::to_vec));
    }
    groups
}

/// One renewal pipeline: `pairs` in calls of up to `chunk` keys, each call within one slot if
/// `per_slot`. Results come back in the order of `pairs`.
async fn renew_grouped(
    conn: &mut Conn,
    dialect: &Dialect,
    pairs: &[(&str, &str)],
    lease_ms: u64,
    ack: Option<ReplicaAck>,
    per_slot: bool,
    chunk: usize,
) -> RedisResult<Vec<Option<bool>>> {
    let groups = renew_groups(pairs.iter().map(|(key, _)| *key), per_slot, chunk);
    let calls: Vec<Call> = groups
        .iter()
        .map(|group| Call::renew(group.iter().map(|&i| pairs[i]), lease_ms))
        .collect();
    let mut values = query_reloading(conn, dialect, &calls, ack).await?;
    let acknowledged = match ack {
        Some(ack) => {
            let acked = values.pop().map_or(0, |v| ReplicaAck::acknowledged(&v));
            if acked < ack.replicas {
                tracing::warn!(
                    acked,
                    required = ack.replicas,
                    "renewal not acknowledged by enough replicas"
                );
            }
            acked >= ack.replicas
        }
        None => true,
    };
    let mut results = vec![None; pairs.len()];
    for (group, value) in groups.iter().zip(values) {
        let renewed: Vec<i64> = FromRedisValue::from_redis_value(value)?;
        if renewed.len() != group.len() {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Parse,
                "renew script returned the wrong number of results",
            )));
        }
        for (&i, r) in group.iter().zip(renewed) {
            results[i] = replica_ack::renewal(r == 1, acknowledged);
        }
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::renew_groups;

    #[test]
    fn renew_groups_chunk_and_keep_each_call_in_one_slot() {
        let keys: Vec<String> = (0..1200)
            .map(|i| format!("lock:{{k{}}}", i % 700))
            .collect();
        let flat = renew_groups(keys.iter().map(String::as_str), false, 500);
        assert_eq!(
            flat.iter().map(Vec::len).collect::<Vec<_>>(),
            [500, 500, 200]
        );
        let per_slot = renew_groups(keys.iter().map(String::as_str), true, 500);
        let mut seen: Vec<usize> = per_slot.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(
            seen,
            (0..1200).collect::<Vec<_>>(),
            "every key exactly once"
        );
        for group in &per_slot {
            let slot = super::super::slots::slot(&keys[group[0]]);
            assert!(
                group
                    .iter()
                    .all(|&i| super::super::slots::slot(&keys[i]) == slot)
            );
            assert!(group.len() <= 500);
        }
    }
}
