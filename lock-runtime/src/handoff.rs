//! Local hand-off: a release that finds a task of the same client waiting for the lock passes
//! it on in memory, or grants it in the release's own round trip.
//!
//! Without it, a hand-over between two tasks takes three sequential steps: the release script,
//! the unlock message's delivery, the waiter's acquire script.
//!
//! **In memory** (`hold.rs`, both halves: `Held::pass_in_memory` and `Held::take_over`): when
//! the waiter wants no fencing token with its grant (tokens on demand) and the same
//! watchdog-renewed lease as the hold, nothing is sent at all. The hold in Redis stays as it is
//! (its owner id, its lease); its watchdog entry keeps renewing it under a signal of its own
//! until the waiter takes it over ([`Grant::inherited`]), and from then on every loss reaches
//! that waiter. A token it asks for later comes from Redis as for any holder.
//!
//! **Through Redis** otherwise (a waiter that asked for its token eagerly, a different lease,
//! the end of a turn): the release script removes the holder and, since the lock is left
//! without owners, grants it to the waiter's owner id at once (a fresh fencing token from the
//! same counter when the waiter is fenced, the waiter's own lease); the waiter is told
//! in-process. Either way the lock never falls free, so nothing is published and no other
//! process can slip in between.
//!
//! **Fairness** ("lock cohorting", Dice, Marathe and Shavit, PPoPP 2012): the tasks of one
//! client are served first come, first served, and a lock is passed on locally at most
//! `limit` times in a row ([`LockClientBuilder::handoff_limit`](crate::LockClientBuilder::handoff_limit))
//! and for at most [`TURN`] after the turn's first hand-over: with short critical sections
//! the limit ends a turn (many cheap hand-offs per turn), with long ones the time does (so the
//! other processes wait milliseconds, not `limit` critical sections).
//! From then on, every release that would hand the lock on locally asks Redis whether another
//! process waits for it (more than this client subscribed to its unlock channel). If so, the
//! client's turn ends: the lock falls free instead, and the unlock message wakes one waiter in
//! every process that waits.
//!
//! **Turns across processes.** The waiting clients then take turns in a fixed cycle: the one
//! whose last turn is longest ago goes next, whatever order Redis delivered the message in. A
//! mark on the fencing counter lists the clients whose turns ended last, most recent first, as
//! many as there are waiting clients less one, and while another client waits (is subscribed
//! to the lock's channel) grants refuse the lock to them (a refused waiter is told to retry
//! when the mark lapses). A new turn that begins while the mark is live
//! counts the turn before it as ended too, so a client that takes the lock again and again
//! without ever handing it on (nobody of its own waits) still takes turns with the others. The
//! mark lapses [`YIELD`] after the last turn's end or grant. So a client waiting elsewhere
//! waits for at most one turn (`limit` + 1 acquisitions, or [`TURN`] and a hold or two) of
//! every other waiting client; if
//! nobody else waits, the local hand-offs go on. (The order is kept in Redis by `prelude.lua`,
//! "Turns".)
//!
//! **Waiters** queue here for as long as they wait ([`HandOffs::join`]); a release picks the
//! first ([`HandOffs::choose`]), and the outcome is delivered to it ([`HandOffs::deliver`]).
//! Every way a chosen waiter can miss its grant is covered:
//! - the waiter left (gave up, cancelled) before the grant arrived: the grant is returned to
//!   the releasing side, which releases it in the background within milliseconds;
//! - the waiter left after the grant arrived, before it took it: [`HandOffs::leave`] returns
//!   the grant for the waiter's side to release;
//! - the release failed, did not hand over, or was itself cancelled: the waiter is put back at
//!   the head of the queue and woken to try on its own (had the hand-off gone through, its
//!   attempt re-takes its own hold: acquiring is idempotent per owner id);
//! - the waiter took the lock by its own attempt meanwhile (possible only after the hand-off
//!   granted it to its owner id): the late grant is for a lock it holds, and is ignored.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::RedisResult;
use std::task::{Poll, Waker};

use tokio::time::Instant;

