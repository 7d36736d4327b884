//! The hand-off queue's unit tests.

use super::*;

fn owner(s: &str) -> Arc<str> {
    s.into()
}

/// A grant with `token`, sent `at`, by a hand-over that went through Redis.
fn granted(token: u64, at: Instant) -> Grant {
    Grant {
        token,
        sent: at,
        streak: Streak::default(),
        inherited: None,
    }
}

/// A turn of `count` hand-overs whose first was chosen now.
fn streak(count: u32) -> Streak {
    Streak {
        count,
        since: (count > 0).then(Instant::now),
    }
}

#[test]
fn waiters_are_chosen_in_order() {
    let h = HandOffs::new(2);
    let a = h.join("k", &owner("a"), Duration::from_secs(1), Wants::default());
    let _b = h.join("k", &owner("b"), Duration::from_secs(1), Wants::default());
    let next = h.choose("k", streak(0)).unwrap();
    assert_eq!(&*next.ticket.owner, "a");
    assert_eq!(next.streak.count, 1);
    assert_eq!(h.queued(), 1);
    assert!(
        h.deliver("k", next, Some(granted(7, Instant::now())))
            .is_none()
    );
    assert!(matches!(&a.slot.lock().unwrap().slot, Slot::Granted(g) if g.token == 7));
    assert_eq!(&*h.choose("k", streak(1)).unwrap().ticket.owner, "b");
    assert!(h.choose("k", streak(0)).is_none());
    assert_eq!(h.queued(), 0);
}

/// Waiters leaving in any order, most from the middle of the queue: the ones still there
/// are chosen in order, none that left ever is, and once all have gone nothing is kept
/// for the name. Each leave looks at the queue only when those that left may be half of
/// it (see `Queue`): a hundred thousand leaving cost linear time, not quadratic.
#[test]
fn waiters_leave_from_anywhere_and_nothing_is_kept_after_the_last() {
    let h = HandOffs::new(u32::MAX);
    let lease = Duration::from_secs(1);
    let tickets: Vec<_> = (0..1000)
        .map(|i| h.join("k", &owner(&format!("w:{i}")), lease, Wants::default()))
        .collect();
    // Every third leaves, from the back: the middle of the queue each time.
    for (i, ticket) in tickets.iter().enumerate().rev() {
        if i % 3 == 1 {
            assert!(h.leave("k", ticket, false).is_none());
        }
    }
    assert!(h.queued() <= 1000, "{} queued", h.queued());
    let first = h.choose("k", streak(0)).expect("a waiter");
    assert_eq!(&*first.ticket.owner, "w:0");
    let second = h.choose("k", streak(0)).expect("a waiter");
    assert_eq!(&*second.ticket.owner, "w:2", "w:1 left: never chosen");
    assert!(h.deliver("k", first, None).is_none());
    assert!(h.deliver("k", second, None).is_none());
    // The rest leave, from both ends alternately.
    let mut rest: VecDeque<_> = (tickets.iter().enumerate())
        .filter(|(i, _)| i % 3 != 1)
        .map(|(_, t)| t)
        .collect();
    while let Some(t) = rest.pop_back() {
        h.leave("k", t, false);
        if let Some(t) = rest.pop_front() {
            h.leave("k", t, false);
        }
    }
    assert_eq!(h.queued(), 0);
    assert!(sync::lock(&h.queues).is_empty(), "the name is kept");
    assert!(h.choose("k", streak(0)).is_none());
}

#[test]
fn off_when_the_limit_is_zero() {
    let h = HandOffs::new(0);
    let _a = h.join("k", &owner("a"), Duration::from_secs(1), Wants::default());
    assert!(h.choose("k", streak(0)).is_none());
    assert_eq!(h.queued(), 0);
}

#[test]
fn the_scripts_turn_mark_lapses_after_yield() {
    let prelude = include_str!("../script/prelude.lua");
    let line = format!("local TURN_LAPSE_US = {}", YIELD.as_micros());
    assert!(prelude.contains(&line), "prelude.lua lacks `{line}`");
}

