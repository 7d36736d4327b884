//! A hold: the state of one outermost acquisition (`Held`), shared by its guards, the
//! reentrancy scope and the watchdog, and its loss signal.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::keys::LockNames;
use crate::metrics::{self, Group};
use crate::{LockClient, LossReason};

/// Resolves once a held lock is lost; shared by a guard, its re-entrant guards and the watchdog.
///
/// One per held lock, so it is kept small: the first reason in a `OnceLock` and one `Notify`
/// for the tasks waiting in [`LockGuard::lost`](crate::LockGuard::lost) (a `watch` channel
/// would carry nine `Notify`s, about 300 bytes more per held lock).
pub(crate) struct LossSignal {
    reason: OnceLock<LossReason>,
    declared: Notify,
    /// The `group` label of the loss's metric.
    group: Group,
}

impl LossSignal {
    pub(crate) fn new(group: Group) -> LossSignal {
        LossSignal {
            reason: OnceLock::new(),
            declared: Notify::new(),
            group,
        }
    }

    /// Records the first reason; later ones are ignored.
    pub(crate) fn declare(&self, name: &str, reason: LossReason) {
        if self.reason.set(reason).is_err() {
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

    pub(crate) fn get(&self) -> Option<LossReason> {
        self.reason.get().copied()
    }

    pub(crate) async fn wait(&self) -> LossReason {
        loop {
            // Registered before the look, so a declaration between the two still wakes us.
            let declared = self.declared.notified();
            tokio::pin!(declared);
            declared.as_mut().enable();
            if let Some(reason) = self.get() {
                return reason;
            }
            declared.await;
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
    pub(crate) token: u64,
    pub(crate) lease: Duration,
    /// The turn of local hand-overs that led to this hold (count 0: taken by its own attempt).
    pub(crate) streak: crate::handoff::Streak,
    pub(crate) signal: Arc<LossSignal>,
    /// The `group` label of its metrics.
    pub(crate) group: Group,
    /// When the grant's request was sent (the hold time counts from there).
    pub(crate) granted: Instant,
}

impl Drop for Held {
    fn drop(&mut self) {
        // The outermost guard and every re-entrant one are gone: the hold is over.
        metrics::hold_ended(&self.group, self.granted.elapsed());
    }
}
