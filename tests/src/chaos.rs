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

use std::collections::HashMap;
use std::fmt;
use std::sync::LazyLock;

pub mod sql;

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

/// What the checker found.
#[derive(Debug, Default)]
pub struct Report {
    /// Critical sections checked.
    pub records: usize,
    /// Commits in the store's logs.
    pub commits: usize,
    /// Records whose fenced read or write was rejected.
    pub rejected: usize,
    /// Records whose guard reported the lock lost.
    pub lost: usize,
    /// Overlapping pairs excused because one side had been told of the loss, or because the
    /// lock state was wiped at the time.
    pub excused_overlaps: usize,
    /// Everything that broke a promise, with the offending records.
    pub violations: Vec<String>,
}

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

/// Checks the records against the lock model and the store. `wiped` lists `[from, to)`
/// windows (on [`crate::mono_ns`]) in which the lock state was wiped (a restart without
/// persistence): exclusion is not promised there, only fencing, so token order is still judged
/// there from when each token was asked for (tokens increase across a restart), but not holding
/// order (a holder whose lock was wiped may not have been told yet).
pub fn check(
    records: &[Record],
    store: &HashMap<String, StoreState>,
    wiped: &[(u64, u64)],
) -> Report {
    check_with(records, store, wiped, &[])
}

/// [`check`], with `counted` windows `[from, to)` in which a token lower than one of a section
/// that had ended before it was asked for is not judged here (for a section starting in them):
/// the failover suites count those ([`failover_report`]) and judge them per deployment.
pub fn check_with(
    records: &[Record],
    store: &HashMap<String, StoreState>,
    wiped: &[(u64, u64)],
    counted: &[(u64, u64)],
) -> Report {
    let mut report = Report {
        records: records.len(),
        rejected: records
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::RejectedRead | Outcome::RejectedWrite))
            .count(),
        lost: records.iter().filter(|r| r.lost).count(),
        ..Report::default()
    };

    for (key, recs) in sections_by_key(records) {
        // Exclusion.
        for (o, r) in overlapping(&recs) {
            let in_wipe = wiped
                .iter()
                .any(|&(from, to)| o.start_ns < to && r.end_ns.max(o.end_ns) > from);
            if o.lost || r.lost || in_wipe {
                report.excused_overlaps += 1;
            } else {
                report
                    .violations
                    .push(format!("overlap on `{key}`:\n  {o}\n  {r}"));
            }
        }
        // Token order across holders.
        let ended = Ended::new(&recs);
        for &r in &recs {
            // From when the token was asked for: a section that had ended by then had its
            // token issued before, so a smaller one.
            if let Some(h) = ended.highest_by(r.asked_ns)
                && h.token >= r.token
                && !counted
                    .iter()
                    .any(|&(from, to)| (from..to).contains(&r.start_ns))
            {
                report.violations.push(format!(
                    "token went back on `{key}`: asked for after a section with a token as large \
                     or larger ended\n  {h}\n  {r}"
                ));
                continue;
            }
            // In holding order: a section that ended before this one began, while this holder
            // held and was not told of a loss, was granted before it, or both held at once.
            let in_wipe = (wiped.iter()).any(|&(from, to)| r.asked_ns < to && r.end_ns > from);
            if r.lost || in_wipe {
                continue;
            }
            if let Some(h) = ended.highest_by(r.start_ns)
                && h.token >= r.token
            {
                report.violations.push(format!(
                    "tokens out of holding order on `{key}`: a holder not told of a loss began \
                     after a larger token's section ended\n  {h}\n  {r}"
                ));
            }
        }
        // Tokens are unique per acquisition (in the counted windows, counted by
        // `failover_report` instead).
        let mut tokens: HashMap<u64, &Record> = HashMap::new();
        for r in &recs {
            if let Some(other) = tokens.insert(r.token, r)
                && other.owner != r.owner
                && !(counted.iter()).any(|&(from, to)| (from..to).contains(&r.start_ns))
            {
                report.violations.push(format!(
                    "token {} issued twice on `{key}`:\n  {other}\n  {r}",
                    r.token
                ));
            }
        }
    }

    for (key, state) in store {
        report.commits += state.log.len();
        if let Some(w) = state.log.windows(2).find(|w| w[0] >= w[1]) {
            report.violations.push(format!(
                "committed tokens on `{key}` not strictly increasing: {} then {}",
                w[0], w[1]
            ));
        }
        if state.value != state.log.len() as u64 {
            report.violations.push(format!(
                "counter `{key}` is {} but {} writes committed (a lost update got through)",
                state.value,
                state.log.len()
            ));
        }
        let committed_records = records
            .iter()
            .filter(|r| r.key == *key && r.outcome == Outcome::Committed)
            .count();
        if committed_records > state.log.len() {
            report.violations.push(format!(
                "`{key}`: {committed_records} records say committed, the store logged {}",
                state.log.len()
            ));
        }
    }
    report
}

