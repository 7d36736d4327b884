//! When a failed request is tried again: the classification of Redis errors (an unknown
//! outcome, a failover symptom) and the retry policies built on it, side by side, so what an
//! acquisition, an explicit release and the background releaser do about the same failure can
//! be read in one place. A leaf: it knows Redis errors and time, nothing of the locks.
//!
//! Every retry sends the same request with the same owner id: taking our own hold again is
//! idempotent, and a release that finds the lock no longer ours after an unknown outcome is
//! reported as unconfirmed, never as "not ours".
//!
//! | failure | acquisition ([`AcquireRetry`]) | explicit release ([`ReleaseRetry`]) | background release ([`Backoff`]) |
//! |---|---|---|---|
//! | unknown outcome ([`outcome_unknown`]: a timeout, a connection dropped after sending) | retried 3 times, at 20·n ms; if it then gives up, the possible hold is released in the background | asked once more, at once | retried like any failure |
//! | failover symptom ([`failover_symptom`]), on a cluster or Sentinel | ridden out: one try every [`FAILOVER_RETRY`] within the failover grace from the first failure, never past the wait | ridden out the same way, never past the lease | retried like any failure |
//! | grant not acknowledged by enough replicas | rolled back, then tried again within the grace, the pause doubling from [`FAILOVER_RETRY`] up to 1 s | reported (done on the master) | — |
//! | anything else | reported | reported, then handed to the background releaser if Redis is unavailable | retried until the lease the release protects ends; after a batch that failed whole, the pause doubles from 20 ms up to 1 s |

use std::time::Duration;

use tokio::time::Instant;

/// Whether a failed command may have run on the server anyway (a timeout or a connection
/// dropped after sending), so its outcome is unknown and must be reconciled.
pub(crate) fn outcome_unknown(err: &redis::RedisError) -> bool {
    err.is_timeout() || err.is_connection_dropped() || err.is_io_error()
}

/// Whether an error is what a failing, restarting or demoted master looks like (worth riding out
/// on a deployment that fails over). `NOREPLICAS` is one: a master with `min-replicas-to-write`
/// (the recommended production setting) answers it while cut off from its replicas, which is
/// how a failover starts (or a partition that heals); it changed nothing, so retrying is safe.
pub(crate) fn failover_symptom(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_cluster_error()
        || matches!(
            e.kind(),
            redis::ErrorKind::Server(
                redis::ServerErrorKind::ReadOnly
                    | redis::ServerErrorKind::MasterDown
                    | redis::ServerErrorKind::ClusterDown
                    | redis::ServerErrorKind::TryAgain
                    | redis::ServerErrorKind::BusyLoading
            )
        )
        || matches!(e.kind(), redis::ErrorKind::ClusterConnectionNotFound)
        // redis-rs has no kind for it: the code, also when a script's write was refused.
        || e.code() == Some("NOREPLICAS")
}

/// The pause between attempts (acquisitions, explicit releases) while a failing-over deployment
/// is unavailable.
pub(crate) const FAILOVER_RETRY: Duration = Duration::from_millis(100);

/// How often an acquire whose outcome is unknown (timeout, dropped connection) is retried with
/// the same owner id before giving up.
const RECONCILE_TRIES: u32 = 3;

/// The longest pause between retries of a grant that replicas did not acknowledge.
const MAX_ACK_BACKOFF: Duration = Duration::from_secs(1);

/// How long an operation rides out a failing-over deployment: the failover grace, from its
/// first failure, one attempt every [`FAILOVER_RETRY`]. Shared by acquisitions and explicit
/// releases.
struct RideOut {
    /// `None` when the deployment cannot fail over (one server): nothing is ridden out.
    grace: Option<Duration>,
    since: Option<Instant>,
}

impl RideOut {
    fn new(grace: Option<Duration>) -> RideOut {
        RideOut { grace, since: None }
    }

    /// Whether the deployment can fail over (there is a grace to ride out).
    fn applies(&self) -> bool {
        self.grace.is_some()
    }

    /// Whether the grace (bounded by `deadline`) leaves time for another attempt; the first
    /// call starts it.
    fn allows_retry(&mut self, deadline: Option<Instant>) -> bool {
        let Some(grace) = self.grace else {
            return false;
        };
        let now = Instant::now();
        let until = *self.since.get_or_insert(now) + grace;
        let until = deadline.map_or(until, |d| d.min(until));
        now + FAILOVER_RETRY < until
    }
}