use crate::backend::{Acked, Backend, HandOff, Reply};
use crate::keys::LockNames;
use crate::sync;

/// How many times in a row a lock is passed between the tasks of one client, at most, before a
/// release lets it fall free for every process.
pub(crate) const DEFAULT_LIMIT: u32 = 64;
/// How long a client passes a lock on locally, at most, while other processes wait: a release
/// that long after the turn's first hand-over lets it fall free even below the limit. With
/// short critical sections a turn is many hand-offs (each saves the longer hand-over between
/// processes); with long ones, few, so the other processes' wait is bounded in time, not only
/// in acquisitions.
pub(crate) const TURN: Duration = Duration::from_millis(2);
/// How long the turn mark on a lock outlives the end of the last turn, or the last grant: long
/// enough for a waiter on a busy machine to hear the unlock message and ask. If nobody whose
/// turn it is asks, the lock idles that long. (`prelude.lua`'s `TURN_LAPSE_US` is the same.)
pub(crate) const YIELD: Duration = Duration::from_millis(5);

/// The waiting tasks of one client, per lock key.
pub(crate) struct HandOffs {
    /// Hand-overs in a row per lock; 0 turns local hand-off off.
    limit: u32,
    queues: Mutex<HashMap<String, Queue>>,
}

/// The waiters of one lock, first come first served. A waiter that leaves from the middle is
/// dropped lazily (its slot says it left: [`HandOffs::choose`] skips it), and the queue is
/// compacted once such entries may be half of it: leaving costs O(1) amortized, so a hundred
/// thousand waiters of one name leaving at once do not cost their square under the lock.
#[derive(Default)]
struct Queue {
    tickets: VecDeque<Arc<Ticket>>,
    /// Waiters that left since the last compaction, some perhaps popped since (an upper bound
    /// of the entries that left).
    left: usize,
}

/// One waiting task's place. Kept small: every waiting task has one.
pub(crate) struct Ticket {
    owner: Arc<str>,
    lease: Duration,
    /// What the waiter's hold must be for the lock to pass to it in memory ([`pass`]).
    wants: Wants,
    slot: Mutex<TicketState>,
}

/// What a waiter wants of its hold, beyond the lock: whether a lock can pass to it in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Wants {
    /// A fencing token with the grant (a fenced acquisition): the hand-off must go through
    /// Redis, which issues it.
    pub(crate) token: bool,
    /// The watchdog renews the hold (no explicit lease).
    pub(crate) renewed: bool,
}

/// A ticket's state and the waker of the task waiting on it.
struct TicketState {
    slot: Slot,
    waker: Option<Waker>,
}

impl TicketState {
    /// Sets the slot and wakes the waiting task.
    fn set(&mut self, slot: Slot) {
        self.slot = slot;
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// Where a ticket stands.
#[derive(Debug, Clone)]
enum Slot {
    /// In the queue.
    Waiting,
    /// Picked by a release that is in flight.
    Chosen,
    /// Granted the lock; the waiter has not taken the grant yet.
    Granted(Grant),
    /// Back at the head of the queue after a hand-off that did not happen: try on your own.
    Retry,
    /// The waiter is gone; `holds` when it left holding the lock (by its own attempt).
    Left { holds: bool },
}

/// A client's turn at a lock: the local hand-overs in a row that led to a hold, and when the
/// first of them was chosen. The default: a hold taken by an attempt of its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Streak {
    /// Hand-overs in a row (0: the hold was taken by an attempt), at most the limit.
    pub(crate) count: u32,
    /// When the first hand-over of the turn was chosen (`None` before it).
    pub(crate) since: Option<Instant>,
}

/// A lock granted by a hand-off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The fencing token issued with it; 0 when none was (tokens on demand).
    pub(crate) token: u64,
    /// When the release that granted it was sent: the lease counts from there.
    pub(crate) sent: Instant,
    /// The turn that led to this hold, this hand-over included.
    pub(crate) streak: Streak,
    /// Passed in memory (`Held::pass_in_memory`): the hold Redis knows, which the waiter takes over.
    pub(crate) inherited: Option<Inherited>,
}

