//! Redis Cluster: connecting, sharded subscriptions, and watchdog renewals batched per node.
//!
//! All keys of one lock (hash, fencing counter, unlock channel) share the lock's hash tag, so a
//! lock lives in exactly one slot and every script runs on one node. Unlock messages go out with
//! `SPUBLISH` on the lock's shard channel and waiters `SSUBSCRIBE` to it on that shard (Redis 7),
//! so a release costs one node one message instead of a broadcast to the whole cluster.
//!
//! The redis cluster connection routes each command by its key and follows `MOVED`/`ASK`,
//! refreshes its slot map on topology changes and resubscribes shard channels after a
//! failover or a slot migration. What it cannot do for us is batch: a pipeline must stay in one
//! slot. So the watchdog groups its renewals here: one renew script call per slot (covering
//! every held lock in that slot), one pipeline per *node* carrying all of its slots, all nodes
//! in flight at once. The slot→node map comes from `CLUSTER SLOTS`, cached and refreshed
//! whenever a node's batch fails; slots of a failed batch are retried at once one by one
//! through the key-routed path, which follows redirects, so resharding and failover cost a
//! retry, not a lost lock.

use std::collections::HashMap;

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::SingleNodeRoutingInfo;
use redis::{FromRedisValue, Value};

use super::replica_ack::{self, ReplicaAck};
use super::slots::{SlotCache, SlotMap, slot};
use super::{Conn, Settings};
use crate::LockError;
use crate::backend::GroupDone;
use crate::backend::Reply;
use crate::demux::Demux;
use crate::script::{self, Call, Dialect};

/// Connects the command connection (RESP2) and the pub/sub connection (RESP3, pushes to the
/// demux) to a cluster through its seed nodes.
pub(crate) async fn connect(
    nodes: &[String],
    settings: &Settings,
    demux: &Demux,
) -> Result<(Conn, Conn), LockError> {
    if nodes.is_empty() {
        return Err(LockError::InvalidConfig(
            "a cluster needs at least one seed node URL".into(),
        ));
    }
    let builder = |pubsub: bool| {
        let builder = ClusterClientBuilder::new(nodes.iter().map(String::as_str))
            .connection_timeout(settings.connect_timeout)
            .response_timeout(settings.response_timeout)
            // Bound the client's own retries (MOVED, reconnects) by one response timeout;
            // a failover longer than that is ridden out by the lock's retry loop.
            .overall_response_timeout(Some(settings.response_timeout));
        #[cfg(feature = "tls")]
        let builder = match &settings.tls_root_certificate {
            Some(pem) => builder.certs(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.clone()),
            }),
            None => builder,
        };
        let builder = if pubsub {
            builder
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(demux.router())
        } else {
            builder
        };
        builder
            .build()
            .map_err(|e| LockError::InvalidConfig(format!("bad cluster settings: {e}")))
    };
    let commands = builder(false)?;
    let pubsub = builder(true)?;
    let (commands, pubsub) = settings
        .within_connect_timeout(async {
            tokio::try_join!(
                commands.get_async_connection(),
                pubsub.get_async_connection()
            )
        })
        .await?;
    Ok((Conn::Cluster(commands), Conn::Cluster(pubsub)))
}

/// `SSUBSCRIBE`/`SUNSUBSCRIBE`, one command per slot (a command may not span slots), all
/// slots at once; each slot's channels are reported to `done` as soon as that slot is settled.
pub(crate) async fn ssubscribe(
    conn: &ClusterConnection,
    channels: &[String],
    subscribe: bool,
    done: GroupDone<'_>,
) {
    let mut by_slot: HashMap<u16, Vec<String>> = HashMap::new();
    for channel in channels {
        by_slot
            .entry(slot(channel))
            .or_default()
            .push(channel.clone());
    }
    let mut calls: FuturesUnordered<_> = by_slot
        .into_values()
        .map(|group| {
            let mut conn = conn.clone();
            async move {
                let result = if subscribe {
                    conn.ssubscribe(&group).await
                } else {
                    conn.sunsubscribe(&group).await
                };
                (group, result)
            }
        })
        .collect();
    while let Some((group, result)) = calls.next().await {
        done(&group, result);
    }
}

/// One renew script call: the batch indices it covers.
type Batch = Vec<usize>;

/// What one renewal round sends: the locks, the lease and the acknowledgement it needs.
#[derive(Clone, Copy)]
struct Round<'a> {
    conn: &'a ClusterConnection,
    batch: &'a [(&'a str, &'a str)],
    lease_ms: u64,
    ack: Option<ReplicaAck>,
}

