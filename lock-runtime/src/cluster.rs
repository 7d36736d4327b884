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
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{FromRedisValue, Value};

use crate::LockError;
use crate::backend::{Conn, GroupDone, Settings};
use crate::demux::Demux;
use crate::script;

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

pub(crate) use crate::slot::slot;

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

/// The masters' slot ranges, from `CLUSTER SLOTS`.
#[derive(Debug, Default)]
struct SlotMap {
    /// `(first slot, last slot, host, port)`, sorted by first slot.
    ranges: Vec<(u16, u16, String, u16)>,
}

impl SlotMap {
    fn node(&self, slot: u16) -> Option<(&str, u16)> {
        let i = self.ranges.partition_point(|r| r.1 < slot);
        self.ranges
            .get(i)
            .filter(|r| r.0 <= slot)
            .map(|r| (r.2.as_str(), r.3))
    }

    fn parse(reply: Value) -> Result<SlotMap, redis::ParsingError> {
        let entries: Vec<Vec<Value>> = FromRedisValue::from_redis_value(reply)?;
        let mut ranges = Vec::with_capacity(entries.len());
        for entry in entries {
            let mut fields = entry.into_iter();
            let (Some(start), Some(end), Some(master)) =
                (fields.next(), fields.next(), fields.next())
            else {
                return Err("short CLUSTER SLOTS entry".into());
            };
            let start: u16 = FromRedisValue::from_redis_value(start)?;
            let end: u16 = FromRedisValue::from_redis_value(end)?;
            let master: Vec<Value> = FromRedisValue::from_redis_value(master)?;
            let mut master = master.into_iter();
            let (Some(host), Some(port)) = (master.next(), master.next()) else {
                return Err("short CLUSTER SLOTS node".into());
            };
            // Empty or NULL on some deployments: the key only groups slots by node here; the
            // request is routed by slot, so redis resolves the address itself.
            let host: String = match host {
                Value::Nil => String::new(),
                host => FromRedisValue::from_redis_value(host)?,
            };
            let port: u16 = FromRedisValue::from_redis_value(port)?;
            ranges.push((start, end, host, port));
        }
        ranges.sort_by_key(|r| r.0);
        Ok(SlotMap { ranges })
    }
}

/// The watchdog's cached slot map. Marked stale whenever a node's batch fails, then refreshed;
/// the last good map is kept if the refresh fails (a frozen node may be the one asked).
#[derive(Debug, Default)]
pub(crate) struct SlotCache {
    map: Mutex<(Option<Arc<SlotMap>>, bool)>,
}

impl SlotCache {
    async fn get(&self, conn: &ClusterConnection) -> Option<Arc<SlotMap>> {
        let (cached, stale) = self.lock().clone();
        if let Some(map) = &cached
            && !stale
        {
            return Some(map.clone());
        }
        let reply = conn
            .clone()
            .route_command(
                redis::cmd("CLUSTER").arg("SLOTS").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            )
            .await;
        match reply.map(SlotMap::parse) {
            Ok(Ok(map)) => {
                let map = Arc::new(map);
                *self.lock() = (Some(map.clone()), false);
                Some(map)
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "unexpected CLUSTER SLOTS reply");
                cached
            }
            Err(e) => {
                tracing::debug!(error = %e, "CLUSTER SLOTS failed");
                cached
            }
        }
    }

    pub(crate) fn invalidate(&self) {
        self.lock().1 = true;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Option<Arc<SlotMap>>, bool)> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One renew script call: the batch indices it covers.
type Call = Vec<usize>;

