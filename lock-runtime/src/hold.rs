//! A hold: the state of one outermost acquisition (`Held`), shared by its guards, the
//! reentrancy scope and the watchdog, and its loss signal.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::Reply;
use crate::keys::LockNames;
use crate::metrics::{self, Group};
use crate::{LockClient, LockError, LossReason};

/// Resolves once a held lock is lost; shared by a guard, its re-entrant guards and the watchdog.
///
/// Every look is clock-based as well: the signal knows the hold's local deadline (the lease
/// confirmed so far, counted from when its request was *sent*, minus the safety margin), and a
/// look after it declares the loss itself, even when the watchdog task has not run yet (a
/// process resumed after `SIGSTOP`, a starved runtime). The watchdog arms the deadline when the
/// hold is registered and moves it forward at every confirmed renewal.
///
/// One per held lock, so it is kept small: the reason and the deadline share one atomic word
/// (a look is one atomic read and a clock read), the name is set once, and one `Notify` serves
/// the tasks waiting in [`LockGuard::lost`](crate::LockGuard::lost) (a `watch` channel would
/// carry nine `Notify`s, about 300 bytes more per held lock).
pub(crate) struct LossSignal {
    /// Bits 0–3: the declared reason (0: none yet); bits 4–7: the reason a passed deadline is
    /// declared with; bits 8–63: the deadline in microseconds since `base` (all ones: none).
    state: AtomicU64,
    /// What the deadline is counted from.
    base: Instant,
    /// The names of the hold, for the log line of a loss found by a look (set when armed).
    names: OnceLock<Arc<LockNames>>,
    declared: Notify,
    /// The `group` label of the loss's metric.
    group: Group,
}

const REASON_BITS: u64 = 0x0f;
const EXPIRY_SHIFT: u32 = 4;
const DEADLINE_SHIFT: u32 = 8;
/// No deadline (not armed, or too far away to represent: the watchdog declares it).
const NO_DEADLINE: u64 = u64::MAX >> DEADLINE_SHIFT;

fn code(reason: LossReason) -> u64 {
    match reason {
        LossReason::LeaseExpired => 1,
        LossReason::Deleted => 2,
        LossReason::RenewalFailed => 3,
        LossReason::MaxHoldExceeded => 4,
        LossReason::Released => 5,
        LossReason::QuorumLost => 6,
    }
}

fn reason_of(code: u64) -> Option<LossReason> {
    Some(match code {
        1 => LossReason::LeaseExpired,
        2 => LossReason::Deleted,
        3 => LossReason::RenewalFailed,
        4 => LossReason::MaxHoldExceeded,
        5 => LossReason::Released,
        6 => LossReason::QuorumLost,
        _ => return None,
    })
}

impl LossSignal {
    pub(crate) fn new(group: Group) -> LossSignal {
        LossSignal {
            state: AtomicU64::new(NO_DEADLINE << DEADLINE_SHIFT),
            base: Instant::now(),
            names: OnceLock::new(),
            declared: Notify::new(),
            group,
        }
    }

