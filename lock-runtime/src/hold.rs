//! A hold: the state of one outermost acquisition (`Held`), shared by its guards, the
//! reentrancy scope and the watchdog; and how a hold passes in memory between the tasks of one
//! client, both halves of it side by side.
//!
//! **Passing in memory.** A release that finds a task of the same client waiting for the lock
//! may pass it on without a round trip ([`Held::pass_in_memory`]): the hold in Redis stays as it
//! is (its owner id, its lease) and the waiting task takes it over ([`Held::take_over`]). The
//! two halves must agree, step for step:
//!
//! | releasing task (`pass_in_memory`) | waiting task (`take_over`) |
//! |---|---|
//! | picks the first waiter that fits (`HandOffs::choose_in_memory`) | waits in its queue (`Ticket::delivered`) |
//! | moves the watchdog entry under a signal of its own (`Watchdog::hand_over`) | moves that entry under its own signal (`Watchdog::adopt`) |
//! | declares its own hold `Released` | |
//! | tells the waiter (`HandOffs::deliver`, with [`Inherited`]) | takes the owner id and the entry as they are |
//!
//! The old hold is declared `Released` before the waiter is woken: a token request of the old
//! hold still in flight is answered `Lost` ([`Held::fencing_token`]), never with a token Redis
//! issues to the same owner id for the next holder. The queue itself and the hand-off through
//! Redis are `handoff.rs`'s.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Reply;
use crate::handoff::{Grant, Inherited, Streak};
use crate::keys::LockNames;
use crate::metrics::{self, Group};
use crate::releaser::ReleaseJob;
use crate::signal::LossSignal;
use crate::stats::Counters;
use crate::{LockClient, LockError, LossReason};

/// The state of one outermost acquisition, shared with its re-entrant guards. Counted in
/// `lock_held` from its making (`metrics::hold_started`) to its drop.
pub(crate) struct Held {
    pub(crate) client: LockClient,
    pub(crate) names: Arc<LockNames>,
    pub(crate) owner: Arc<str>,
    pub(crate) acquisition: u64,
    /// The fencing token; 0 until one is issued (a mutex taken without one gets it on demand,
    /// [`Held::fencing_token`]).
    pub(crate) token: AtomicU64,
    pub(crate) lease: Duration,
    /// The turn of local hand-overs that led to this hold (count 0: taken by its own attempt).
    pub(crate) streak: Streak,
    pub(crate) signal: Arc<LossSignal>,
    /// The `group` label of its metrics.
    pub(crate) group: Group,
    /// When the grant's request was sent (the hold time counts from there).
    pub(crate) granted: Instant,
}

impl Held {
    /// The fencing token, if one was issued.
    pub(crate) fn issued_token(&self) -> Option<u64> {
        match self.token.load(Ordering::Acquire) {
            0 => None,
            token => Some(token),
        }
    }

    /// The fencing token: the one issued with the grant or asked for before, else one issued
    /// now by Redis (one round trip), only while this owner holds the lock. A hold known to be
    /// lost (by the clock too: see [`LossSignal`]) gets [`LockError::Lost`] without a round
    /// trip; one that Redis finds no longer ours is declared lost.
    pub(crate) async fn fencing_token(&self) -> Result<u64, LockError> {
        if let Some(reason) = self.signal.get() {
            return Err(self.lost(reason));
        }
        if let Some(token) = self.issued_token() {
            return Ok(token);
        }
        let inner = &self.client.inner;
        let retention_ms = inner.config.fence_retention.as_millis() as u64;
        let span = tracing::debug_span!(
            "lock.fencing_token",
            lock = %self.names.name,
            otel.kind = "client",
            db.system.name = "redis",
            db.operation.name = inner.backend.script_command()
        );
        let reply = tracing::Instrument::instrument(
            inner.backend.token(&self.names, &self.owner, retention_ms),
            span,
        )
        .await
        .map_err(|e| LockError::backend("fencing_token", e))?;
        match reply.reply {
            Reply::Done(token) if token > 0 => {
                // Issued while this owner id held the lock (checked by Redis in the same
                // step). The owner id outlives this hold when it passes in memory
                // (`Held::pass_in_memory` declares `Released` before the next task is woken), so a
                // hold that ended while the request was out, for any reason, `Released`
                // included, may have been served the next holder's token: never handed out,
                // never cached. Checked before caching: a token kept here was issued before
                // the hold ended.
                if let Some(reason) = self.signal.get() {
                    return Err(self.lost(reason));
                }
                // A concurrent call may have cached another, earlier token: both are valid;
                // keep one.
                let token = token as u64;
                Ok(
                    match self
                        .token
                        .compare_exchange(0, token, Ordering::AcqRel, Ordering::Acquire)
                    {
                        Ok(_) => token,
                        Err(first) => first,
                    },
                )
            }
            Reply::Foreign(found) => Err(LockError::ForeignData {
                key: self.names.key.clone(),
                found,
            }),
            _ => {
                // Not ours any more: expired or deleted behind the watchdog's back.
                self.signal.declare(&self.names.name, LossReason::Deleted);
                Err(self.lost(self.signal.get().unwrap_or(LossReason::Deleted)))
            }
        }
    }

