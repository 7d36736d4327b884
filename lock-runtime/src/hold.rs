//! A hold: the state of one outermost acquisition (`Held`), shared by its guards, the
//! reentrancy scope and the watchdog, and its loss signal.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::metrics::{self, Group};
use crate::names::LockNames;
use crate::{LockClient, LossReason};

/// Resolves once a held lock is lost; shared by a guard, its re-entrant guards and the watchdog.
pub(crate) struct LossSignal {
    tx: watch::Sender<Option<LossReason>>,
    /// The `group` label of the loss's metric.
    group: Group,
}

impl LossSignal {
    pub(crate) fn new(group: Group) -> LossSignal {
        LossSignal {
            tx: watch::Sender::new(None),
            group,
        }
    }

    /// Records the first reason; later ones are ignored.
    pub(crate) fn declare(&self, name: &str, reason: LossReason) {
        let first = self.tx.send_if_modified(|v| {
            if v.is_none() {
                // Counted before anyone waiting for the loss is woken.
                if reason != LossReason::Released {
                    metrics::lost(&self.group, reason);
                }
                *v = Some(reason);
                true
            } else {
                false
            }
        });
        if first && reason != LossReason::Released {
            tracing::warn!(lock = name, %reason, "lock lost");
        }
    }

    pub(crate) fn get(&self) -> Option<LossReason> {
        *self.tx.borrow()
    }

    pub(crate) async fn wait(&self) -> LossReason {
        let mut rx = self.tx.subscribe();
        // Copy the reason out before any other await: the borrow guard is not `Send`.
        let reason = rx.wait_for(Option::is_some).await.map(|v| *v);
        match reason {
            Ok(reason) => reason.unwrap_or(LossReason::Released),
            // The sender lives in `self`; it cannot close while we borrow it.
            Err(_) => std::future::pending().await,
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
    /// Local hand-overs in a row that led to this hold (0: taken by its own attempt).
    pub(crate) streak: u32,
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