#[test]
fn at_the_limit_a_hand_off_yields_to_other_processes() {
    let h = HandOffs::new(2);
    let _a = h.join("k", &owner("a:1"), Duration::from_secs(1), Wants::default());
    let _b = h.join("k", &owner("a:2"), Duration::from_secs(1), Wants::default());
    let next = h.choose("k", streak(1)).unwrap();
    assert_eq!(next.hand_off(1).yield_ms, None);
    assert_eq!(next.streak.count, 2);
    let next = h.choose("k", streak(2)).unwrap();
    assert_eq!(next.hand_off(1).yield_ms, Some(YIELD.as_millis() as u64));
    assert_eq!(next.streak.count, 2, "stays at the limit");
}

#[tokio::test(start_paused = true)]
async fn a_turn_that_lasted_its_time_yields_below_the_limit() {
    let h = HandOffs::new(DEFAULT_LIMIT);
    for i in 0..3 {
        h.join(
            "k",
            &owner(&format!("a:{i}")),
            Duration::from_secs(1),
            Wants::default(),
        );
    }
    // However long the hold before it, a turn's first hand-over starts its time.
    tokio::time::advance(TURN * 10).await;
    let next = h.choose("k", Streak::default()).unwrap();
    assert_eq!(next.hand_off(1).yield_ms, None);
    assert_eq!(next.streak.since, Some(Instant::now()));
    tokio::time::advance(TURN - Duration::from_micros(1)).await;
    let next = h.choose("k", next.streak).unwrap();
    assert_eq!(next.hand_off(1).yield_ms, None, "within its time");
    tokio::time::advance(Duration::from_micros(1)).await;
    let next = h.choose("k", next.streak).unwrap();
    assert_eq!(next.streak.count, 3);
    assert_eq!(
        next.hand_off(1).yield_ms,
        Some(YIELD.as_millis() as u64),
        "a turn of {TURN:?} ends while others wait, below the limit"
    );
}

#[test]
fn a_grant_for_a_waiter_that_left_comes_back_for_release() {
    let h = HandOffs::new(4);
    let a = h.join("k", &owner("a"), Duration::from_secs(1), Wants::default());
    let next = h.choose("k", streak(0)).unwrap();
    assert_eq!(h.leave("k", &a, false), None);
    let orphan = h
        .deliver("k", next, Some(granted(1, Instant::now())))
        .unwrap();
    assert_eq!(&*orphan.owner, "a");
    assert_eq!(orphan.streak.count, 1);
    // Left holding the lock by its own attempt: the late grant is its own hold.
    let b = h.join("k", &owner("b"), Duration::from_secs(1), Wants::default());
    let next = h.choose("k", streak(0)).unwrap();
    assert_eq!(h.leave("k", &b, true), None);
    assert!(
        h.deliver("k", next, Some(granted(2, Instant::now())))
            .is_none()
    );
    // Granted, then gone before taking it: `leave` hands the grant back.
    let c = h.join("k", &owner("c"), Duration::from_secs(1), Wants::default());
    let next = h.choose("k", streak(0)).unwrap();
    let began = next.streak.since;
    let at = Instant::now();
    assert!(h.deliver("k", next, Some(granted(3, at))).is_none());
    assert_eq!(
        h.leave("k", &c, false),
        Some(Grant {
            token: 3,
            sent: at,
            streak: Streak {
                count: 1,
                since: began
            },
            inherited: None,
        })
    );
}

#[tokio::test]
async fn a_hand_off_that_did_not_happen_requeues_the_waiter_first() {
    let h = HandOffs::new(4);
    let a = h.join("k", &owner("a"), Duration::from_secs(1), Wants::default());
    let _b = h.join("k", &owner("b"), Duration::from_secs(1), Wants::default());
    let next = h.choose("k", streak(0)).unwrap();
    assert!(h.deliver("k", next, None).is_none());
    assert_eq!(a.delivered().await, Delivery::Retry);
    assert_eq!(&*h.choose("k", streak(0)).unwrap().ticket.owner, "a");
    // Delivered after the waiter started listening.
    let c = h.join("j", &owner("c"), Duration::from_secs(1), Wants::default());
    let listen = tokio::spawn({
        let c = c.clone();
        async move { c.delivered().await }
    });
    tokio::task::yield_now().await;
    let at = Instant::now();
    let turn = streak(3);
    let next = h.choose("j", turn).unwrap();
    h.deliver("j", next, Some(granted(9, at)));
    assert_eq!(
        listen.await.unwrap(),
        Delivery::Granted(Grant {
            token: 9,
            sent: at,
            streak: Streak {
                count: 4,
                since: turn.since
            },
            inherited: None,
        })
    );
}
