//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (feature `metrics`).
//!
//! With the feature on, the client records the metrics below into whatever recorder the
//! application installed (a Prometheus exporter, for example); without a recorder they cost
//! next to nothing. With the feature off nothing is recorded and nothing is compiled in.
//!
//! | Name | Type | Labels | Meaning |
//! |---|---|---|---|
//! | [`lock_wait_seconds`](WAIT_SECONDS) | histogram | `group`, `outcome` | Time an acquisition took, from its call to its result: `outcome` is `acquired`, `timeout` ([`LockError::WaitTimeout`](crate::LockError::WaitTimeout)) or `error` (any other error). |
//! | [`lock_hold_seconds`](HOLD_SECONDS) | histogram | `group` | Time a lock was held: from its grant to the release (or drop) of its outermost guard. |
//! | [`lock_handover_seconds`](HANDOVER_SECONDS) | histogram | `group` | Hand-over latency, as a waiter sees it: for a local hand-off, from when the releasing task of the same client sent its release to when the waiting task has the lock; for a waiter woken by an unlock message (a release in another process, or a lock that fell free), from the message's arrival to the grant (the publish and its delivery are not seen here). |
//! | [`lock_acquisitions_total`](ACQUISITIONS_TOTAL) | counter | `group`, `outcome` | Acquisitions by outcome (as for `lock_wait_seconds`). |
//! | [`lock_losses_total`](LOSSES_TOTAL) | counter | `group`, `reason` | Held locks declared lost, by [`LossReason`]: `lease_expired`, `deleted`, `renewal_failed`, `max_hold_exceeded`. |
//! | [`lock_renewals_total`](RENEWALS_TOTAL) | counter | | Leases the watchdog renewed. |
//! | [`lock_renewal_failures_total`](RENEWAL_FAILURES_TOTAL) | counter | | Lease renewals that could not be confirmed (one per lock per failed round; retried). |
//! | [`lock_background_releases_total`](BACKGROUND_RELEASES_TOTAL) | counter | | Releases run by the background releaser (dropped guards, cancelled acquires). |
//! | [`lock_held`](HELD) | gauge | `group` | Locks held right now (outermost guards alive). |
//! | [`lock_waiting`](WAITING) | gauge | `group` | Tasks waiting for a busy lock right now. |
//! | [`lock_subscribed_channels`](SUBSCRIBED_CHANNELS) | gauge | | Unlock channels the pub/sub connections are subscribed to right now. |
//!
//! Every client of the process records into the same metrics.
//!
//! # The `group` label
//!
//! A label never carries the full lock name: names are unbounded (one per order, per user…)
//! and every distinct label value is a new time series. The `group` is:
//!
//! - the group given with [`Lock::group`](crate::Lock::group) (`#[distributed_lock]` and
//!   lock-tower's layers give their key template, such as `stock:<id>`);
//! - otherwise the lock name's text before its first `:` when that is a word of ASCII letters,
//!   `_` and `-` (at most 64): `stock:42` → `stock`, `user_cart:7` → `user_cart`;
//! - `other` for a name without a `:`, one that starts with it, or one whose text before it
//!   has anything else (digits, braces, …: `7:stock`, `{user:7}:cart`, `order-123:pay`), as that
//!   is likely variable data, one time series per user or order.
//!
//! Only acquisitions from Redis are recorded: a re-entrant acquisition inside a guard's scope
//! is not, nor an acquisition refused before it started (an invalid name or options), nor one
//! whose future was dropped before it finished.

#[cfg(feature = "metrics")]
use std::sync::Arc;
use std::time::Duration;

use crate::LossReason;