/// What a run with failovers showed, per fault window (the failover suite, `tests/failover.rs`).
/// Counted, not judged: overlaps are expected without replica acknowledgement. The hard
/// invariants stay [`check`]'s (and [`stale_writes_accepted`]).
#[derive(Debug, Default, Clone)]
pub struct FailoverReport {
    /// Fault windows given.
    pub faults: usize,
    /// Pairs of critical sections on one key that overlapped.
    pub overlaps: usize,
    /// Of those, pairs where the earlier holder committed a write after the rival's grant
    /// without having been told its lock was lost.
    pub unaware_writes: usize,
    /// Sections whose token is not above the token of a section on the same key that ended
    /// before that token was asked for ([`Record::asked_ns`]: for a fenced grant, when the
    /// granting request was sent).
    pub token_regressions: Vec<String>,
    /// When each of those sections started ([`crate::mono_ns`]), index-aligned with
    /// `token_regressions`.
    pub token_regressions_at: Vec<u64>,
    /// Tokens issued to two acquisitions (different owners) on one key, with both records; one
    /// asked for after the other's section ended is also a token regression.
    pub duplicate_tokens: Vec<String>,
    /// Of the token regressions, those whose token came with a fenced grant.
    pub fenced_regressions: usize,
    /// Of the token regressions, those that judging from the acquire's start (before its wait)
    /// would also have found: the rest are what that older checker exempted.
    pub regressions_from_invocation: usize,
    /// Per fault: the longest time in its window `[from, to)` in which no section started
    /// (counted from `from`; up to `to` if none started after the last one), in ns: the
    /// outage the fault caused. `None`: no section started in the window.
    pub recovery_ns: Vec<Option<u64>>,
    /// Per fault: the overlapping pairs whose later section started in its window.
    pub overlaps_per_fault: Vec<usize>,
    /// Per fault: of those, the unaware writes (as [`unaware_writes`](Self::unaware_writes)).
    pub unaware_per_fault: Vec<usize>,
}

impl FailoverReport {
    /// The recovery times that are known, sorted.
    pub fn recoveries(&self) -> Vec<u64> {
        let mut known: Vec<u64> = self.recovery_ns.iter().flatten().copied().collect();
        known.sort_unstable();
        known
    }
}

/// The sections of each lock key, by start time.
fn sections_by_key(records: &[Record]) -> HashMap<&str, Vec<&Record>> {
    let mut by_key: HashMap<&str, Vec<&Record>> = HashMap::new();
    for r in records {
        by_key.entry(&r.key).or_default().push(r);
    }
    for recs in by_key.values_mut() {
        recs.sort_by_key(|r| r.start_ns);
    }
    by_key
}

/// Every pair of sections of one key that overlap in time, `(earlier, later)`: a sweep by start
/// time, keeping the sections still open (`recs` sorted by start).
fn overlapping<'r>(recs: &[&'r Record]) -> Vec<(&'r Record, &'r Record)> {
    let mut pairs = Vec::new();
    let mut open: Vec<&Record> = Vec::new();
    for &r in recs {
        open.retain(|o| o.end_ns > r.start_ns);
        pairs.extend(open.iter().map(|&o| (o, r)));
        open.push(r);
    }
    pairs
}

