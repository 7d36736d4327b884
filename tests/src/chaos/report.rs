//! What a run with failovers showed, per fault window: counted, not judged.

use std::collections::HashMap;

use super::check::{Ended, overlapping, sections_by_key};
use super::{Outcome, Record};

/// What a run with failovers showed, per fault window (the failover suite, `tests/failover.rs`).
/// Counted, not judged: overlaps are expected without replica acknowledgement. The hard invariants
/// stay [`check`](super::check)'s (and [`stale_writes_accepted`](super::stale_writes_accepted)).
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
