//! The lock family's chaos records and their checker.
//!
//! `lock-worker family-chaos` appends one line per critical section:
//! `<semaphore|read|write|fair> <asked-ns> <start-ns> <end-ns> <lost>` (CLOCK_MONOTONIC, shared
//! by the processes of one machine). The checker proves, for the sections whose holder was not
//! told its hold was lost and that do not touch a window in which Redis lost its data:
//! - never more semaphore holders at once than its 2 permits;
//! - no writer of the read/write lock overlaps any other section of it;
//! - the fair lock is exclusive.
//!
//! It also counts, among fair sections that waited for each other away from any fault, those
//! that asked more than [`FAIR_TOLERANCE_NS`] later and started first: a reading for the
//! report, not a broken promise. The ask is the worker's stamp before its request, and a
//! loaded scheduler can delay the request past any fixed tolerance; the fair order is proved
//! from Redis's own order of commands (`processes.rs`,
//! `three_processes_take_a_fair_lock_in_the_order_they_asked`).

use std::fmt;

/// The semaphore's permits in the chaos workload.
pub const PERMITS: usize = 2;
/// How much earlier a fair waiter must have asked to count as out of order in the report: the
/// time between asking and joining the queue in Redis (one round trip, plus scheduling).
/// Reported only: a loaded machine can delay a request past any fixed figure.
pub const FAIR_TOLERANCE_NS: u64 = 50_000_000;

/// One section of the lock family's chaos workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    /// `semaphore`, `read`, `write` or `fair`.
    pub kind: &'static str,
    /// When the task asked for it.
    pub asked: u64,
    /// When it held it.
    pub start: u64,
    /// When it let go.
    pub end: u64,
    /// Whether the holder was told the hold was lost by the end.
    pub lost: bool,
}

impl Section {
    /// Parses a line of `lock-worker family-chaos`.
    pub fn parse(line: &str) -> Option<Section> {
        // `permit` is what the cross-process workload calls a semaphore's section.
        let line = line
            .strip_prefix("permit ")
            .map_or(line.to_owned(), |rest| format!("semaphore {rest}"));
        let f: Vec<&str> = line.split(' ').collect();
        let kind = match *f.first()? {
            "semaphore" => "semaphore",
            "read" => "read",
            "write" => "write",
            "fair" => "fair",
            _ => return None,
        };
        Some(Section {
            kind,
            asked: f.get(1)?.parse().ok()?,
            start: f.get(2)?.parse().ok()?,
            end: f.get(3)?.parse().ok()?,
            lost: f.get(4)?.parse().ok()?,
        })
    }

    fn overlaps(&self, other: &Section) -> bool {
        self.start < other.end && other.start < self.end
    }

    fn touches(&self, windows: &[(u64, u64)]) -> bool {
        windows
            .iter()
            .any(|&(from, to)| self.asked < to && self.end > from)
    }
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct FamilyReport {
    /// Sections per kind: semaphore, read, write, fair.
    pub sections: [usize; 4],
    /// Sections excused (lost, or touching a wipe).
    pub excused: usize,
    /// The most semaphore holders at once.
    pub most_permits: usize,
    /// The most readers at once.
    pub most_readers: usize,
    /// Fair sections that waited for each other away from faults, and order inversions among
    /// them beyond the tolerance (by the workers' stamps; a reading, not a violation).
    pub fair_pairs: usize,
    /// See `fair_pairs`.
    pub fair_inversions: usize,
    /// Broken promises.
    pub violations: Vec<String>,
}

impl fmt::Display for FamilyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [sem, read, write, fair] = self.sections;
        write!(
            f,
            "{sem} semaphore, {read} read, {write} write, {fair} fair sections ({} excused: lost \
             or wiped); at most {} of {PERMITS} permits and {} readers at once; fair order: {} \
             inversions beyond {} ms in {} contended pairs away from faults; violations {}",
            self.excused,
            self.most_permits,
            self.most_readers,
            self.fair_inversions,
            FAIR_TOLERANCE_NS / 1_000_000,
            self.fair_pairs,
            self.violations.len()
        )
    }
}

/// The most sections open at once (touching sections do not overlap).
pub fn most_at_once(sections: &[&Section]) -> usize {
    let mut events: Vec<(u64, i32)> = sections
        .iter()
        .flat_map(|s| [(s.start, 1), (s.end, -1)])
        .collect();
    events.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, delta) in events {
        now += delta;
        most = most.max(now);
    }
    most as usize
}

