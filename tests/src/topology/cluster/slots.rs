//! Keys to hash slots, and slots to the masters that serve them.

use super::*;

/// The number of hash slots of a Redis Cluster.
pub const CLUSTER_SLOTS: u16 = 16384;

/// The hash slot of `key`, as Redis Cluster computes it: CRC16 (XMODEM) of the key, or of its
/// hash tag (the text between the first `{` and the next `}`, when not empty), modulo 16384.
pub fn key_slot(key: &str) -> u16 {
    let key = key.as_bytes();
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let len = rest.iter().position(|&b| b == b'}')?;
            (len > 0).then(|| &rest[..len])
        })
        .unwrap_or(key);
    crc16_xmodem(hashed) % CLUSTER_SLOTS
}

pub(super) fn crc16_xmodem(data: &[u8]) -> u16 {
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

/// One range of `CLUSTER SLOTS`: first slot, last slot, port of the master serving it.
pub(super) type SlotRange = (u16, u16, u16);

impl RedisCluster {
    /// The slot map (first slot, last slot, master port), as a running node sees it.
    pub(super) fn slot_map(&self) -> Vec<SlotRange> {
        let asked = self.any_running();
        cluster_slots(&self.nodes[asked])
            .unwrap_or_else(|e| panic!("CLUSTER SLOTS on node {asked} failed: {e}"))
    }

    /// The index of the master serving `slot`, as a running node sees it.
    ///
    /// # Panics
    /// If no node serves the slot, or the slot map names an unknown port.
    pub fn master_index_for_slot(&self, slot: u16) -> usize {
        let map = self.slot_map();
        let port = map
            .iter()
            .find(|&&(start, end, _)| (start..=end).contains(&slot))
            .map(|&(_, _, port)| port)
            .unwrap_or_else(|| panic!("no master serves slot {slot}: {map:?}"));
        self.index_of_port(port)
            .unwrap_or_else(|| panic!("slot {slot} is served by unknown port {port}"))
    }

    /// The index of the master serving `key`'s slot ([`key_slot`]).
    pub fn master_index_for_key(&self, key: &str) -> usize {
        self.master_index_for_slot(key_slot(key))
    }

    /// The master serving `key`'s slot ([`key_slot`]).
    pub fn master_for_key(&self, key: &str) -> &RedisServer {
        &self.nodes[self.master_index_for_key(key)]
    }

    /// All keys matching `pattern` on the current masters (by `SCAN`).
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        self.masters()
            .into_iter()
            .flat_map(|m| m.keys(pattern))
            .collect()
    }
}
