//! Per-acquisition options.

use std::time::Duration;

use crate::LockError;

/// The longest lease, maximum hold time, watchdog timeout and fencing-counter retention
/// accepted: 10 years (365-day years). Longer ones are [`LockError::InvalidConfig`]; Redis
/// could not represent some of them, and a lock meant to be held "forever" should be renewed
/// by the watchdog instead.
pub const MAX_LEASE: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The shortest explicit lease accepted. The holder is told of the loss a safety margin
/// ([`loss_margin`]) before the lease ends, so a shorter lease would be lost almost at once.
pub(crate) const MIN_LEASE: Duration = Duration::from_millis(10);

/// How long before a lease could run out in Redis its loss is declared: a tenth of it, at
/// least 5 ms (at most half of it). Covers the time between the watchdog's timer and the code
/// under the lock noticing, so a rival cannot hold the lock before the holder is told.
pub(crate) fn loss_margin(lease: Duration) -> Duration {
    (lease / 10).max(Duration::from_millis(5)).min(lease / 2)
}

/// A duration in whole milliseconds, rounded up (what Redis is sent as a lease).
pub(crate) fn ceil_millis(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

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
    /// How long to wait for a busy lock; `None` waits indefinitely (as does a wait too long to
    /// represent, such as `Duration::MAX`), `Some(ZERO)` makes exactly one attempt.
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

    /// Hold for this fixed lease, without renewal. [`LockGuard::lost`](crate::LockGuard::lost)
    /// resolves a safety margin before it runs out in Redis (a tenth of it, at least 5 ms), so
    /// the holder is told before a rival can take the lock. At least 10 ms and at most
    /// [`MAX_LEASE`]; Redis is sent the lease rounded up to whole milliseconds.
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
            && !(MIN_LEASE..=MAX_LEASE).contains(&lease)
        {
            return Err(LockError::InvalidConfig(format!(
                "lease must be between {MIN_LEASE:?} and {MAX_LEASE:?}, got {lease:?}"
            )));
        }
        if let Some(max) = self.max_hold
            && (max.is_zero() || max > MAX_LEASE)
        {
            return Err(LockError::InvalidConfig(format!(
                "max_hold must be greater than zero and at most {MAX_LEASE:?}, got {max:?}"
            )));
        }
        Ok(())
    }
}