/// Checks the family's sections. `wiped`: windows in which Redis lost its data (no promise
/// holds); `faults`: windows of any fault (the fair order is judged away from them).
pub fn check_family(
    sections: &[Section],
    wiped: &[(u64, u64)],
    faults: &[(u64, u64)],
) -> FamilyReport {
    let mut report = FamilyReport::default();
    for (i, kind) in ["semaphore", "read", "write", "fair"].iter().enumerate() {
        report.sections[i] = sections.iter().filter(|s| s.kind == *kind).count();
    }
    let kept: Vec<&Section> = sections
        .iter()
        .filter(|s| !s.lost && !s.touches(wiped))
        .collect();
    report.excused = sections.len() - kept.len();
    let of = |kinds: &[&str]| -> Vec<&Section> {
        kept.iter()
            .copied()
            .filter(|s| kinds.contains(&s.kind))
            .collect()
    };

    let permits = of(&["semaphore"]);
    report.most_permits = most_at_once(&permits);
    if report.most_permits > PERMITS {
        report.violations.push(format!(
            "{} semaphore holders at once (of {PERMITS} permits)",
            report.most_permits
        ));
    }

    let rw = of(&["read", "write"]);
    report.most_readers = most_at_once(&of(&["read"]));
    for w in rw.iter().filter(|s| s.kind == "write") {
        for other in &rw {
            if !std::ptr::eq(*w, *other) && w.overlaps(other) {
                report
                    .violations
                    .push(format!("writer {w:?} overlaps {other:?}"));
            }
        }
    }

    let mut fair = of(&["fair"]);
    fair.sort_by_key(|s| s.start);
    if most_at_once(&fair) > 1 {
        report
            .violations
            .push("two fair-lock holders at once".to_string());
    }
    let calm: Vec<&Section> = fair
        .iter()
        .copied()
        .filter(|s| !s.touches(faults))
        .collect();
    for (i, a) in calm.iter().enumerate() {
        for b in &calm[i + 1..] {
            // Only sections that waited for each other: each asked before the other started.
            if a.asked > b.start || b.asked > a.start {
                continue;
            }
            report.fair_pairs += 1;
            if b.asked + FAIR_TOLERANCE_NS < a.asked {
                report.fair_inversions += 1;
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(kind: &'static str, asked: u64, start: u64, end: u64) -> Section {
        Section {
            kind,
            asked,
            start,
            end,
            lost: false,
        }
    }

    #[test]
    fn lines_parse() {
        assert_eq!(
            Section::parse("write 1 2 3 false"),
            Some(s("write", 1, 2, 3))
        );
        assert_eq!(Section::parse("mutex 1 2 3 false"), None);
        assert_eq!(Section::parse("read 1 2"), None);
    }

    #[test]
    fn each_broken_promise_is_found() {
        let too_many = [10, 11, 12].map(|t| s("semaphore", 0, t, 100));
        assert_eq!(check_family(&too_many, &[], &[]).violations.len(), 1);
        let writer_with_reader = [s("write", 0, 10, 20), s("read", 0, 15, 30)];
        assert!(
            !check_family(&writer_with_reader, &[], &[])
                .violations
                .is_empty()
        );
    }

    #[test]
    fn fair_order_inversions_are_counted_not_judged() {
        let late = 200_000_000;
        let inverted = [
            s("fair", late, late + 1, late + 2),
            s("fair", 0, late + 3, late + 4),
        ];
        let report = check_family(&inverted, &[], &[]);
        assert_eq!(report.fair_inversions, 1, "{report}");
        assert!(
            report.violations.is_empty(),
            "a reading, not a check: {report}"
        );
    }

    #[test]
    fn lost_wiped_and_faulty_sections_are_excused() {
        let mut lost = s("write", 0, 10, 20);
        lost.lost = true;
        let overlapping = [lost, s("read", 0, 15, 30)];
        assert!(check_family(&overlapping, &[], &[]).violations.is_empty());
        let wiped = [s("write", 0, 10, 20), s("write", 0, 15, 30)];
        assert!(check_family(&wiped, &[(12, 14)], &[]).violations.is_empty());
        let late = 200_000_000;
        let inverted = [
            s("fair", late, late + 1, late + 2),
            s("fair", 0, late + 3, late + 4),
        ];
        assert!(
            check_family(&inverted, &[], &[(5, 6)])
                .violations
                .is_empty()
        );
    }

    #[test]
    fn a_clean_run_passes() {
        let sections = [
            s("semaphore", 0, 1, 10),
            s("semaphore", 0, 2, 10),
            s("semaphore", 0, 10, 20),
            s("read", 0, 1, 10),
            s("read", 0, 2, 10),
            s("write", 0, 10, 20),
            s("fair", 0, 1, 10),
            s("fair", 5, 10, 20),
        ];
        let report = check_family(&sections, &[], &[]);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!((report.most_permits, report.most_readers), (2, 2));
    }
}