/// The sections of one key by end time, with the one of the largest token among those ended so
/// far: answers "which section had the largest token of those that had ended by `t`".
struct Ended<'r> {
    ends: Vec<u64>,
    highest: Vec<&'r Record>,
}

impl<'r> Ended<'r> {
    fn new(recs: &[&'r Record]) -> Ended<'r> {
        let mut by_end = recs.to_vec();
        by_end.sort_by_key(|r| r.end_ns);
        let mut highest: Vec<&'r Record> = Vec::with_capacity(by_end.len());
        for &r in &by_end {
            let best = match highest.last() {
                Some(&h) if h.token >= r.token => h,
                _ => r,
            };
            highest.push(best);
        }
        Ended {
            ends: by_end.iter().map(|r| r.end_ns).collect(),
            highest,
        }
    }

    /// The section with the largest token among those that ended at or before `t`.
    fn highest_by(&self, t: u64) -> Option<&'r Record> {
        let n = self.ends.partition_point(|&end| end <= t);
        n.checked_sub(1).map(|i| self.highest[i])
    }
}

/// Counts overlaps, unaware writes, token regressions and recovery times in `records`;
/// `faults` are the windows `[from, to)` (on [`crate::mono_ns`]) from the injection of each
/// fault until the deployment was whole again.
pub fn failover_report(records: &[Record], faults: &[(u64, u64)]) -> FailoverReport {
    let mut report = FailoverReport {
        faults: faults.len(),
        overlaps_per_fault: vec![0; faults.len()],
        unaware_per_fault: vec![0; faults.len()],
        ..FailoverReport::default()
    };
    for (key, recs) in sections_by_key(records) {
        for (o, r) in overlapping(&recs) {
            report.overlaps += 1;
            let fault = faults
                .iter()
                .position(|&(from, to)| (from..to).contains(&r.start_ns));
            if let Some(i) = fault {
                report.overlaps_per_fault[i] += 1;
            }
            if o.outcome == Outcome::Committed && !o.lost {
                report.unaware_writes += 1;
                if let Some(i) = fault {
                    report.unaware_per_fault[i] += 1;
                }
            }
        }
        // The highest token among the sections that ended before each token was asked for
        // (for a fenced grant, when the granting request was sent: not before the section's
        // start, since a grant's reply read late, by a worker paused on a loaded machine,
        // carries a token issued before the rival's; not from the acquire's start either, which
        // is before a wait for the very section a late token would go back behind).
        // The same token issued to two acquisitions (whenever they asked).
        let mut tokens: HashMap<u64, &Record> = HashMap::new();
        for &r in &recs {
            if let Some(other) = tokens.insert(r.token, r)
                && other.owner != r.owner
            {
                report.duplicate_tokens.push(format!(
                    "token {} issued twice on `{key}`:\n  {other}\n  {r}",
                    r.token
                ));
            }
        }
        let ended = Ended::new(&recs);
        for &r in &recs {
            if let Some(h) = ended.highest_by(r.asked_ns)
                && r.token <= h.token
            {
                report
                    .token_regressions
                    .push(format!("token went back on `{key}`:\n  {h}\n  {r}"));
                report.token_regressions_at.push(r.start_ns);
                if r.fenced {
                    report.fenced_regressions += 1;
                }
                // What judging a fenced grant from the acquire's start would have counted.
                let old_reference = if r.fenced { r.invoked_ns } else { r.asked_ns };
                if (ended.highest_by(old_reference)).is_some_and(|h| r.token <= h.token) {
                    report.regressions_from_invocation += 1;
                }
            }
        }
    }
    report.recovery_ns = faults
        .iter()
        .map(|&(from, to)| {
            let mut starts: Vec<u64> = (records.iter())
                .map(|r| r.start_ns)
                .filter(|t| (from..to).contains(t))
                .collect();
            if starts.is_empty() {
                return None;
            }
            starts.sort_unstable();
            let mut longest = 0;
            let mut last = from;
            for t in starts {
                longest = longest.max(t - last);
                last = t;
            }
            Some(longest.max(to - last))
        })
        .collect();
    report
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

/// The lock family's fenced store (the failover suite's `family` workload): a semaphore of
/// [`crate::family::PERMITS`] permits guards a resource that admits that many occupants at
/// once, in token order, and a read/write lock guards a counter.
///
/// The semaphore's resource keeps its occupants' tokens (a sorted set): a holder *enters* with
/// its permit's token, which evicts the lowest tokens beyond the capacity (a permit that was
/// lost and granted again carries a larger token, so the older holder is the one fenced off),
/// *uses* the resource only while its token is still inside, and *exits*. Every step is logged
/// (`+t` entered, `x t` evicted, `u t` used, `-t` exited), and
/// [`check_semaphore_log`](family_store::check_semaphore_log) replays the
/// log: never more occupants than the capacity, no use by a token that was not inside.
///
/// The read/write lock's counter: a reader is refused if a writer with a larger token was
/// seen, a writer if any larger token was seen (readers' included, so a writer that lost its
/// lock cannot write after a newer reader read); writers do the chaos store's read-modify-write
/// and log their tokens (checked like [`check`]'s store: strictly increasing, no lost update).
pub mod family_store {
    use std::sync::LazyLock;

    /// Keys of the semaphore's resource `name`: occupants, log, uses.
    pub fn semaphore_keys(name: &str) -> [String; 3] {
        [
            format!("fstore:{{{name}}}:occupants"),
            format!("fstore:{{{name}}}:log"),
            format!("fstore:{{{name}}}:uses"),
        ]
    }

    /// Keys of the read/write lock's counter `name`: the largest token seen, the largest writer
    /// token seen, the counter, the writers' commit log.
    pub fn rw_keys(name: &str) -> [String; 4] {
        [
            format!("fstore:{{{name}}}:seen"),
            format!("fstore:{{{name}}}:writer"),
            format!("fstore:{{{name}}}:value"),
            format!("fstore:{{{name}}}:log"),
        ]
    }

    /// KEYS: occupants, log. ARGV: token, capacity. Returns 1 if the token is inside.
    pub static ENTER: LazyLock<redis::Script> = LazyLock::new(|| {
        redis::Script::new(
            r"
            redis.call('ZADD', KEYS[1], ARGV[1], ARGV[1])
            local n = redis.call('ZCARD', KEYS[1])
            local cap = tonumber(ARGV[2])
            if n > cap then
              for _, t in ipairs(redis.call('ZRANGE', KEYS[1], 0, n - cap - 1)) do
                redis.call('RPUSH', KEYS[2], 'x' .. t)
              end
              redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - cap - 1)
            end
            if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
              redis.call('RPUSH', KEYS[2], '+' .. ARGV[1])
              return 1
            end
            return 0
            ",
        )
    });

    /// KEYS: occupants, log, uses. ARGV: token. Returns 1 if used (the token was inside).
    pub static USE: LazyLock<redis::Script> = LazyLock::new(|| {
        redis::Script::new(
            r"
            if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
            redis.call('RPUSH', KEYS[2], 'u' .. ARGV[1])
            redis.call('INCR', KEYS[3])
            return 1
            ",
        )
    });

    /// KEYS: occupants, log. ARGV: token.
    pub static EXIT: LazyLock<redis::Script> = LazyLock::new(|| {
        redis::Script::new(
            r"
            if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
              redis.call('RPUSH', KEYS[2], '-' .. ARGV[1])
            end
            return 1
            ",
        )
    });

    /// KEYS: seen, writer, value. ARGV: token, '1' for a writer. Returns `{1, value}` or
    /// `{0, 0}`.
    pub static RW_READ: LazyLock<redis::Script> = LazyLock::new(|| {
        redis::Script::new(
            r"
            local t = tonumber(ARGV[1])
            local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
            local writer = tonumber(redis.call('GET', KEYS[2]) or '0')
            if ARGV[2] == '1' then
              if t < seen then return {0, 0} end
            elseif t < writer then
              return {0, 0}
            end
            if t > seen then redis.call('SET', KEYS[1], ARGV[1]) end
            return {1, tonumber(redis.call('GET', KEYS[3]) or '0')}
            ",
        )
    });

    /// KEYS: seen, writer, value, log. ARGV: token, new value. Returns 1 or 0.
    pub static RW_WRITE: LazyLock<redis::Script> = LazyLock::new(|| {
        redis::Script::new(
            r"
            if tonumber(ARGV[1]) < tonumber(redis.call('GET', KEYS[1]) or '0') then return 0 end
            redis.call('SET', KEYS[1], ARGV[1])
            redis.call('SET', KEYS[2], ARGV[1])
            redis.call('SET', KEYS[3], ARGV[2])
            redis.call('RPUSH', KEYS[4], ARGV[1])
            return 1
            ",
        )
    });

    /// What replaying a semaphore resource's log found.
    #[derive(Debug, Default, Clone, PartialEq, Eq)]
    pub struct SemaphoreLog {
        /// Entries.
        pub entered: usize,
        /// Occupants evicted by larger tokens beyond the capacity (fenced off).
        pub evicted: usize,
        /// Uses.
        pub used: usize,
        /// The most occupants at once.
        pub most: usize,
        /// Broken promises: more occupants than the capacity, a use from outside.
        pub violations: Vec<String>,
    }

    /// Replays a semaphore resource's log (see the module docs).
    pub fn check_semaphore_log(log: &[String], capacity: usize) -> SemaphoreLog {
        let mut found = SemaphoreLog::default();
        let mut inside: std::collections::BTreeSet<&str> = Default::default();
        for (i, entry) in log.iter().enumerate() {
            let (op, token) = entry.split_at(1);
            match op {
                "+" => {
                    found.entered += 1;
                    inside.insert(token);
                }
                "x" => {
                    found.evicted += 1;
                    inside.remove(token);
                }
                "-" => {
                    inside.remove(token);
                }
                "u" => {
                    found.used += 1;
                    if !inside.contains(token) {
                        found
                            .violations
                            .push(format!("entry {i}: token {token} used from outside"));
                    }
                }
                _ => found.violations.push(format!("entry {i}: unknown {entry}")),
            }
            found.most = found.most.max(inside.len());
            if op == "+" && inside.len() > capacity {
                found.violations.push(format!(
                    "entry {i}: {} occupants of {capacity}",
                    inside.len()
                ));
            }
        }
        found
    }
}

/// A client's master over time: `(mono_ns, "host:port")` lines as the chaos worker writes them
/// (`<out>.masters`, for a Sentinel URL), in order; empty if there is no such file.
pub fn read_masters(path: &std::path::Path) -> Vec<(u64, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (at, addr) = l.split_once(' ')?;
            Some((at.parse().ok()?, addr.to_string()))
        })
        .collect()
}

