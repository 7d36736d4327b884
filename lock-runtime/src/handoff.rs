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
//! that waiter. A token it asks for later comes from Redis as for any holder. A semaphore's
//! permits pass the same way, to the first waiter for as many permits (the hold in Redis is
//! the releasing owner id's member in the holders' set); a release that cannot pass them (the
//! end of a turn, a first waiter for more) frees them through Redis as usual, which wakes the
//! waiters of every process, this client's included: a semaphore has no hand-off through Redis.
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
use crate::keys::{LockNames, Mode};
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wants {
    /// A fencing token with the grant (a fenced acquisition): the hand-off must go through
    /// Redis, which issues it.
    pub(crate) token: bool,
    /// The watchdog renews the hold (no explicit lease).
    pub(crate) renewed: bool,
    /// What the hold is taken in: a hold passes in memory only to a waiter for the same
    /// (a semaphore's permits: as many as the hold carries).
    pub(crate) mode: Mode,
}

#[cfg(test)]
impl Default for Wants {
    /// A waiter for a mutex, without a token, with a lease of its own.
    fn default() -> Wants {
        Wants {
            token: false,
            renewed: false,
            mode: Mode::Exclusive,
        }
    }
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
    /// (`Held::pass_in_memory`): within the turn (below the limit, within [`TURN`]), to a
    /// waiter that wants no token with the grant, the same watchdog-renewed lease and the same
    /// `mode` (as many permits) as the hold it takes over. `None` leaves the queue as it was.
    pub(crate) fn choose_in_memory(
        &self,
        key: &str,
        streak: Streak,
        lease: Duration,
        mode: Mode,
    ) -> Option<Next> {
        if self.turn_over(streak) {
            return None;
        }
        // Within the turn, decided above: a `Next` dropped here would leave its waiter chosen
        // but never told.
        self.choose_if(key, streak, |ticket| {
            !ticket.wants.token
                && ticket.wants.renewed
                && ticket.lease == lease
                && ticket.wants.mode == mode
        })
    }

    /// Whether the first task of this client waiting for the lock at `key` waits in `mode`
    /// (for as many permits).
    pub(crate) fn first_wants(&self, key: &str, mode: Mode) -> bool {
        sync::lock(&self.queues)
            .get(key)
            .and_then(|queue| queue.tickets.front())
            .is_some_and(|ticket| ticket.wants.mode == mode)
    }

    /// Whether a release of the lock `names` by a hold of turn `streak` ends this client's turn
    /// of passing it on in memory while a task of this client still waits for it (the turn
    /// reached the limit or lasted [`TURN`]), for the kinds without a hand-off through Redis (a
    /// semaphore): such a release lets the clients waiting elsewhere take their turns first
    /// ([`Backend::release_ending_turn`]), as a mutex's hand-off at the limit does.
    pub(crate) fn ends_turn(&self, names: &LockNames, streak: Streak) -> bool {
        self.limit > 0
            && !names.family().hands_off()
            && names.scheme.passes_in_memory()
            && self.turn_over(streak)
            && sync::lock(&self.queues).contains_key(&names.key)
    }

    /// Whether the turn `streak` is over: the lock was passed on `limit` times in a row, or
    /// for [`TURN`] since the turn's first hand-over.
    fn turn_over(&self, streak: Streak) -> bool {
        streak.count >= self.limit || streak.since.is_some_and(|t| t.elapsed() >= TURN)
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

/// Releases `owner`'s hold on `names` (of turn `streak`) without handing it on: at the end of
/// this client's turn of passing it in memory ([`HandOffs::ends_turn`]), the clients waiting
/// elsewhere go first.
pub(crate) async fn release_plainly(
    backend: &dyn Backend,
    handoffs: &HandOffs,
    names: &LockNames,
    owner: &str,
    streak: Streak,
    retention_ms: u64,
) -> RedisResult<Acked<Reply>> {
    if handoffs.ends_turn(names, streak) {
        let yield_ms = YIELD.as_millis() as u64;
        backend
            .release_ending_turn(names, owner, yield_ms, retention_ms)
            .await
    } else {
        backend.release(names, owner, None).await
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
mod tests;
