//! Per-acquisition options.

use std::time::Duration;

use crate::LockError;

/// How to acquire a lock: how long to wait, how long to hold.
///
/// ```
/// use std::time::Duration;
/// use lock_runtime::LockOptions;
///
/// // Wait up to 5 s; the watchdog renews the lease while the guard lives.
/// let opts = LockOptions::new().wait(Duration::from_secs(5));
/// // One attempt only, and a fixed 10 s lease with no renewal.
/// let opts = LockOptions::new().wait(Duration::ZERO).lease(Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockOptions {
    /// How long to wait for a busy lock; `None` waits indefinitely, `Some(ZERO)` makes exactly
    /// one attempt.
    pub wait: Option<Duration>,
    /// A fixed lease without renewal; `None` uses the watchdog (lease = the client's watchdog
    /// timeout, renewed every third of it while the guard lives).
    pub lease: Option<Duration>,
    /// With the watchdog: stop renewing after this long and release the lock, declaring it lost
    /// ([`LossReason::MaxHoldExceeded`](crate::LossReason::MaxHoldExceeded)). Guards against a
    /// holder that is alive but stuck. `None` (the default) renews for as long as the guard lives.
    pub max_hold: Option<Duration>,
}

impl LockOptions {
    /// Wait indefinitely, watchdog lease, no maximum hold time.
    pub const fn new() -> Self {
        LockOptions {
            wait: None,
            lease: None,
            max_hold: None,
        }
    }

    /// Give up after waiting this long ([`LockError::WaitTimeout`]). `Duration::ZERO` makes a
    /// single attempt.
    pub const fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Hold for this fixed lease, without renewal; [`LockGuard::lost`](crate::LockGuard::lost)
    /// resolves when it runs out.
    pub const fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Cap the total hold time of a watchdog-renewed lock.
    pub const fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    pub(crate) fn validate(&self) -> Result<(), LockError> {
        if let Some(lease) = self.lease
            && lease < Duration::from_millis(1)
        {
            return Err(LockError::InvalidConfig(format!(
                "lease must be at least 1 ms, got {lease:?}"
            )));
        }
        if self.max_hold.is_some_and(|max| max.is_zero()) {
            return Err(LockError::InvalidConfig(
                "max_hold must be greater than zero".into(),
            ));
        }
        Ok(())
    }
}
