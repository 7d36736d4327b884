//! The chaos workload's records, the fenced store it writes to, and the checker.
//!
//! Every critical section records `(key, fencing token, owner, start, end)` on the shared
//! monotonic clock ([`crate::mono_ns`]) and does a non-atomic read-modify-write of a counter in
//! a *separate* store (another Redis, never faulted) that honours fencing: a read or write with
//! a token older than the newest one seen for that key is rejected. Commits are appended, with
//! their token, to a log in the store, atomically with the write.
//!
//! The checker proves, from the records and the store:
//! - no two critical sections on one key overlapped unless one of them had been told its lock
//!   was lost (or the overlap falls in a window where the lock state itself was wiped);
//! - tokens follow holding order, per key, from the records themselves (not only from what the
//!   store accepted, which enforces that order and would only show a late token as a refused
//!   section): no token is lower than the token of a section that had ended before it was
//!   asked for (judged everywhere: tokens increase across restarts), and a holder not told of
//!   a loss has a larger token than every section that ended before its own began (not judged
//!   where the lock state was wiped, like exclusion);
//! - tokens are unique per acquisition;
//! - the tokens of committed writes strictly increase per key (the store's commit log);
//! - the counter equals the number of commits (no lost update got through).
//!
//! The store is that Redis (the compare-and-set below), or SQLite or PostgreSQL fenced through
//! `lock-fence` ([`sql`]); the failover suites give each lock name one of the three.
//!
//! Here: the records and the store. `check.rs`: the checker ([`check`]); `report.rs`: what a run
//! with failovers showed per fault ([`failover_report`]); `sides.rs`: which master each grant
//! came from ([`sides`]); [`family_store`]: the lock family's fenced store.

use std::collections::HashMap;
use std::fmt;
use std::sync::LazyLock;

mod check;
pub mod family_store;
mod report;
mod sides;
pub mod sql;
#[cfg(test)]
mod tests;

pub use check::{Report, check, check_with};
pub use report::{FailoverReport, failover_report};
pub use sides::{Sides, master_at, read_masters, sides};

/// How a critical section ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The fenced write was accepted.
    Committed,
    /// The store rejected the read: a newer token had been seen.
    RejectedRead,
    /// The store rejected the write: a newer token had been seen.
    RejectedWrite,
    /// The body was cancelled (dropped) part-way.
    Cancelled,
    /// A store or lock error ended the body.
    Failed,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Committed => "committed",
            Outcome::RejectedRead => "rejected-read",
            Outcome::RejectedWrite => "rejected-write",
            Outcome::Cancelled => "cancelled",
            Outcome::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Option<Outcome> {
        Some(match s {
            "committed" => Outcome::Committed,
            "rejected-read" => Outcome::RejectedRead,
            "rejected-write" => Outcome::RejectedWrite,
            "cancelled" => Outcome::Cancelled,
            "failed" => Outcome::Failed,
            _ => return None,
        })
    }
}

/// One critical section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The lock name.
    pub key: String,
    /// The guard's fencing token.
    pub token: u64,
    /// The guard's owner id.
    pub owner: String,
    /// When the guard was obtained ([`crate::mono_ns`]).
    pub start_ns: u64,
    /// When the token was asked for: for a token that came with the grant, when the request
    /// that granted the lock was *sent* (`LockGuard::granted_at`; Redis issued the token between
    /// this and `start_ns`); for one asked for in the section, the section's start. Token order
    /// is judged from here: a token is late if it is not above the token of a section that had
    /// ended before it was asked for.
    pub asked_ns: u64,
    /// When the acquire was called (before any wait): `asked_ns` of a fenced grant is between
    /// this and `start_ns`. Kept to show what judging from the acquire's start would miss.
    pub invoked_ns: u64,
    /// Whether the token came with the grant (a `fenced()` lock), not asked for in the section.
    pub fenced: bool,
    /// When the critical section ended, before release.
    pub end_ns: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// Whether the guard reported the lock lost by `end_ns`.
    pub lost: bool,
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.key,
            self.token,
            self.owner,
            self.start_ns,
            self.end_ns,
            self.outcome.as_str(),
            u8::from(self.lost),
            self.asked_ns,
            self.invoked_ns,
            u8::from(self.fenced)
        )
    }
}

