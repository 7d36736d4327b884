//! What a waiter keeps while it waits: its place (in the client's hand-off queue, and in Redis
//! for the families whose waiters hold one there) and the chain of wake-ups it may owe the
//! next waiter.

use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::Acquire;
use crate::handoff::{Delivery, Ticket, Wants};
use crate::releaser::ReleaseJob;

/// The wake-ups a waiter received: one it still owes the next waiter if it stops before its
/// attempt decided anything (the baton), the last message it passed on, and when the last one
/// arrived (a hand-over's start, for the metrics).
#[derive(Default)]
pub(super) struct WakeChain<'s> {
    pub(super) baton: Baton<'s>,
    /// The channel's message count when this waiter last passed a wake-up on.
    pub(super) passed_on: Option<u64>,
    pub(super) woken_at: Option<Instant>,
}

impl<'s> WakeChain<'s> {
    /// An unlock message woke this waiter.
    pub(super) fn woken(&mut self, notify: &'s Notify) {
        self.baton.0 = Some(notify);
        self.woken_at = Some(Instant::now());
    }
}

/// A waiter's place: in the client's hand-off queue (a mutex, a semaphore), and in Redis for the families
/// whose waiters hold one there (a fair lock's queue, a waiting writer's claim).
///
/// Leaving without taking a hand-off that arrived (cancelled, timed out, failed) releases that
/// grant in the background, or passes it on to the next waiter. Leaving without the lock
/// removes the place in Redis in the background, at once, so a waiter that gives up never
/// holds up the others.
pub(super) struct Place<'a> {
    acquire: &'a Acquire<'a>,
    ticket: Option<Arc<Ticket>>,
    /// The waiter's attempts keep a place in Redis.
    pub(super) in_redis: bool,
    /// Set just before the waiter returns holding the lock.
    pub(super) holds: bool,
}

impl<'a> Place<'a> {
    pub(super) fn join(acquire: &'a Acquire<'a>) -> Place<'a> {
        let ticket = acquire.queues_locally().then(|| {
            acquire.client.inner.handoffs.join(
                &acquire.names.key,
                &acquire.owner,
                acquire.lease,
                Wants {
                    token: acquire.fenced,
                    renewed: acquire.opts.lease.is_none(),
                    mode: acquire.mode,
                },
            )
        });
        Place {
            acquire,
            ticket,
            in_redis: acquire.holds_a_place(),
            holds: false,
        }
    }

    /// The place of a first attempt, made before any hand-off queue is joined.
    pub(super) fn without_ticket(acquire: &'a Acquire<'a>) -> Place<'a> {
        Place {
            acquire,
            ticket: None,
            in_redis: acquire.holds_a_place(),
            holds: false,
        }
    }

    /// A hand-off's outcome; pending for the families without local hand-off.
    pub(super) async fn delivered(&self) -> Delivery {
        match &self.ticket {
            Some(ticket) => ticket.delivered().await,
            None => std::future::pending().await,
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let acquire = self.acquire;
        let inner = &acquire.client.inner;
        if let Some(ticket) = &self.ticket
            && let Some(grant) = inner.handoffs.leave(&acquire.names.key, ticket, self.holds)
        {
            tracing::debug!("left with a hand-off not taken; releasing it in the background");
            let job = match &grant.inherited {
                // Passed in memory: the hold in Redis is the releaser's, renewed by its entry.
                Some(inherited) => {
                    inner.watchdog.deregister(inherited.acquisition);
                    ReleaseJob::new(
                        acquire.names,
                        &inherited.owner,
                        Instant::now() + acquire.lease,
                    )
                }
                None => ReleaseJob::new(acquire.names, &acquire.owner, grant.sent + acquire.lease),
            };
            inner.releaser.submit(job.handing_off(grant.streak));
        }
        if self.in_redis && !self.holds {
            // Releasing an owner that holds nothing removes its place (and wakes whoever
            // it held up).
            tracing::debug!("stopped waiting; leaving the queue in the background");
            let job = ReleaseJob::new(
                acquire.names,
                &acquire.owner,
                Instant::now() + acquire.names.scheme.place_outlives(),
            );
            inner.releaser.submit(job);
        }
    }
}

/// Passes a consumed unlock notification on to the next local waiter if this waiter is
/// cancelled or fails before its attempt decided anything, so a wake-up is never swallowed.
#[derive(Default)]
pub(super) struct Baton<'a>(pub(super) Option<&'a Notify>);

impl Drop for Baton<'_> {
    fn drop(&mut self) {
        if let Some(notify) = self.0 {
            notify.notify_one();
        }
    }
}
