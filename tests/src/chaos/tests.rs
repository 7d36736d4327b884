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
    // On another key, the deposed write goes first, under a larger token of the new master's
    // (the failover epoch's order): serialised by the store, not won.
    let deposed_first = rec("j", 5, 40, 45, false);
    let legitimate = rec("j", 8, 42, 46, false);
    let sections = [
        (&deposed_won, Some("a:1")),
        (&refused, Some("b:2")),
        (&before, Some("a:1")),
        (&deposed_first, Some("a:1")),
        (&legitimate, Some("b:2")),
    ];
    let found = sides(&sections, "a:1", 30, 100);
    assert_eq!(
        found,
        Sides {
            deposed: 2,
            deposed_accepted: 2,
            deposed_won: 1,
            deposed_first: 1,
            legitimate_refused: 1
        }
    );
}