/// Histogram `lock_wait_seconds{group, outcome}`: how long acquisitions took, by outcome.
pub const WAIT_SECONDS: &str = "lock_wait_seconds";
/// Histogram `lock_hold_seconds{group}`: how long locks were held.
pub const HOLD_SECONDS: &str = "lock_hold_seconds";
/// Histogram `lock_handover_seconds{group}`: hand-over latency, from a local hand-off's release
/// (or the unlock message that woke the waiter) to the lock held.
pub const HANDOVER_SECONDS: &str = "lock_handover_seconds";
/// Counter `lock_acquisitions_total{group, outcome}`: acquisitions by outcome.
pub const ACQUISITIONS_TOTAL: &str = "lock_acquisitions_total";
/// Counter `lock_losses_total{group, reason}`: held locks declared lost, by reason.
pub const LOSSES_TOTAL: &str = "lock_losses_total";
/// Counter `lock_renewals_total`: leases renewed by the watchdog.
pub const RENEWALS_TOTAL: &str = "lock_renewals_total";
/// Counter `lock_renewal_failures_total`: renewals not confirmed (per lock, per round).
pub const RENEWAL_FAILURES_TOTAL: &str = "lock_renewal_failures_total";
/// Counter `lock_background_releases_total`: releases run by the background releaser.
pub const BACKGROUND_RELEASES_TOTAL: &str = "lock_background_releases_total";
/// Gauge `lock_held{group}`: locks held right now.
pub const HELD: &str = "lock_held";
/// Gauge `lock_waiting{group}`: tasks waiting for a busy lock right now.
pub const WAITING: &str = "lock_waiting";
/// Gauge `lock_subscribed_channels`: unlock channels subscribed right now.
pub const SUBSCRIBED_CHANNELS: &str = "lock_subscribed_channels";

/// The label holding the name group.
pub const LABEL_GROUP: &str = "group";
/// The label holding an acquisition's outcome: `acquired`, `timeout` or `error`.
pub const LABEL_OUTCOME: &str = "outcome";
/// The label holding a loss's reason.
pub const LABEL_REASON: &str = "reason";
/// The group of a name without a `:`, or whose text before it is not a word (see
/// [the `group` label](self#the-group-label)), and no explicit group.
pub const OTHER_GROUP: &str = "other";

/// How an acquisition ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    Timeout,
    Error,
}

impl Outcome {
    pub(crate) fn of<T>(result: &Result<T, crate::LockError>) -> Outcome {
        match result {
            Ok(_) => Outcome::Acquired,
            Err(crate::LockError::WaitTimeout { .. }) => Outcome::Timeout,
            Err(_) => Outcome::Error,
        }
    }

    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn label(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
        }
    }
}

/// A loss reason as a label value.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
fn reason_label(reason: LossReason) -> &'static str {
    match reason {
        LossReason::LeaseExpired => "lease_expired",
        LossReason::Deleted => "deleted",
        LossReason::RenewalFailed => "renewal_failed",
        LossReason::MaxHoldExceeded => "max_hold_exceeded",
        LossReason::Released => "released",
        LossReason::QuorumLost => "quorum_lost",
    }
}

/// The longest default group: a longer word before the first `:` is [`OTHER_GROUP`].
const MAX_DEFAULT_GROUP: usize = 64;

/// The default group of a lock name: its text before the first `:` when that is a word (ASCII
/// letters, `_` and `-`, at most 64 of them), else [`OTHER_GROUP`]. A prefix with digits,
/// braces or anything else is likely variable data (`7:stock`, `{user:7}:cart`,
/// `order-123:pay`), one time series per value.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) fn default_group(name: &str) -> &str {
    let word = |group: &str| {
        !group.is_empty()
            && group.len() <= MAX_DEFAULT_GROUP
            && group
                .bytes()
                .all(|b| b.is_ascii_alphabetic() || b == b'_' || b == b'-')
    };
    match name.split_once(':') {
        Some((group, _)) if word(group) => group,
        _ => OTHER_GROUP,
    }
}

/// The `group` label value of an acquisition (empty without the feature).
#[cfg(feature = "metrics")]
#[derive(Clone, Debug)]
pub(crate) struct Group(Arc<str>);

/// The `group` label value of an acquisition (empty without the feature).
#[cfg(not(feature = "metrics"))]
#[derive(Clone, Debug)]
pub(crate) struct Group;

impl Group {
    /// The explicit group if there is one, else the name's default group.
    #[cfg(feature = "metrics")]
    pub(crate) fn resolve(explicit: Option<&Arc<str>>, name: &str) -> Group {
        Group(
            explicit
                .cloned()
                .unwrap_or_else(|| default_group(name).into()),
        )
    }

    /// The explicit group if there is one, else the name's default group.
    #[cfg(not(feature = "metrics"))]
    #[inline]
    pub(crate) fn resolve(_explicit: Option<&std::sync::Arc<str>>, _name: &str) -> Group {
        Group
    }
}

#[cfg(feature = "metrics")]
mod record {
    use super::*;

    fn group(g: &Group) -> ::metrics::SharedString {
        ::metrics::SharedString::from(g.0.clone())
    }