/// The retry state of one acquire attempt: unknown outcomes, an unavailable (failing-over)
/// deployment, and grants the replicas did not acknowledge.
pub(crate) struct AcquireRetry {
    /// Retries after an unknown outcome so far.
    tries: u32,
    /// Some earlier request's outcome is still unknown (it may have taken the lock).
    pub(crate) unresolved: bool,
    /// How long a failing-over deployment may stay unavailable (or grants go unacknowledged),
    /// from the first time it was.
    ride_out: RideOut,
    /// The next pause before retrying an unacknowledged grant.
    ack_backoff: Duration,
    deadline: Option<Instant>,
}

impl AcquireRetry {
    /// `grace`: the failover grace on a deployment that fails over (`None` on one server);
    /// `deadline`: the acquisition's, which no retry goes past.
    pub(crate) fn new(grace: Option<Duration>, deadline: Option<Instant>) -> AcquireRetry {
        AcquireRetry {
            tries: 0,
            unresolved: false,
            ride_out: RideOut::new(grace),
            ack_backoff: FAILOVER_RETRY,
            deadline,
        }
    }

    /// How long to pause before retrying after `e`; `None` to give up.
    pub(crate) fn retry_after(&mut self, e: &redis::RedisError) -> Option<Duration> {
        if outcome_unknown(e) && self.tries < RECONCILE_TRIES {
            self.unresolved = true;
            self.tries += 1;
            tracing::warn!(error = %e, tries = self.tries, "acquire outcome unknown; reconciling");
            return Some(Duration::from_millis(20 * u64::from(self.tries)));
        }
        if failover_symptom(e) && self.within_grace() {
            // A cluster or Sentinel failover in progress: keep trying with the same owner id
            // (idempotent) until the grace period or the wait runs out.
            self.unresolved |= outcome_unknown(e);
            tracing::debug!(error = %e, "redis unavailable; waiting for failover");
            return Some(FAILOVER_RETRY);
        }
        None
    }

    /// Whether giving up after `e` leaves nothing that may hold the lock.
    pub(crate) fn settled_by(&self, e: &redis::RedisError) -> bool {
        !outcome_unknown(e) && !self.unresolved
    }

    /// Whether a failing-over deployment's grace period (bounded by the wait) leaves time for
    /// another attempt.
    pub(crate) fn within_grace(&mut self) -> bool {
        self.ride_out.allows_retry(self.deadline)
    }

    /// The pause before retrying an unacknowledged grant; doubles each time, up to a second.
    pub(crate) fn next_ack_backoff(&mut self) -> Duration {
        let pause = self.ack_backoff;
        self.ack_backoff = (pause * 2).min(MAX_ACK_BACKOFF);
        pause
    }
}

/// When an explicit release is tried again (with the same owner id: a repeat that finds the
/// lock gone is reported as unconfirmed).
pub(crate) struct ReleaseRetry {
    /// On a cluster or Sentinel: how long a failover in progress is ridden out (the failover
    /// grace, never past the lease).
    ride_out: RideOut,
    tries: u32,
}

impl ReleaseRetry {
    /// `grace`: how long a failover is ridden out (the failover grace, never past the lease),
    /// `None` on one server.
    pub(crate) fn new(grace: Option<Duration>) -> ReleaseRetry {
        ReleaseRetry {
            ride_out: RideOut::new(grace),
            tries: 0,
        }
    }

    /// The pause before trying again after `e`; `None` to report it (the background releaser
    /// then retries until the lease ends).
    pub(crate) fn after(&mut self, e: &redis::RedisError) -> Option<Duration> {
        self.tries += 1;
        if self.ride_out.applies() && failover_symptom(e) {
            // A failing-over deployment (a master being replaced, or one the sentinels have
            // not confirmed yet): keep trying until it answers or the grace runs out, as an
            // acquisition does.
            return self.ride_out.allows_retry(None).then_some(FAILOVER_RETRY);
        }
        // One server: an unknown outcome is asked once more at once.
        (outcome_unknown(e) && self.tries == 1).then_some(Duration::ZERO)
    }
}

/// The background releaser's pause after a failed batch: 20 ms, doubling up to a second, back
/// to 20 ms after a batch that went through. Its jobs are retried until their leases end.
#[derive(Debug)]
pub(crate) struct Backoff(Duration);

impl Backoff {
    const FIRST: Duration = Duration::from_millis(20);
    const MAX: Duration = Duration::from_secs(1);

    /// A backoff at its first pause.
    pub(crate) fn new() -> Backoff {
        Backoff(Backoff::FIRST)
    }

    /// The pause to wait now.
    pub(crate) fn pause(&self) -> Duration {
        self.0
    }

    /// After a failure: the next pause doubles, up to a second.
    pub(crate) fn failed(&mut self) {
        self.0 = (self.0 * 2).min(Backoff::MAX);
    }

    /// After a success: back to the first pause.
    pub(crate) fn reset(&mut self) {
        self.0 = Backoff::FIRST;
    }
}
