//! A hold's loss signal (`LossSignal`): how a guard, its re-entrant guards and the watchdog
//! learn that a held lock is lost, declared or found by the clock. A leaf: the watchdog arms it,
//! a hold reads it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::LossReason;
use crate::keys::LockNames;
use crate::metrics::{self, Group};

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