/// The hold a lock passed in memory keeps in Redis: its owner id (the lock is not written to
/// again) and its watchdog entry (renewed throughout, taken over by the waiter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inherited {
    pub(crate) owner: Arc<str>,
    /// The watchdog entry's id (the acquisition id of the hold that took the lock in Redis).
    pub(crate) acquisition: u64,
}

/// What a waiter is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// The lock is yours.
    Granted(Grant),
    /// The hand-off did not happen; try on your own.
    Retry,
}

/// A grant whose waiter left before it arrived: the lock is held by an owner id nobody uses.
/// Released in the background (`ReleaseJob::orphan`), which may pass it on to the next waiter.
#[derive(Debug)]
pub(crate) struct Orphan {
    pub(crate) owner: Arc<str>,
    pub(crate) lease: Duration,
    /// The turn that led to the grant.
    pub(crate) streak: Streak,
    /// A lock passed in memory: the watchdog entry that still renews it (to stop).
    pub(crate) acquisition: Option<u64>,
}

/// The waiter a release hands the lock to.
pub(crate) struct Next {
    ticket: Arc<Ticket>,
    streak: Streak,
    /// The lock has been handed on `limit` times in a row, or for [`TURN`]: yield it if others
    /// wait.
    at_limit: bool,
}

impl Next {
    /// The turn the waiter's hold will be part of, this hand-over included.
    pub(crate) fn streak(&self) -> Streak {
        self.streak
    }

    /// What the release script needs to grant the lock.
    pub(crate) fn hand_off(&self, retention_ms: u64) -> HandOff<'_> {
        HandOff {
            owner: &self.ticket.owner,
            lease_ms: crate::options::ceil_millis(self.ticket.lease),
            retention_ms,
            fenced: self.ticket.wants.token,
            yield_ms: self.at_limit.then_some(YIELD.as_millis() as u64),
        }
    }
}

impl HandOffs {
    pub(crate) fn new(limit: u32) -> HandOffs {
        HandOffs {
            limit,
            queues: Mutex::new(HashMap::new()),
        }
    }

    /// Queues a waiter for the lock at `key`; it stays queued until [`HandOffs::leave`].
    pub(crate) fn join(
        &self,
        key: &str,
        owner: &Arc<str>,
        lease: Duration,
        wants: Wants,
    ) -> Arc<Ticket> {
        let ticket = Arc::new(Ticket {
            owner: owner.clone(),
            lease,
            wants,
            slot: Mutex::new(TicketState {
                slot: Slot::Waiting,
                waker: None,
            }),
        });
        if self.limit > 0 {
            sync::lock(&self.queues)
                .entry(key.to_owned())
                .or_default()
                .tickets
                .push_back(ticket.clone());
        }
        ticket
    }

    /// The waiter has stopped waiting, holding the lock or not. Returns a grant it never took,
    /// which the caller must release.
    pub(crate) fn leave(&self, key: &str, ticket: &Arc<Ticket>, holds: bool) -> Option<Grant> {
        // Marked first, then removed: a release that looks at the queue in between skips it.
        let before = {
            let mut place = sync::lock(&ticket.slot);
            place.waker = None;
            std::mem::replace(&mut place.slot, Slot::Left { holds })
        };
        self.remove(key, ticket);
        match before {
            // Passed in memory: the hold in Redis is the releaser's owner id, which this waiter
            // would have taken over; never its own.
            Slot::Granted(grant) if grant.inherited.is_some() => Some(grant),
            // Granted to the owner id it already holds the lock as: nothing to undo.
            Slot::Granted(grant) if !holds => Some(grant),
            _ => None,
        }
    }

    /// Picks the first waiter for the lock at `key`, released by a hold of turn `streak`;
    /// `None` when nobody waits here or hand-off is off. At the limit, or once the turn lasted
    /// [`TURN`], the release hands over only if no other process waits.
    pub(crate) fn choose(&self, key: &str, streak: Streak) -> Option<Next> {
        self.choose_if(key, streak, |_| true)
    }