/// Renews `batch` (`(key, owner)` pairs): one pipeline per node, then slot by slot for what
/// failed. Returns per entry `Some(true)` (renewed), `Some(false)` (no longer ours) or `None`
/// (not confirmed: retry soon). With `ack`, a node's renewals count only if `WAIT` confirms
/// enough replicas. Returns within about `limit`: a node batch that takes longer than half of it
/// counts as failed, and its slots are retried one by one (after the slot map is refreshed) in
/// the time left.
pub(crate) async fn renew(
    conn: &ClusterConnection,
    cache: &SlotCache,
    batch: &[(&str, &str)],
    lease_ms: u64,
    ack: Option<crate::ack::ReplicaAck>,
    chunk: usize,
    limit: std::time::Duration,
) -> Vec<Option<bool>> {
    // Every step is bounded, so what did succeed is always reported in time: a node that hangs
    // must not cost the locks on the other nodes their renewal.
    let start = tokio::time::Instant::now();
    let node_timeout = limit / 2;
    let mut results = vec![None; batch.len()];
    let mut by_slot: HashMap<u16, Vec<usize>> = HashMap::new();
    for (i, (key, _)) in batch.iter().enumerate() {
        by_slot.entry(slot(key)).or_default().push(i);
    }

    let mut by_node: HashMap<(String, u16), Vec<u16>> = HashMap::new();
    let mut leftover: Vec<u16> = Vec::new();
    let map = match tokio::time::timeout(limit / 4, cache.get(conn)).await {
        Ok(map) => map,
        Err(_) => cache.lock().0.clone(),
    };
    match map {
        Some(map) => {
            for &s in by_slot.keys() {
                match map.node(s) {
                    Some((host, port)) => {
                        by_node.entry((host.to_owned(), port)).or_default().push(s)
                    }
                    None => leftover.push(s),
                }
            }
        }
        None => leftover.extend(by_slot.keys().copied()),
    }

    let node_batches = by_node.into_values().map(|slots| {
        let mut calls: Vec<Call> = Vec::new();
        for s in &slots {
            calls.extend(by_slot[s].chunks(chunk.max(1)).map(<[usize]>::to_vec));
        }
        // Routed by one of its slots, not by our copy of the address: redis resolves it.
        let route = SingleNodeRoutingInfo::SpecificNode(redis::cluster_routing::Route::new(
            slots[0],
            redis::cluster_routing::SlotAddr::Master,
        ));
        let conn = conn.clone();
        async move {
            // A node that hangs (black-holed, frozen) must leave time for the fallback.
            let outcome = tokio::time::timeout(
                node_timeout,
                send(conn, route, batch, &calls, lease_ms, ack),
            )
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
            Ok(replies) => apply(&mut results, &calls, replies),
            Err(e) => {
                no_script |= script::is_no_script(&e);
                tracing::debug!(error = %e, slots = slots.len(), "node renewal batch failed; retrying slot by slot");
                failed_slots.extend(slots);
            }
        }
    }
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

    // Lock by lock through the key-routed path, which follows MOVED/ASK (one key per call: a
    // multi-key call gets TRYAGAIN while its slot migrates, and ASKING covers one command).
    // Each bounded on its own, so a hanging node costs only its own locks.
    leftover.extend(failed_slots);
    let remaining = (start + limit).saturating_duration_since(tokio::time::Instant::now());
    let per_lock = leftover.iter().flat_map(|s| by_slot[s].iter()).map(|&i| {
        let route = SingleNodeRoutingInfo::SpecificNode(redis::cluster_routing::Route::with_key(
            batch[i].0,
            redis::cluster_routing::SlotAddr::Master,
        ));
        let conn = conn.clone();
        async move {
            let calls = vec![vec![i]];
            let outcome =
                tokio::time::timeout(remaining, send(conn, route, batch, &calls, lease_ms, ack))
                    .await;
            (calls, outcome)
        }
    });
    for (calls, outcome) in join_all(per_lock).await {
        match outcome {
            Ok(Ok(replies)) => apply(&mut results, &calls, replies),
            Ok(Err(e)) => tracing::debug!(error = %e, "lock renewal failed"),
            Err(_) => tracing::debug!("lock renewal timed out"),
        }
    }
    results
}

/// Sends the renew calls (plus `WAIT`) as one pipeline along `route`; returns one reply per
/// call and whether replicas acknowledged them, or an error when anything in it failed.
async fn send(
    mut conn: ClusterConnection,
    route: SingleNodeRoutingInfo,
    batch: &[(&str, &str)],
    calls: &[Call],
    lease_ms: u64,
    ack: Option<crate::ack::ReplicaAck>,
) -> redis::RedisResult<Replies> {
    let mut pipe = redis::pipe();
    for call in calls {
        let cmd = pipe
            .cmd("EVALSHA")
            .arg(script::RENEW.get_hash())
            .arg(call.len());
        for &i in call {
            cmd.arg(batch[i].0);
        }
        cmd.arg(lease_ms);
        for &i in call {
            cmd.arg(batch[i].1);
        }
    }
    if let Some(ack) = ack {
        ack.append_wait(&mut pipe);
    }
    let count = pipe.cmd_iter().count();
    let mut values = conn.route_pipeline(pipe, 0, count, route).await?;
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

/// Records replies: "gone" needs no acknowledgement; "renewed" counts only once replicas have it.
fn apply(results: &mut [Option<bool>], calls: &[Call], (replies, acknowledged): Replies) {
    for (call, reply) in calls.iter().zip(replies) {
        for (&i, renewed) in call.iter().zip(reply) {
            results[i] = if renewed == 1 {
                acknowledged.then_some(true)
            } else {
                Some(false)
            };
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

/// Releases each job by itself (a pipeline may not span slots), all at once, each bounded by
/// `limit` so a hanging node delays the round by no more than that. Returns the indices of the
/// jobs that failed.
pub(crate) async fn release_each(
    conn: &ClusterConnection,
    release: &redis::Script,
    jobs: &[(&str, &str, &str)],
    limit: std::time::Duration,
) -> Vec<usize> {
    let calls = jobs.iter().enumerate().map(|(i, (key, channel, owner))| {
        let mut conn = conn.clone();
        async move {
            let mut invocation = release.key(*key);
            invocation.key(*channel).arg(*owner);
            let call = invocation.invoke_async::<script::Reply>(&mut conn);
            let result = tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_map_finds_the_range() {
        let map = SlotMap {
            ranges: vec![
                (0, 5460, "a".into(), 1),
                (5461, 10922, "b".into(), 2),
                (10923, 16383, "c".into(), 3),
            ],
        };
        assert_eq!(map.node(0), Some(("a", 1)));
        assert_eq!(map.node(5461), Some(("b", 2)));
        assert_eq!(map.node(16383), Some(("c", 3)));
        let gap = SlotMap {
            ranges: vec![(10, 20, "a".into(), 1)],
        };
        assert_eq!(gap.node(5), None);
        assert_eq!(gap.node(21), None);
    }
}