/// Renews `batch` (`(key, owner)` pairs): one pipeline per node, then lock by lock for what
/// failed. Returns per entry `Some(true)` (renewed), `Some(false)` (no longer ours) or `None`
/// (not confirmed: retry soon). With `ack`, a node's renewals count only if `WAIT` confirms
/// enough replicas. Returns within about `limit`: a node batch that takes longer than half of it
/// counts as failed, and its locks are retried one by one (after the slot map is refreshed) in
/// the time left.
pub(crate) async fn renew(
    conn: &ClusterConnection,
    cache: &SlotCache,
    batch: &[(&str, &str)],
    lease_ms: u64,
    ack: Option<ReplicaAck>,
    chunk: usize,
    limit: std::time::Duration,
) -> Vec<Option<bool>> {
    // Every step is bounded, so what did succeed is always reported in time: a node that hangs
    // must not cost the locks on the other nodes their renewal.
    let start = tokio::time::Instant::now();
    let round = Round {
        conn,
        batch,
        lease_ms,
        ack,
    };
    let mut results = vec![None; batch.len()];
    let mut by_slot: HashMap<u16, Vec<usize>> = HashMap::new();
    for (i, (key, _)) in batch.iter().enumerate() {
        by_slot.entry(slot(key)).or_default().push(i);
    }
    let map = match tokio::time::timeout(limit / 4, cache.get(conn)).await {
        Ok(map) => map,
        Err(_) => cache.cached(),
    };
    let (by_node, mut leftover) = group_by_node(map.as_deref(), by_slot.keys().copied());
    let (failed_slots, no_script) =
        renew_per_node(round, &by_slot, by_node, chunk, limit / 2, &mut results).await;
    if !failed_slots.is_empty() {
        cache.invalidate();
    }
    if no_script {
        // After SCRIPT FLUSH or a failover to a replica that never saw the script. Bounded: a
        // hanging master must not hold up the others' renewals.
        let remaining = (start + limit).saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(remaining / 2, load_everywhere(conn)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "loading the renew script failed"),
            Err(_) => tracing::debug!("loading the renew script timed out"),
        }
    }
    leftover.extend(failed_slots);
    let remaining = (start + limit).saturating_duration_since(tokio::time::Instant::now());
    let locks = leftover.iter().flat_map(|s| by_slot[s].iter().copied());
    renew_per_lock(round, locks, remaining, &mut results).await;
    results
}

/// Groups slots by the node that serves them (by `map`); slots with no known node are left over.
fn group_by_node(
    map: Option<&SlotMap>,
    slots: impl Iterator<Item = u16>,
) -> (Vec<Vec<u16>>, Vec<u16>) {
    let mut by_node: HashMap<(&str, u16), Vec<u16>> = HashMap::new();
    let mut leftover = Vec::new();
    for s in slots {
        match map.and_then(|map| map.node(s)) {
            Some(node) => by_node.entry(node).or_default().push(s),
            None => leftover.push(s),
        }
    }
    (by_node.into_values().collect(), leftover)
}

/// One pipeline per node (one script call per slot, up to `chunk` keys), all nodes at once,
/// each bounded by `node_timeout`. Records what was confirmed; returns the slots of the nodes
/// that failed, and whether one had lost the script.
async fn renew_per_node(
    round: Round<'_>,
    by_slot: &HashMap<u16, Vec<usize>>,
    by_node: Vec<Vec<u16>>,
    chunk: usize,
    node_timeout: std::time::Duration,
    results: &mut [Option<bool>],
) -> (Vec<u16>, bool) {
    let node_batches = by_node.into_iter().map(|slots| {
        let mut calls: Vec<Batch> = Vec::new();
        for s in &slots {
            calls.extend(by_slot[s].chunks(chunk.max(1)).map(<[usize]>::to_vec));
        }
        // Routed by one of its slots, not by our copy of the address: redis resolves it.
        let route = SingleNodeRoutingInfo::SpecificNode(redis::cluster_routing::Route::new(
            slots[0],
            redis::cluster_routing::SlotAddr::Master,
        ));
        async move {
            // A node that hangs (black-holed, frozen) must leave time for the fallback.
            let outcome = tokio::time::timeout(node_timeout, send(round, route, &calls))
                .await
                .unwrap_or_else(|_| {
                    Err(redis::RedisError::from((
                        redis::ErrorKind::Io,
                        "node renewal batch timed out",
                    )))
                });
            (slots, calls, outcome)
        }
    });
    let mut failed_slots = Vec::new();
    let mut no_script = false;
    for (slots, calls, outcome) in join_all(node_batches).await {
        match outcome {
            Ok(replies) => apply(results, &calls, replies),
            Err(e) => {
                no_script |= script::is_no_script(&e);
                tracing::debug!(error = %e, slots = slots.len(), "node renewal batch failed; retrying lock by lock");
                failed_slots.extend(slots);
            }
        }
    }
    (failed_slots, no_script)
}

