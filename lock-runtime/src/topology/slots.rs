//! Redis Cluster hash slots: where a key lives, by Redis' own rule, and (on a cluster) which
//! node serves each slot. Used to batch renewals per node and per slot on a cluster, and per
//! slot behind a proxy that fronts one (CROSSSLOT fallback).

#[cfg(feature = "cluster")]
use std::sync::{Arc, Mutex};

#[cfg(feature = "cluster")]
use crate::sync;
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;
#[cfg(feature = "cluster")]
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
#[cfg(feature = "cluster")]
use redis::{FromRedisValue, Value};

/// Number of hash slots in a Redis Cluster.
pub(crate) const SLOTS: u16 = 16384;

/// The hash slot of a key, as Redis computes it (CRC16/XMODEM of the hash tag, if any).
pub(crate) fn slot(key: &str) -> u16 {
    let k = key.as_bytes();
    let hashed = match k.iter().position(|&b| b == b'{') {
        Some(open) => match k[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &k[open + 1..open + 1 + len],
            _ => k,
        },
        None => k,
    };
    crc16(hashed) % SLOTS
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The masters' slot ranges, from `CLUSTER SLOTS`.
#[cfg(feature = "cluster")]
#[derive(Debug, Default)]
pub(crate) struct SlotMap {
    /// `(first slot, last slot, host, port)`, sorted by first slot.
    ranges: Vec<(u16, u16, String, u16)>,
}

#[cfg(feature = "cluster")]
impl SlotMap {
    pub(crate) fn node(&self, slot: u16) -> Option<(&str, u16)> {
        let i = self.ranges.partition_point(|r| r.1 < slot);
        self.ranges
            .get(i)
            .filter(|r| r.0 <= slot)
            .map(|r| (r.2.as_str(), r.3))
    }

    /// The first slot of each master (of its first range), to reach every master once by
    /// routing on a slot it serves.
    pub(crate) fn one_slot_per_master(&self) -> impl Iterator<Item = u16> + '_ {
        let mut seen = std::collections::HashSet::new();
        self.ranges
            .iter()
            .filter(move |r| seen.insert((r.2.as_str(), r.3)))
            .map(|r| r.0)
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
#[cfg(feature = "cluster")]
#[derive(Debug, Default)]
pub(crate) struct SlotCache {
    map: Mutex<(Option<Arc<SlotMap>>, bool)>,
}

#[cfg(feature = "cluster")]
impl SlotCache {
    pub(crate) async fn get(&self, conn: &ClusterConnection) -> Option<Arc<SlotMap>> {
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

    /// The last map fetched, stale or not.
    pub(crate) fn cached(&self) -> Option<Arc<SlotMap>> {
        self.lock().0.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Option<Arc<SlotMap>>, bool)> {
        sync::lock(&self.map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("123456789"), 0x31C3 % SLOTS);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("lock:{a}"), slot("a"));
        // Empty tag: the whole key is hashed.
        assert_eq!(slot("{}x"), crc16(b"{}x") % SLOTS);
    }

    #[cfg(feature = "cluster")]
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
        let split = SlotMap {
            ranges: vec![
                (0, 10, "a".into(), 1),
                (11, 20, "b".into(), 2),
                (21, 30, "a".into(), 1),
            ],
        };
        assert_eq!(split.one_slot_per_master().collect::<Vec<_>>(), [0, 11]);
        let gap = SlotMap {
            ranges: vec![(10, 20, "a".into(), 1)],
        };
        assert_eq!(gap.node(5), None);
        assert_eq!(gap.node(21), None);
    }
}
