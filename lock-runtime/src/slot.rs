//! Redis Cluster hash slots: where a key lives, by Redis' own rule. Used to batch renewals per
//! slot on a cluster, and behind a proxy that fronts one (CROSSSLOT fallback).

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
}