    /// The releasing half: passes the lock to the first task of this client waiting for it, in
    /// memory, without a round trip. The hold in Redis stays as it is (its owner id, its lease,
    /// renewed by the watchdog throughout) and the waiting task takes it over
    /// ([`Held::take_over`]). Only for a mutex, or a semaphore's permits passed to a waiter for
    /// as many, in this crate's layout, held without a fencing token issued in Redis's own
    /// step for the next owner (the waiter wants none), within the turn's bound, while the
    /// hold is well within its lease. Returns whether it passed (this hold is then declared
    /// `Released`, before the next task is woken); if not, the caller releases as usual.
    pub(crate) fn pass_in_memory(&self) -> bool {
        let inner = &self.client.inner;
        if !self.names.scheme.passes_in_memory() || self.signal.get().is_some() {
            return false;
        }
        let mode = self.names.mode_of(&self.owner);
        let Some(next) =
            inner
                .handoffs
                .choose_in_memory(&self.names.key, self.streak, self.lease, mode)
        else {
            return false;
        };
        if !inner.watchdog.hand_over(self.acquisition, &self.group) {
            // Too close to its deadline (or lost): the waiter looks for itself.
            inner.handoffs.deliver(&self.names.key, next, None);
            return false;
        }
        // This hold is over before the next task can hold: a token request of this hold still
        // in flight (a `TokenHandle`, a re-entrant guard in another task) is answered `Lost`,
        // never with a token Redis issues to the same owner id for the next holder
        // (`Held::fencing_token`).
        self.signal.declare(&self.names.name, LossReason::Released);
        let grant = Grant {
            token: 0,
            sent: Instant::now(),
            streak: next.streak(),
            inherited: Some(Inherited {
                owner: self.owner.clone(),
                acquisition: self.acquisition,
            }),
        };
        if let Some(orphan) = inner.handoffs.deliver(&self.names.key, next, Some(grant)) {
            // The waiter left just now: the hold in Redis is released in the background.
            if let Some(id) = orphan.acquisition {
                inner.watchdog.deregister(id);
            }
            inner
                .releaser
                .submit(ReleaseJob::orphan(&self.names, orphan));
        }
        tracing::trace!(lock = %self.names.name, "passed in memory to a local waiter");
        true
    }

    /// The waiting half: takes over the hold `grant` passed in memory
    /// ([`Held::pass_in_memory`]), Redis's hold (owner id, lease, watchdog entry) as it is,
    /// without a token yet, if it is still live. `None` when it ended before it was taken (or
    /// `grant` was not passed in memory): the waiter looks for itself.
    pub(crate) fn take_over(
        client: &LockClient,
        names: &Arc<LockNames>,
        lease: Duration,
        max_hold: Option<Duration>,
        group: &Group,
        grant: Grant,
    ) -> Option<Held> {
        let passed = grant.inherited?;
        let inner = &client.inner;
        let signal = Arc::new(LossSignal::new(group.clone()));
        let max_hold_until = max_hold.map(|m| Instant::now() + m);
        if !inner
            .watchdog
            .adopt(passed.acquisition, &signal, max_hold_until)
        {
            tracing::debug!("the hold passed in memory ended before it was taken");
            return None;
        }
        metrics::handed_over(group, grant.sent.elapsed());
        Counters::add(&inner.counters.acquisitions, 1);
        Counters::add(&inner.counters.handoffs, 1);
        metrics::hold_started(group);
        Some(Held {
            client: client.clone(),
            names: names.clone(),
            owner: passed.owner,
            acquisition: passed.acquisition,
            token: AtomicU64::new(0),
            lease,
            streak: grant.streak,
            signal,
            group: group.clone(),
            // This task's hold time counts from the hand-over.
            granted: Instant::now(),
        })
    }

    fn lost(&self, reason: LossReason) -> LockError {
        LockError::Lost {
            name: self.names.name.clone(),
            reason,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // The outermost guard and every re-entrant one are gone: the hold is over.
        metrics::hold_ended(&self.group, self.granted.elapsed());
    }
}