/// Lock by lock through the key-routed path, which follows MOVED/ASK (one key per call: a
/// multi-key call gets TRYAGAIN while its slot migrates, and ASKING covers one command). Each
/// bounded by `remaining` on its own, so a hanging node costs only its own locks.
async fn renew_per_lock(
    round: Round<'_>,
    locks: impl Iterator<Item = usize>,
    remaining: std::time::Duration,
    results: &mut [Option<bool>],
) {
    let per_lock = locks.map(|i| {
        let route = SingleNodeRoutingInfo::SpecificNode(redis::cluster_routing::Route::with_key(
            round.batch[i].0,
            redis::cluster_routing::SlotAddr::Master,
        ));
        async move {
            let calls = vec![vec![i]];
            let outcome = tokio::time::timeout(remaining, send(round, route, &calls)).await;
            (calls, outcome)
        }
    });
    for (calls, outcome) in join_all(per_lock).await {
        match outcome {
            Ok(Ok(replies)) => apply(results, &calls, replies),
            Ok(Err(e)) => tracing::debug!(error = %e, "lock renewal failed"),
            Err(_) => tracing::debug!("lock renewal timed out"),
        }
    }
}

/// Sends the renew calls (plus `WAIT`) as one pipeline along `route`; returns one reply per
/// call and whether replicas acknowledged them, or an error when anything in it failed.
async fn send(
    round: Round<'_>,
    route: SingleNodeRoutingInfo,
    calls: &[Batch],
) -> redis::RedisResult<Replies> {
    let Round {
        conn,
        batch,
        lease_ms,
        ack,
    } = round;
    let mut pipe = redis::pipe();
    for call in calls {
        let call = Call::renew(call.iter().map(|&i| batch[i]), lease_ms);
        pipe.add_command(call.evalsha().into_owned());
    }
    if let Some(ack) = ack {
        ack.append_wait(&mut pipe);
    }
    let count = pipe.cmd_iter().count();
    let mut values = conn.clone().route_pipeline(pipe, 0, count, route).await?;
    let acknowledged = match ack {
        Some(ack) => {
            let acked = values.pop().unwrap_or(Value::Nil);
            ack.check(acked)
                .inspect_err(|e| tracing::warn!(error = %e, "renewals not acknowledged"))
                .is_ok()
        }
        None => true,
    };
    let replies = values
        .into_iter()
        .map(|v| match v {
            Value::ServerError(e) => Err(e.into()),
            v => Vec::<i64>::from_redis_value(v).map_err(redis::RedisError::from),
        })
        .collect::<redis::RedisResult<_>>()?;
    Ok((replies, acknowledged))
}

/// Records replies (see [`replica_ack::renewal`]).
fn apply(results: &mut [Option<bool>], calls: &[Batch], (replies, acknowledged): Replies) {
    for (call, reply) in calls.iter().zip(replies) {
        for (&i, renewed) in call.iter().zip(reply) {
            results[i] = replica_ack::renewal(renewed == 1, acknowledged);
        }
    }
}

/// One reply list per call, and whether `WAIT` confirmed them.
type Replies = (Vec<Vec<i64>>, bool);

/// Loads the renew script on every master.
async fn load_everywhere(conn: &ClusterConnection) -> redis::RedisResult<()> {
    script::RENEW
        .prepare_invoke()
        .load_async(&mut conn.clone())
        .await
        .map(|_| ())
}

/// Sends `cmd` to the master that serves `slot` (a per-master command such as `SCAN`).
pub(crate) async fn route_to_master(
    conn: &ClusterConnection,
    cmd: redis::Cmd,
    slot: u16,
) -> redis::RedisResult<Value> {
    let route = SingleNodeRoutingInfo::SpecificNode(redis::cluster_routing::Route::new(
        slot,
        redis::cluster_routing::SlotAddr::Master,
    ));
    conn.clone()
        .route_command(cmd, redis::cluster_routing::RoutingInfo::SingleNode(route))
        .await
}

/// Runs each release call by itself (a pipeline may not span slots), all at once, each bounded
/// by `limit` so a hanging node delays the round by no more than that. Returns the indices of
/// the calls that failed.
pub(crate) async fn release_each(
    conn: &ClusterConnection,
    calls: &[Call],
    limit: std::time::Duration,
) -> Vec<usize> {
    let scripts = Dialect::scripts();
    let calls = calls.iter().enumerate().map(|(i, call)| {
        let mut conn = conn.clone();
        let scripts = &scripts;
        async move {
            let send = super::call::send::<Reply>(&mut conn, scripts, call, None);
            let result = tokio::time::timeout(limit, send).await.unwrap_or_else(|_| {
                Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "background release timed out",
                )))
            });
            (i, result)
        }
    });
    join_all(calls)
        .await
        .into_iter()
        .filter_map(|(i, r)| {
            r.inspect_err(|e| tracing::debug!(error = %e, "background release failed"))
                .err()
                .map(|_| i)
        })
        .collect()
}