    pub(crate) fn acquisition(g: &Group, outcome: Outcome, waited: Duration) {
        let labels = [
            (LABEL_GROUP, group(g)),
            (
                LABEL_OUTCOME,
                ::metrics::SharedString::const_str(outcome.label()),
            ),
        ];
        ::metrics::histogram!(WAIT_SECONDS, &labels).record(waited.as_secs_f64());
        ::metrics::counter!(ACQUISITIONS_TOTAL, &labels).increment(1);
    }

    pub(crate) fn hold_started(g: &Group) {
        ::metrics::gauge!(HELD, LABEL_GROUP => group(g)).increment(1.0);
    }

    pub(crate) fn hold_ended(g: &Group, held: Duration) {
        ::metrics::gauge!(HELD, LABEL_GROUP => group(g)).decrement(1.0);
        ::metrics::histogram!(HOLD_SECONDS, LABEL_GROUP => group(g)).record(held.as_secs_f64());
    }

    pub(crate) fn handed_over(g: &Group, latency: Duration) {
        ::metrics::histogram!(HANDOVER_SECONDS, LABEL_GROUP => group(g))
            .record(latency.as_secs_f64());
    }

    pub(crate) fn lost(g: &Group, reason: LossReason) {
        ::metrics::counter!(LOSSES_TOTAL, LABEL_GROUP => group(g), LABEL_REASON => reason_label(reason))
            .increment(1);
    }

    pub(crate) fn waiting(g: &Group, delta: f64) {
        ::metrics::gauge!(WAITING, LABEL_GROUP => group(g)).increment(delta);
    }

    pub(crate) fn renewals(n: u64) {
        if n > 0 {
            ::metrics::counter!(RENEWALS_TOTAL).increment(n);
        }
    }

    pub(crate) fn renewal_failures(n: u64) {
        if n > 0 {
            ::metrics::counter!(RENEWAL_FAILURES_TOTAL).increment(n);
        }
    }

    pub(crate) fn background_releases(n: u64) {
        if n > 0 {
            ::metrics::counter!(BACKGROUND_RELEASES_TOTAL).increment(n);
        }
    }

    pub(crate) fn subscribed_channels(delta: f64) {
        if delta != 0.0 {
            ::metrics::gauge!(SUBSCRIBED_CHANNELS).increment(delta);
        }
    }
}

#[cfg(not(feature = "metrics"))]
#[allow(clippy::missing_const_for_fn)]
mod record {
    use super::*;

    #[inline]
    pub(crate) fn acquisition(_: &Group, _: Outcome, _: Duration) {}
    #[inline]
    pub(crate) fn hold_started(_: &Group) {}
    #[inline]
    pub(crate) fn hold_ended(_: &Group, _: Duration) {}
    #[inline]
    pub(crate) fn handed_over(_: &Group, _: Duration) {}
    #[inline]
    pub(crate) fn lost(_: &Group, _: LossReason) {}
    #[inline]
    pub(crate) fn waiting(_: &Group, _: f64) {}
    #[inline]
    pub(crate) fn renewals(_: u64) {}
    #[inline]
    pub(crate) fn renewal_failures(_: u64) {}
    #[inline]
    pub(crate) fn background_releases(_: u64) {}
    #[inline]
    pub(crate) fn subscribed_channels(_: f64) {}
}

pub(crate) use record::*;

/// Counts a task in `lock_waiting` while it lives.
pub(crate) struct Waiting<'a>(&'a Group);

impl<'a> Waiting<'a> {
    pub(crate) fn start(group: &'a Group) -> Waiting<'a> {
        waiting(group, 1.0);
        Waiting(group)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        waiting(self.0, -1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_group_is_the_text_before_the_first_colon() {
        assert_eq!(default_group("stock:42"), "stock");
        assert_eq!(default_group("order:{user:7}"), "order");
        assert_eq!(default_group("report"), OTHER_GROUP);
        assert_eq!(default_group(":x"), OTHER_GROUP);
        assert_eq!(default_group(""), OTHER_GROUP);
        assert_eq!(default_group("user_cart-v:7"), "user_cart-v");
        assert_eq!(default_group("7:stock"), OTHER_GROUP);
        assert_eq!(default_group("{user:7}:cart"), OTHER_GROUP);
        assert_eq!(default_group("order-123:pay"), OTHER_GROUP);
        assert_eq!(default_group(&format!("{}:x", "a".repeat(65))), OTHER_GROUP);
    }
}