/// The master a client used at `at`, per its log ([`read_masters`]): the last one named at or
/// before `at`. A grant is attributed to the master its client used when the acquisition
/// returned (a reply from the old master that arrives after the switch is an unknown outcome
/// the client reconciles on the new one, so it is not a grant of the old one).
pub fn master_at(log: &[(u64, String)], at: u64) -> Option<&str> {
    let i = log.partition_point(|(t, _)| *t <= at);
    i.checked_sub(1).map(|i| log[i].1.as_str())
}

/// Which side the fenced store favoured after a failover: among the sections that started
/// from the promotion of the new master until the window ended, those granted by the deposed
/// master (whose grants the new master never saw) and those granted by the new one.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sides {
    /// Sections granted by the deposed master after the promotion.
    pub deposed: usize,
    /// Of those, writes the store accepted (grants the surviving master never knew of).
    pub deposed_accepted: usize,
    /// Of those, writes accepted while a section the new master granted on the same key
    /// overlapped them: the store favoured the wrong side (the deposed side's clock-based token
    /// was the larger).
    pub deposed_won: usize,
    /// Sections granted by the new master after the promotion whose read or write the store
    /// refused (a deposed holder had shown it a larger token).
    pub legitimate_refused: usize,
}

/// [`Sides`] of one failover: `sections` are `(record, master its client used)`, `deposed` the
/// old master's address, `[promoted, to)` the window after the promotion.
pub fn sides(sections: &[(&Record, Option<&str>)], deposed: &str, promoted: u64, to: u64) -> Sides {
    let mut sides = Sides::default();
    let window: Vec<(&Record, bool)> = sections
        .iter()
        .filter(|(r, _)| (promoted..to).contains(&r.start_ns))
        .map(|&(r, master)| (r, master == Some(deposed)))
        .collect();
    for &(r, on_deposed) in &window {
        let rejected = matches!(r.outcome, Outcome::RejectedRead | Outcome::RejectedWrite);
        if on_deposed {
            sides.deposed += 1;
            if r.outcome == Outcome::Committed {
                sides.deposed_accepted += 1;
                let rival = window.iter().any(|&(o, o_deposed)| {
                    !o_deposed && o.key == r.key && o.start_ns < r.end_ns && r.start_ns < o.end_ns
                });
                if rival {
                    sides.deposed_won += 1;
                }
            }
        } else if rejected {
            sides.legitimate_refused += 1;
        }
    }
    sides
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(key: &str, token: u64, start: u64, end: u64, lost: bool) -> Record {
        Record {
            key: key.into(),
            token,
            owner: format!("o{token}"),
            start_ns: start,
            asked_ns: start,
            invoked_ns: start,
            fenced: false,
            end_ns: end,
            outcome: Outcome::Committed,
            lost,
        }
    }

    #[test]
    fn a_token_is_late_only_if_asked_for_after_a_larger_one_ended() {
        let rival = rec("k", 9, 10, 20, false);
        // A fenced grant asked for at 5, its reply read at 30 (a paused worker): token 8 was
        // issued before the rival's 9, and is refused by the store, not a regression.
        let read_late = Record {
            asked_ns: 5,
            outcome: Outcome::RejectedRead,
            ..rec("k", 8, 30, 40, false)
        };
        let report = failover_report(&[rival.clone(), read_late], &[]);
        assert!(report.token_regressions.is_empty(), "{report:?}");
        // Asked for at 25, after the rival ended at 20: a token below 9 went back.
        let asked_after = Record {
            asked_ns: 25,
            ..rec("k", 8, 30, 40, false)
        };
        let report = failover_report(&[rival, asked_after], &[]);
        assert_eq!(report.token_regressions.len(), 1, "{report:?}");
        assert_eq!(report.token_regressions_at, vec![30]);
    }

    /// A fenced grant: the acquire called at `invoked`, the granting request sent at `asked`,
    /// the section from `start` to `end`.
    fn fenced(token: u64, [invoked, asked, start, end]: [u64; 4]) -> Record {
        Record {
            invoked_ns: invoked,
            asked_ns: asked,
            fenced: true,
            ..rec("k", token, start, end, false)
        }
    }

    fn store_of(log: &[u64]) -> HashMap<String, StoreState> {
        HashMap::from([(
            "k".to_string(),
            StoreState {
                value: log.len() as u64,
                log: log.to_vec(),
            },
        )])
    }

    #[test]
    fn the_checker_passes_tokens_in_holding_order() {
        // On demand, fenced after a wait, on demand again: each token above the ones before.
        let history = [
            rec("k", 10, 0, 10, false),
            fenced(11, [5, 10, 12, 20]),
            rec("k", 12, 21, 30, false),
        ];
        let report = check(&history, &store_of(&[10, 11, 12]), &[]);
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
        let report = failover_report(&history, &[]);
        assert!(report.token_regressions.is_empty(), "{report:?}");
    }

    #[test]
    fn the_checker_finds_a_token_that_went_back_even_when_the_store_refused_it() {
        // The store enforces token order itself: the late token only shows as a refused
        // section, and its log stays in order. The records show the regression.
        let refused = Record {
            outcome: Outcome::RejectedRead,
            ..rec("k", 9, 21, 30, false)
        };
        let history = [rec("k", 10, 0, 20, false), refused];
        let report = check(&history, &store_of(&[10]), &[]);
        assert_eq!(report.violations.len(), 1, "{:#?}", report.violations);
        assert!(report.violations[0].starts_with("token went back"));
        // Judged across a restart without persistence too: tokens increase across it.
        let report = check(&history, &store_of(&[10]), &[(15, 25)]);
        assert_eq!(report.violations.len(), 1, "{:#?}", report.violations);
        // Not in a window the failover suites count it in (where holding order is not
        // promised either).
        let report = check_with(&history, &store_of(&[10]), &[(15, 25)], &[(15, 25)]);
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
    }

    #[test]
    fn a_token_issued_again_to_another_holder_is_a_regression_and_a_duplicate() {
        // A promoted master whose counter and clock are behind hands out, 5 units of time after
        // the old master did, the very token the old master issued: not above it.
        let first = rec("k", 10, 0, 10, false);
        let again = Record {
            owner: "another".into(),
            outcome: Outcome::RejectedRead,
            ..rec("k", 10, 15, 20, false)
        };
        let history = [first, again];
        let report = failover_report(&history, &[]);
        assert_eq!(report.token_regressions.len(), 1, "{report:?}");
        assert_eq!(report.duplicate_tokens.len(), 1, "{report:?}");
        let report = check(&history, &store_of(&[10]), &[]);
        // Not above a token whose section ended before it was asked for; and issued twice.
        assert_eq!(report.violations.len(), 2, "{:#?}", report.violations);
        // Counted, not judged, in a window the failover suites count regressions in.
        let report = check_with(&history, &store_of(&[10]), &[(12, 30)], &[(12, 30)]);
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
    }

    #[test]
    fn a_fenced_grant_is_judged_from_when_its_granting_request_was_sent() {
        // It waited from 5 for the section of token 10 (0 to 20); the granting request went
        // out at 21, after that section ended, and came back with 9: a regression, which
        // judging from the acquire's start (5, before the rival ended) would have exempted.
        let rival = rec("k", 10, 0, 20, false);
        let late = Record {
            outcome: Outcome::RejectedRead,
            ..fenced(9, [5, 21, 22, 30])
        };
        let report = failover_report(&[rival.clone(), late.clone()], &[]);
        assert_eq!(report.token_regressions.len(), 1, "{report:?}");
        assert_eq!(report.fenced_regressions, 1);
        assert_eq!(report.regressions_from_invocation, 0);
        let report = check(&[rival, late], &store_of(&[10]), &[]);
        assert_eq!(report.violations.len(), 1, "{:#?}", report.violations);
    }

    #[test]
    fn a_holder_not_told_of_a_loss_has_a_larger_token_than_sections_ended_before_it_began() {
        // The grant's request went out at 5, before the section of token 10 ended (at 20);
        // its holder began at 25, was never told of a loss, and holds 9: token 10 was granted
        // while it held, or the tokens went back.
        let rival = rec("k", 10, 0, 20, false);
        let unaware = Record {
            outcome: Outcome::RejectedRead,
            ..fenced(9, [1, 5, 25, 30])
        };
        let report = check(&[rival.clone(), unaware.clone()], &store_of(&[10]), &[]);
        assert_eq!(report.violations.len(), 1, "{:#?}", report.violations);
        assert!(report.violations[0].starts_with("tokens out of holding order"));
        // Told of the loss (a reply read after its lease: the store refuses it), or in a
        // window where the lock state was wiped: excused, like an overlap.
        let told = Record {
            lost: true,
            ..unaware.clone()
        };
        let report = check(&[rival.clone(), told], &store_of(&[10]), &[]);
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
        let report = check(&[rival, unaware], &store_of(&[10]), &[(3, 8)]);
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
    }

    #[test]
    fn records_round_trip_through_their_line_format() {
        let r = rec("k", 7, 1, 2, true);
        assert_eq!(Record::parse(&r.to_string()), Some(r));
        let r = fenced(8, [1, 2, 3, 4]);
        assert_eq!(Record::parse(&r.to_string()), Some(r));
    }

    #[test]
    fn the_checker_finds_overlaps_lost_updates_and_token_order() {
        let store = HashMap::from([(
            "k".to_string(),
            StoreState {
                value: 2,
                log: vec![1, 3, 2],
            },
        )]);
        let records = [
            rec("k", 1, 0, 10, false),
            rec("k", 2, 5, 15, false),
            rec("k", 3, 20, 30, false),
        ];
        let report = check(&records, &store, &[]);
        assert_eq!(report.violations.len(), 3, "{:#?}", report.violations);
    }

    #[test]
    fn overlaps_after_a_reported_loss_or_in_a_wipe_are_excused() {
        let store = HashMap::from([(
            "k".to_string(),
            StoreState {
                value: 1,
                log: vec![2],
            },
        )]);
        let stale = Record {
            outcome: Outcome::RejectedWrite,
            ..rec("k", 1, 0, 10, true)
        };
        let lost = [stale.clone(), rec("k", 2, 5, 15, false)];
        let report = check(&lost, &store, &[]);
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
        let wiped = [
            Record {
                lost: false,
                ..stale
            },
            rec("k", 2, 5, 15, false),
        ];
        let report = check(&wiped, &store, &[(4, 6)]);
        assert!(report.violations.is_empty());
        assert_eq!(report.excused_overlaps, 1);
    }

    #[test]
    fn the_failover_report_counts_overlaps_regressions_and_recovery() {
        let unaware = rec("k", 5, 0, 10, false);
        let told = Record {
            outcome: Outcome::RejectedWrite,
            ..rec("k", 6, 5, 20, true)
        };
        let rival = rec("k", 7, 8, 30, false);
        let regressed = rec("k", 4, 40, 50, false);
        let records = [unaware, told, rival, regressed];
        let report = failover_report(&records, &[(3, 9), (35, 45), (100, 110)]);
        // (5, 6), (5, 7), (6, 7) overlap; only 5 committed unaware of a loss (twice).
        assert_eq!(report.overlaps, 3);
        assert_eq!(report.unaware_writes, 2);
        assert_eq!(report.token_regressions.len(), 1, "{report:?}");
        assert_eq!(report.token_regressions_at, vec![40]);
        // Starts 5 and 8 in [3, 9): gaps 2, 3, then 1 to the end; 40 in [35, 45): 5, 5.
        assert_eq!(report.recovery_ns, vec![Some(3), Some(5), None]);
        // (5, 6) and (5, 7) start in the first window, (6, 7) too: 8 is in [3, 9).
        assert_eq!(report.overlaps_per_fault, vec![3, 0, 0]);
        let store = HashMap::from([(
            "k".to_string(),
            StoreState {
                value: 4,
                log: vec![1, 3, 2, 3],
            },
        )]);
        assert_eq!(stale_writes_accepted(&store), 2);
    }

    #[test]
    fn the_semaphore_log_replay_finds_too_many_occupants_and_outside_uses() {
        use family_store::check_semaphore_log;
        let log = |entries: &[&str]| entries.iter().map(|e| e.to_string()).collect::<Vec<_>>();
        let fine = check_semaphore_log(&log(&["+1", "+2", "x1", "+3", "u2", "u3", "-2"]), 2);
        assert!(fine.violations.is_empty(), "{fine:?}");
        assert_eq!(
            (fine.entered, fine.evicted, fine.used, fine.most),
            (3, 1, 2, 2)
        );
        let bad = check_semaphore_log(&log(&["+1", "+2", "+3", "u4"]), 2);
        assert_eq!(bad.violations.len(), 2, "{bad:?}");
    }

    #[test]
    fn grants_are_attributed_to_the_master_their_client_used() {
        let log = vec![(10, "a:1".to_string()), (50, "b:2".to_string())];
        assert_eq!(master_at(&log, 5), None);
        assert_eq!(master_at(&log, 10), Some("a:1"));
        assert_eq!(master_at(&log, 49), Some("a:1"));
        assert_eq!(master_at(&log, 60), Some("b:2"));
        let deposed_won = rec("k", 9, 40, 45, false);
        let refused = Record {
            outcome: Outcome::RejectedWrite,
            ..rec("k", 8, 42, 46, false)
        };
        let before = rec("k", 3, 20, 25, false);
        let sections = [
            (&deposed_won, Some("a:1")),
            (&refused, Some("b:2")),
            (&before, Some("a:1")),
        ];
        let found = sides(&sections, "a:1", 30, 100);
        assert_eq!(
            found,
            Sides {
                deposed: 1,
                deposed_accepted: 1,
                deposed_won: 1,
                legitimate_refused: 1
            }
        );
    }
}
