//! The checker: the records against the lock model (exclusion, token order, unique tokens)
//! and the store (strictly increasing commits, no lost update).

use std::collections::HashMap;

use super::{Outcome, Record, StoreState};

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

/// [`check`], with `counted` windows `[from, to)` in which a token lower than one of a section that
/// had ended before it was asked for is not judged here (for a section starting in them): the
/// failover suites count those ([`failover_report`](super::failover_report)) and judge them per
/// deployment.
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
        exclusion(&mut report, key, &recs, wiped);
        token_order(&mut report, key, &recs, wiped, counted);
        unique_tokens(&mut report, key, &recs, counted);
    }

    check_store(&mut report, records, store);
    report
}

/// No two sections of `key` overlapped, unless one was told of its loss or the lock state was
/// wiped then.
fn exclusion(report: &mut Report, key: &str, recs: &[&Record], wiped: &[(u64, u64)]) {
    // Exclusion.
    for (o, r) in overlapping(recs) {
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
}

/// Tokens follow holding order on `key`: from when each was asked for, and (for a holder not
/// told of a loss, outside the wiped windows) from when its section began.
fn token_order(
    report: &mut Report,
    key: &str,
    recs: &[&Record],
    wiped: &[(u64, u64)],
    counted: &[(u64, u64)],
) {
    // Token order across holders.
    let ended = Ended::new(recs);
    for &r in recs {
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
}

/// Each token of `key` was issued to one owner.
fn unique_tokens(report: &mut Report, key: &str, recs: &[&Record], counted: &[(u64, u64)]) {
    // Tokens are unique per acquisition (in the counted windows, counted by
    // `failover_report` instead).
    let mut tokens: HashMap<u64, &Record> = HashMap::new();
    for r in recs {
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

/// The store: commits strictly increasing, the counter equal to the commits, and no more
/// sections claiming a commit than it logged.
fn check_store(report: &mut Report, records: &[Record], store: &HashMap<String, StoreState>) {
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
}

/// The sections of each lock key, by start time.
pub(super) fn sections_by_key(records: &[Record]) -> HashMap<&str, Vec<&Record>> {
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
pub(super) fn overlapping<'r>(recs: &[&'r Record]) -> Vec<(&'r Record, &'r Record)> {
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
pub(super) struct Ended<'r> {
    ends: Vec<u64>,
    highest: Vec<&'r Record>,
}

impl<'r> Ended<'r> {
    pub(super) fn new(recs: &[&'r Record]) -> Ended<'r> {
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
    pub(super) fn highest_by(&self, t: u64) -> Option<&'r Record> {
        let n = self.ends.partition_point(|&end| end <= t);
        n.checked_sub(1).map(|i| self.highest[i])
    }
}