    /// Picks the first waiter for the lock at `key` if the lock can pass to it in memory
    /// ([`pass`](crate::guard)): within the turn (below the limit, within [`TURN`]), to a
    /// waiter that wants no token with the grant and the same watchdog-renewed lease as the
    /// hold it takes over. `None` leaves the queue as it was.
    pub(crate) fn choose_in_memory(
        &self,
        key: &str,
        streak: Streak,
        lease: Duration,
    ) -> Option<Next> {
        if streak.count >= self.limit || streak.since.is_some_and(|t| t.elapsed() >= TURN) {
            return None;
        }
        // Within the turn, decided above: a `Next` dropped here would leave its waiter chosen
        // but never told.
        self.choose_if(key, streak, |ticket| {
            !ticket.wants.token && ticket.wants.renewed && ticket.lease == lease
        })
    }

    /// Like [`HandOffs::choose`], but only if the first waiter `fits` (else the queue is left
    /// as it was).
    fn choose_if(&self, key: &str, streak: Streak, fits: impl Fn(&Ticket) -> bool) -> Option<Next> {
        let mut queues = sync::lock(&self.queues);
        let queue = &mut queues.get_mut(key)?.tickets;
        let mut next = None;
        while let Some(ticket) = queue.pop_front() {
            let mut place = sync::lock(&ticket.slot);
            if matches!(place.slot, Slot::Waiting | Slot::Retry) {
                if !fits(&ticket) {
                    drop(place);
                    queue.push_front(ticket);
                    return None;
                }
                place.slot = Slot::Chosen;
                drop(place);
                let now = Instant::now();
                let since = streak.since.unwrap_or(now);
                next = Some(Next {
                    ticket,
                    // Stays at the limit: from there on every release asks whether others wait.
                    streak: Streak {
                        count: (streak.count + 1).min(self.limit),
                        since: Some(since),
                    },
                    at_limit: streak.count >= self.limit || now - since >= TURN,
                });
                break;
            }
        }
        if queue.is_empty() {
            queues.remove(key);
        }
        next
    }

    /// Tells the chosen waiter the outcome: `Some` with the grant when the release handed it
    /// the lock, `None` when it did not. Returns the grant to release when the waiter is gone
    /// and nobody will take it.
    pub(crate) fn deliver(&self, key: &str, next: Next, granted: Option<Grant>) -> Option<Orphan> {
        let ticket = next.ticket;
        let Some(grant) = granted.map(|grant| Grant {
            streak: next.streak,
            ..grant
        }) else {
            // Back to the head of the queue, unless the waiter left meanwhile. The queue is
            // locked first, as everywhere.
            let mut queues = sync::lock(&self.queues);
            let mut place = sync::lock(&ticket.slot);
            if matches!(place.slot, Slot::Left { .. }) {
                return None;
            }
            if self.limit > 0 {
                queues
                    .entry(key.to_owned())
                    .or_default()
                    .tickets
                    .push_front(ticket.clone());
            }
            place.set(Slot::Retry);
            return None;
        };
        let mut place = sync::lock(&ticket.slot);
        if let Slot::Left { holds } = place.slot {
            return match grant.inherited {
                // Left, whether holding the lock by an attempt of its own or not: the hold
                // passed in memory is the releaser's owner id, which nobody takes now.
                Some(inherited) => Some(Orphan {
                    owner: inherited.owner,
                    lease: ticket.lease,
                    streak: grant.streak,
                    acquisition: Some(inherited.acquisition),
                }),
                None => (!holds).then(|| Orphan {
                    owner: ticket.owner.clone(),
                    lease: ticket.lease,
                    streak: grant.streak,
                    acquisition: None,
                }),
            };
        }
        place.set(Slot::Granted(grant));
        None
    }