    /// Sets the local deadline (`None`: already past) and the reason a look after it declares
    /// (an expired lease, or a renewal not confirmed in time). Called once, by the watchdog.
    pub(crate) fn arm(
        &self,
        names: &Arc<LockNames>,
        deadline: Option<Instant>,
        expiry: LossReason,
    ) {
        let _ = self.names.set(names.clone());
        let micros = self.micros(deadline);
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s & REASON_BITS == 0)
                    .then_some((micros << DEADLINE_SHIFT) | (code(expiry) << EXPIRY_SHIFT))
            });
    }

    /// Moves the local deadline forward (a confirmed renewal); never back.
    pub(crate) fn extend(&self, deadline: Instant) {
        let micros = self.micros(Some(deadline));
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                let current = s >> DEADLINE_SHIFT;
                (s & REASON_BITS == 0 && current != NO_DEADLINE && micros > current)
                    .then_some((micros << DEADLINE_SHIFT) | (s & !(NO_DEADLINE << DEADLINE_SHIFT)))
            });
    }

    /// The deadline in whole microseconds since `base`, rounded down (a loss is never reported
    /// late); 0 when it is before `base`.
    fn micros(&self, deadline: Option<Instant>) -> u64 {
        let Some(deadline) = deadline else { return 0 };
        let micros = deadline.saturating_duration_since(self.base).as_micros();
        u64::try_from(micros).map_or(NO_DEADLINE, |m| m.min(NO_DEADLINE - 1))
    }

    /// Records the first reason; later ones are ignored.
    pub(crate) fn declare(&self, name: &str, reason: LossReason) {
        let set = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s & REASON_BITS == 0).then_some(s | code(reason))
            });
        if set.is_err() {
            return;
        }
        // Counted before anyone waiting for the loss is woken.
        if reason != LossReason::Released {
            metrics::lost(&self.group, reason);
        }
        self.declared.notify_waiters();
        if reason != LossReason::Released {
            tracing::warn!(lock = name, %reason, "lock lost");
        }
    }

    /// The loss, if the hold is lost: declared (by the watchdog, a release, a renewal that
    /// found the lock gone) or found here, by the clock, past the local deadline (then declared
    /// now). `Err` with the deadline to wake at while it is held.
    fn look(&self) -> Result<LossReason, Option<Instant>> {
        let s = self.state.load(Ordering::Acquire);
        if let Some(reason) = reason_of(s & REASON_BITS) {
            return Ok(reason);
        }
        let micros = s >> DEADLINE_SHIFT;
        if micros == NO_DEADLINE {
            return Err(None);
        }
        let deadline = self.base + Duration::from_micros(micros);
        if Instant::now() < deadline {
            return Err(Some(deadline));
        }
        let expiry =
            reason_of((s >> EXPIRY_SHIFT) & REASON_BITS).unwrap_or(LossReason::LeaseExpired);
        let name = self.names.get().map_or("", |n| n.name.as_str());
        self.declare(name, expiry);
        // The first declaration wins (the watchdog's may have come in between).
        Ok(reason_of(self.state.load(Ordering::Acquire) & REASON_BITS).unwrap_or(expiry))
    }

    /// The local deadline while the hold is neither declared lost nor past it: where a look
    /// declares the loss (`None` once lost, or while no deadline is armed).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match self.look() {
            Err(deadline) => deadline,
            Ok(_) => None,
        }
    }

    /// Whether (and why) the hold is lost; clock-based: see [`LossSignal`].
    pub(crate) fn get(&self) -> Option<LossReason> {
        self.look().ok()
    }

    /// Resolves once the hold is lost: woken by a declaration, or by its own timer at the local
    /// deadline, and looking again at every poll (so a future polled after a pause reports the
    /// loss at once, whatever its timer's state).
    pub(crate) async fn wait(&self) -> LossReason {
        loop {
            // Registered before the look, so a declaration between the two still wakes us.
            let declared = self.declared.notified();
            tokio::pin!(declared);
            declared.as_mut().enable();
            let deadline = match self.look() {
                Ok(reason) => return reason,
                Err(deadline) => deadline,
            };
            let timer = deadline.map(tokio::time::sleep_until);
            tokio::pin!(timer);
            let found = std::future::poll_fn(|cx| {
                if let Ok(reason) = self.look() {
                    return Poll::Ready(Some(reason));
                }
                if declared.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
                if let Some(timer) = timer.as_mut().as_pin_mut()
                    && timer.poll(cx).is_ready()
                {
                    // The deadline may have moved meanwhile: look again with a new timer.
                    return Poll::Ready(None);
                }
                Poll::Pending
            })
            .await;
            if let Some(reason) = found {
                return reason;
            }
        }
    }
}

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
    pub(crate) streak: crate::handoff::Streak,
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
                // (`pass_in_memory` declares `Released` before the next task is woken), so a
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