impl Record {
    /// Parses a line written by `Display`.
    pub fn parse(line: &str) -> Option<Record> {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 10 {
            return None;
        }
        Some(Record {
            key: f[0].to_string(),
            token: f[1].parse().ok()?,
            owner: f[2].to_string(),
            start_ns: f[3].parse().ok()?,
            end_ns: f[4].parse().ok()?,
            outcome: Outcome::parse(f[5])?,
            lost: f[6] == "1",
            asked_ns: f[7].parse().ok()?,
            invoked_ns: f[8].parse().ok()?,
            fenced: f[9] == "1",
        })
    }
}

/// Store keys for lock `key`: the newest token seen, the counter, and the commit log.
pub fn store_keys(key: &str) -> [String; 3] {
    [
        format!("store:{{{key}}}:token"),
        format!("store:{{{key}}}:value"),
        format!("store:{{{key}}}:log"),
    ]
}

/// A fenced read: registers `token` as seen and returns the counter, or rejects an old token.
/// KEYS: token, value. ARGV: token. Returns `{1, value}` or `{0, 0}`.
pub static FENCED_READ: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
        local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
        if tonumber(ARGV[1]) < seen then return {0, 0} end
        redis.call('SET', KEYS[1], ARGV[1])
        return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
        ",
    )
});

/// A fenced write: stores the counter and logs the token, unless a newer token was seen.
/// KEYS: token, value, log. ARGV: token, new value. Returns 1 or 0.
pub static FENCED_WRITE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
        if tonumber(ARGV[1]) < tonumber(redis.call('GET', KEYS[1]) or '0') then return 0 end
        redis.call('SET', KEYS[1], ARGV[1])
        redis.call('SET', KEYS[2], ARGV[2])
        redis.call('RPUSH', KEYS[3], ARGV[1])
        return 1
        ",
    )
});

/// The store's view of one key: the counter and the commit log (tokens in commit order).
#[derive(Debug, Clone, Default)]
pub struct StoreState {
    /// The counter.
    pub value: u64,
    /// Committed tokens, in commit order.
    pub log: Vec<u64>,
}

/// What the store holds for the locks `chaos:0` … `chaos:<keys - 1>`: each counter and its commit
/// log, read from `store` after a run.
pub fn read_store(store: &crate::RedisServer, keys: usize) -> HashMap<String, StoreState> {
    let keys: Vec<String> = (0..keys).map(|k| format!("chaos:{k}")).collect();
    read_store_keys(store, &keys)
}

/// What the store holds for the locks `keys` (as [`read_store`]).
pub fn read_store_keys(store: &crate::RedisServer, keys: &[String]) -> HashMap<String, StoreState> {
    keys.iter()
        .map(|key| {
            let key = key.clone();
            let [_, value_key, log_key] = store_keys(&key);
            let value = store
                .cmd(&["GET", &value_key])
                .text()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let log = store
                .cmd(&["LRANGE", &log_key, "0", "-1"])
                .items()
                .iter()
                .filter_map(|t| t.text().and_then(|t| t.parse().ok()))
                .collect();
            (key, StoreState { value, log })
        })
        .collect()
}

/// Writes a fenced store accepted out of token order: in each key's commit log, the commits
/// whose token is not above every token committed before. 0 is the hard invariant.
pub fn stale_writes_accepted(store: &HashMap<String, StoreState>) -> usize {
    store
        .values()
        .map(|state| {
            let mut highest = None;
            let mut stale = 0;
            for &t in &state.log {
                if highest.is_some_and(|h| t <= h) {
                    stale += 1;
                }
                highest = highest.max(Some(t));
            }
            stale
        })
        .sum()
}