    /// Takes out a ticket that left (its slot says so): at once from the front, else lazily
    /// (see [`Queue`]).
    fn remove(&self, key: &str, ticket: &Arc<Ticket>) {
        let mut queues = sync::lock(&self.queues);
        let Some(queue) = queues.get_mut(key) else {
            return;
        };
        let left = |t: &Arc<Ticket>| matches!(sync::lock(&t.slot).slot, Slot::Left { .. });
        if queue
            .tickets
            .front()
            .is_some_and(|t| Arc::ptr_eq(t, ticket))
        {
            queue.tickets.pop_front();
        } else {
            queue.left += 1;
            if queue.left * 2 > queue.tickets.len() {
                queue.tickets.retain(|t| !left(t));
                queue.left = 0;
            }
        }
        // Whoever left behind the first is gone too once it is at the front.
        while queue.tickets.front().is_some_and(left) {
            queue.tickets.pop_front();
        }
        if queue.tickets.is_empty() {
            queues.remove(key);
        }
    }

    /// Waiters queued, over every lock (for tests and stats).
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        sync::lock(&self.queues)
            .values()
            .map(|queue| queue.tickets.len())
            .sum()
    }
}

impl Ticket {
    /// Resolves once a release delivered an outcome to this waiter.
    pub(crate) fn delivered(&self) -> impl Future<Output = Delivery> + '_ {
        std::future::poll_fn(|cx| {
            let mut place = sync::lock(&self.slot);
            match place.slot {
                Slot::Granted(_) => {
                    let Slot::Granted(grant) =
                        std::mem::replace(&mut place.slot, Slot::Left { holds: true })
                    else {
                        unreachable!("matched above")
                    };
                    Poll::Ready(Delivery::Granted(grant))
                }
                Slot::Retry => {
                    place.slot = Slot::Waiting;
                    Poll::Ready(Delivery::Retry)
                }
                Slot::Waiting | Slot::Chosen | Slot::Left { .. } => {
                    match &mut place.waker {
                        Some(w) if w.will_wake(cx.waker()) => {}
                        waker => *waker = Some(cx.waker().clone()),
                    }
                    Poll::Pending
                }
            }
        })
    }
}

/// Releases `owner`'s hold on `names` and hands the lock to `next`, and tells `next` how it
/// went. Returns the release's reply and a grant nobody took (to release).
///
/// Cancellation-safe: dropped before the reply, the waiter is told to try on its own.
pub(crate) async fn release_to(
    backend: &dyn Backend,
    handoffs: &HandOffs,
    names: &LockNames,
    owner: &str,
    next: Next,
    retention_ms: u64,
) -> (RedisResult<Acked<Reply>>, Option<Orphan>) {
    struct Undecided<'a> {
        handoffs: &'a HandOffs,
        key: &'a str,
        next: Option<Next>,
    }
    impl Drop for Undecided<'_> {
        fn drop(&mut self) {
            if let Some(next) = self.next.take() {
                self.handoffs.deliver(self.key, next, None);
            }
        }
    }
    let sent = Instant::now();
    let mut undecided = Undecided {
        handoffs,
        key: &names.key,
        next: Some(next),
    };
    let hand_off = undecided
        .next
        .as_ref()
        .map(|next| next.hand_off(retention_ms));
    let reply = backend.release(names, owner, hand_off).await;
    let mut next = undecided.next.take().expect("taken only here");
    let granted = match &reply {
        Ok(Acked {
            reply: Reply::HandedOff(token),
            shortfall: None,
        }) => {
            if next.at_limit {
                // Handed over at the limit: no other process waited (else the lock would have
                // fallen free), so a new turn begins.
                next.streak = Streak {
                    count: 1,
                    since: Some(sent),
                };
            }
            Some(Grant {
                token: *token as u64,
                sent,
                streak: next.streak,
                inherited: None,
            })
        }
        _ => None,
    };
    let handed_over = granted.is_some();
    let orphan = handoffs.deliver(&names.key, next, granted);
    if handed_over {
        tracing::trace!(lock = %names.name, "handed over to a local waiter");
    }
    (reply, orphan)
}

#[cfg(test)]
mod tests {
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
        let prelude = include_str!("script/prelude.lua");
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
}
