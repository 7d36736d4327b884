//! The lock family's part of a run ([`FamilyFindings`]): its sections checked against the fault
//! windows, the fenced resources' logs replayed, and its table ([`FamilyRow`]).

use std::collections::HashMap;
use std::path::PathBuf;

use crate::RedisServer;
use crate::chaos::family_store::{SemaphoreLog, check_semaphore_log, rw_keys, semaphore_keys};
use crate::chaos::{self, StoreState};
use crate::family::{FamilyReport, PERMITS, Section, check_family};

use super::Setting;
use super::workload::beside;

/// What the lock family showed in one run
/// ([`Workload::start_with_family`](super::Workload::start_with_family)): the sections the workers
/// noted (`<out>.family`) checked against the fault windows, and the fenced resources' own logs on
/// the Redis store replayed.
#[derive(Debug)]
pub struct FamilyFindings {
    /// The sections checked outside the fault windows: the promises (never more semaphore
    /// holders than permits, no writer overlapping another section).
    pub away: FamilyReport,
    /// The same findings over the whole run, fault windows included: counted, not judged.
    pub in_windows: usize,
    /// Sections whose resource the store refused.
    pub refused: usize,
    /// The semaphore's resource log replayed.
    pub semaphore: SemaphoreLog,
    /// The entries of that log.
    pub semaphore_entries: usize,
    /// The read/write lock's fenced counter.
    pub rw: StoreState,
    /// The chaos checker's verdict on that counter (writers' tokens increasing, no lost
    /// update).
    pub rw_violations: Vec<String>,
}

impl FamilyFindings {
    pub(super) fn read(
        outs: &[PathBuf],
        windows: &[(u64, u64)],
        store: &RedisServer,
    ) -> FamilyFindings {
        let noted: Vec<(Section, bool)> = (outs.iter())
            .flat_map(|o| {
                std::fs::read_to_string(beside(o, ".family"))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| Some((Section::parse(l)?, l.contains("Rejected"))))
                    .collect::<Vec<_>>()
            })
            .collect();
        let sections: Vec<Section> = noted.iter().map(|(s, _)| *s).collect();
        let texts = |key: &str| -> Vec<String> {
            let log = tokio::task::block_in_place(|| store.cmd(&["LRANGE", key, "0", "-1"]));
            (log.items().iter())
                .filter_map(|e| e.text().map(str::to_owned))
                .collect()
        };
        let semaphore_log = texts(&semaphore_keys("family:sem")[1]);
        let [_, _, value_key, log_key] = rw_keys("family:rw");
        let value = tokio::task::block_in_place(|| store.cmd(&["GET", &value_key]));
        let rw = StoreState {
            value: value.text().and_then(|v| v.parse().ok()).unwrap_or(0),
            log: (texts(&log_key).iter())
                .filter_map(|t| t.parse().ok())
                .collect(),
        };
        let rw_state = HashMap::from([("family:rw".to_string(), rw.clone())]);
        FamilyFindings {
            away: check_family(&sections, windows, windows),
            in_windows: check_family(&sections, &[], &[]).violations.len(),
            refused: noted.iter().filter(|(_, refused)| *refused).count(),
            semaphore: check_semaphore_log(&semaphore_log, PERMITS),
            semaphore_entries: semaphore_log.len(),
            rw,
            rw_violations: chaos::check(&[], &rw_state, &[]).violations,
        }
    }

    /// One line on the lock family, for the log.
    pub fn summary(&self) -> String {
        format!(
            "{}; in fault windows: {} findings; store: {:?} (log of {}), rw writes {}",
            self.away,
            self.in_windows,
            self.semaphore,
            self.semaphore_entries,
            self.rw.log.len()
        )
    }

    /// The lock family's promises outside the fault windows, and the fenced resources' logs:
    /// never more occupants than permits, no use from outside, the writers' tokens increasing,
    /// no lost update; and the family's workload ran.
    ///
    /// # Panics
    /// With what broke.
    pub fn assert_invariants(&self) {
        assert!(
            self.away.violations.is_empty(),
            "{:?}",
            self.away.violations
        );
        assert!(
            self.semaphore.violations.is_empty(),
            "{:?}",
            self.semaphore.violations
        );
        assert!(self.rw_violations.is_empty(), "{:?}", self.rw_violations);
        assert!(
            self.semaphore.used > 0 && !self.rw.log.is_empty(),
            "the family workload ran"
        );
    }

    /// The row of the family's table for `setting`.
    pub fn row(&self, setting: Setting) -> FamilyRow {
        FamilyRow {
            setting,
            sections: self.away.sections,
            refused: self.refused,
            in_windows: self.in_windows,
            most_permits: self.semaphore.most,
            evicted: self.semaphore.evicted,
            writes: self.rw.log.len(),
        }
    }
}

/// One row of the lock family's table: one setting's run.
#[derive(Debug, Clone)]
pub struct FamilyRow {
    /// The setting.
    pub setting: Setting,
    /// Sections per kind: semaphore, read, write, fair.
    pub sections: [usize; 4],
    /// Sections whose resource the store refused.
    pub refused: usize,
    /// Findings (over capacity, a writer overlapping) in fault windows: counted, not judged.
    pub in_windows: usize,
    /// The most occupants the semaphore's resource admitted at once.
    pub most_permits: usize,
    /// Occupants it fenced off (a permit granted again with a larger token).
    pub evicted: usize,
    /// Writes the read/write lock's counter committed.
    pub writes: usize,
}

impl std::fmt::Display for FamilyRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [sem, read, write, _] = self.sections;
        write!(
            f,
            "| {} | {sem} / {read} / {write} | {} | {} | {} of {PERMITS} | {} | {} | 0 | 0 |",
            self.setting,
            self.in_windows,
            self.refused,
            self.most_permits,
            self.evicted,
            self.writes,
        )
    }
}

/// Prints the lock family's table of `rows` (Markdown) to stderr.
pub fn print_family_table(rows: &[FamilyRow]) {
    eprintln!(
        "| replica_ack | semaphore / read / write sections | over capacity or writer overlaps in fault windows | refused by the store | most occupants the store admitted | permits fenced off by the store | writes committed | stale writes accepted | violations outside fault windows |"
    );
    eprintln!("|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        eprintln!("{row}");
    }
}
