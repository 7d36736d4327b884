//! The watchdog: one task per client that renews every held lock in one pipelined batch.
//!
//! - Locks taken without an explicit lease get the watchdog timeout as lease and are renewed
//!   every third of it, all of them in one batch handed to the backend (on Redis: one pipelined
//!   round trip; on a cluster one pipeline per node, all nodes at once, so a node that hangs
//!   costs only its own locks: see `topology/`).
//! - With replica acknowledgement, a renewal counts only once `WAIT` confirms it.
//! - A renewal that fails is retried quickly. If a lease cannot be confirmed before it would run
//!   out minus a safety margin, the lock is declared lost *before* Redis can expire it and hand
//!   it to someone else. A renewal that finds the lock gone declares the loss at once.
//! - Locks with an explicit lease are not renewed; they are declared lost the same safety margin
//!   before the lease ends (a tenth of it, at least 5 ms), so the holder is told before Redis
//!   can hand the lock to someone else.
//! - A lock registered while a renewal round is in flight is watched too: its deadline is
//!   declared on time even when the round hangs (a frozen cluster node, a Sentinel switch).
//! - An optional maximum hold time stops renewal and releases the lock.
//! - Read holds of Redisson's `RReadWriteLock` share their hash with Java readers, whose
//!   renewal can shorten it to the Java watchdog timeout: they are renewed every third of the
//!   shorter of the two timeouts (rounds of their own between the full rounds), and confirmed
//!   only for that long, so a Java reader's renewal followed by its death never lets the hash
//!   expire under a Rust reader that has not been told.
//!
//! The task holds only a `Weak` reference to the client and stops when it is gone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::LossReason;
use crate::client::inner::{Config, Inner};
use crate::keys::LockNames;
use crate::options::loss_margin;
use crate::releaser::ReleaseJob;
use crate::signal::LossSignal;
use crate::stats::Counters;
use crate::sync;

pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

struct Shared {
    entries: Mutex<HashMap<u64, Entry>>,
    /// Wakes the task when an entry was added (its deadline may be the earliest).
    changed: Notify,
    /// Asks for a renewal round at once (after a switch to a new master).
    renew_now: Arc<Notify>,
    lease: Duration,
    period: Duration,
    margin: Duration,
    /// Redisson read holds: how long a renewal confirms them (the shorter of the watchdog
    /// timeout and the Java fleet's), how often they are renewed, and their loss margin.
    reader_lease: Duration,
    reader_period: Duration,
    reader_margin: Duration,
    retry: Duration,
    /// The longest a renewal round can take; a deadline sooner than this (or the period) needs
    /// the task's attention at once.
    round: Duration,
}

/// One held lock, by acquisition id.
pub(crate) struct Entry {
    pub(crate) names: Arc<LockNames>,
    pub(crate) owner: Arc<str>,
    /// Renewed by the watchdog (`true`) or an explicit lease (`false`).
    pub(crate) renew: bool,
    /// The lease is confirmed to last at least until here (measured from when the request
    /// that set it was *sent*, so it never overestimates).
    pub(crate) confirmed_until: Instant,
    pub(crate) max_hold_until: Option<Instant>,
    /// The lease Redis was given (the watchdog timeout for renewed locks).
    pub(crate) lease: Duration,
    pub(crate) signal: Arc<LossSignal>,
}

impl Entry {
    /// When the loss is declared: the safety margin before the lease could run out in Redis
    /// (the watchdog's margin for renewed locks, a shorter one for Redisson read holds; an
    /// explicit lease's own margin). `None` if that is before the clock's start.
    fn loss_deadline(&self, shared: &Shared) -> Option<Instant> {
        let margin = if !self.renew {
            loss_margin(self.lease)
        } else if self.shares_java_renewals() {
            shared.reader_margin
        } else {
            shared.margin
        };
        self.confirmed_until.checked_sub(margin)
    }

    /// A read hold of Redisson's read/write lock: its hash's TTL is also set by Java readers'
    /// renewals, to the Java watchdog timeout.
    fn shares_java_renewals(&self) -> bool {
        self.names
            .scheme
            .shares_java_renewals(self.names.mode_of(&self.owner))
    }

    /// The reason a hold past its deadline is lost with: the renewal was not confirmed in
    /// time, or the explicit lease ran out.
    fn expiry(&self) -> LossReason {
        if self.renew {
            LossReason::RenewalFailed
        } else {
            LossReason::LeaseExpired
        }
    }
}

impl Watchdog {
    pub(crate) fn new(config: &Config, renew_now: Arc<Notify>) -> Watchdog {
        let lease = config.watchdog_timeout;
        let period = lease / 3;
        let reader_lease = lease.min(config.redisson_watchdog_timeout);
        Watchdog {
            shared: Arc::new(Shared {
                entries: Mutex::new(HashMap::new()),
                changed: Notify::new(),
                renew_now,
                lease,
                period,
                // Declare a lease lost this long before it could run out.
                margin: loss_margin(lease),
                reader_lease,
                reader_period: reader_lease / 3,
                reader_margin: loss_margin(reader_lease),
                retry: (period / 4).min(Duration::from_millis(200)),
                // With the cluster's safety net (`renew`) on top of the response timeout.
                round: config.response_timeout + config.response_timeout / 16,
            }),
        }
    }

    pub(crate) fn spawn(inner: &Arc<Inner>) -> AbortHandle {
        let shared = inner.watchdog.shared.clone();
        tokio::spawn(run(Arc::downgrade(inner), shared)).abort_handle()
    }

    pub(crate) fn register(&self, id: u64, mut entry: Entry) {
        let now = Instant::now();
        let reader = entry.renew && entry.shares_java_renewals();
        if reader {
            // A Java reader's renewal may cut the hash to the Java watchdog timeout at any
            // moment after the grant: only that much of the lease is sure.
            let unsure = self.shared.lease.saturating_sub(self.shared.reader_lease);
            // (Before the clock's start: lost at once.)
            entry.confirmed_until = entry.confirmed_until.checked_sub(unsure).unwrap_or(now);
        }
        let deadline = entry.loss_deadline(&self.shared);
        let reason = entry.expiry();
        // From here on every look at the hold compares the clock with its deadline, so the
        // loss is seen on time even when this task cannot run (a resumed process, a starved
        // runtime).
        entry.signal.arm(&entry.names, deadline, reason);
        if deadline.is_none_or(|d| now >= d) {
            // The grant's answer came so late (a stalled connection, a paused server, a
            // starved process) that its lease may be over, or is within the safety margin of
            // it: lost before the holder runs anything under it.
            entry.signal.declare(&entry.names.name, reason);
            return;
        }
        // The task wakes at least once per period (or round) and then looks at every entry, so
        // it only needs a nudge for a deadline that comes sooner (a short lease, a grant whose
        // answer came late, a max hold, a Redisson read hold's shorter period). Not waking it
        // for every acquisition keeps the hot path free of a task switch.
        let soon = now + self.shared.period.max(self.shared.round);
        let urgent = deadline.is_some_and(|d| d < soon)
            || entry.max_hold_until.is_some_and(|t| t < soon)
            || (reader && self.shared.reader_period < self.shared.period);
        self.shared.lock().insert(id, entry);
        if urgent {
            self.shared.changed.notify_one();
        }
    }

    /// Stops tracking a lock; returns whether it was still tracked (not yet declared lost).
    pub(crate) fn deregister(&self, id: u64) -> bool {
        self.shared.lock().remove(&id).is_some()
    }

    /// Readies the hold of acquisition `id` to pass in memory to another task of this client
    /// (`hold.rs`, `Held::pass_in_memory`): its entry keeps being renewed under a signal of its
    /// own until the task takes it over ([`Watchdog::adopt`]), since the releasing guard's
    /// signal is declared released. `false` when it cannot pass: not renewed by the watchdog,
    /// lost, or within twice the safety margin of its loss deadline (the task might not take
    /// it over in time).
    pub(crate) fn hand_over(&self, id: u64, group: &crate::metrics::Group) -> bool {
        let mut entries = self.shared.lock();
        let Some(entry) = entries.get_mut(&id) else {
            return false;
        };
        let Some(deadline) = entry.loss_deadline(&self.shared) else {
            return false;
        };
        if !entry.renew
            || entry.signal.get().is_some()
            || Instant::now() + self.shared.margin >= deadline
        {
            return false;
        }
        let signal = Arc::new(LossSignal::new(group.clone()));
        signal.arm(&entry.names, Some(deadline), entry.expiry());
        entry.signal = signal;
        true
    }

    /// Takes over the hold of acquisition `id` passed in memory ([`Watchdog::hand_over`]):
    /// `signal` is told its loss from now on, and its maximum hold time applies. Returns
    /// whether it took it over: `false` when the hold was lost meanwhile (or released).
    pub(crate) fn adopt(
        &self,
        id: u64,
        signal: &Arc<LossSignal>,
        max_hold_until: Option<Instant>,
    ) -> bool {
        let mut entries = self.shared.lock();
        let Some(entry) = entries.get_mut(&id) else {
            return false;
        };
        let Some(deadline) = entry.loss_deadline(&self.shared) else {
            return false;
        };
        if entry.signal.get().is_some() {
            return false;
        }
        signal.arm(&entry.names, Some(deadline), entry.expiry());
        entry.signal = signal.clone();
        entry.max_hold_until = max_hold_until;
        drop(entries);
        if max_hold_until.is_some() {
            self.shared.changed.notify_one();
        }
        true
    }

    /// How many tracked holds are not lost (one past its deadline may still be tracked until
    /// the task comes round, but its holder is told already).
    pub(crate) fn len(&self) -> usize {
        self.shared
            .lock()
            .values()
            .filter(|e| e.signal.get().is_none())
            .count()
    }

    /// Until when the lease of acquisition `id` is confirmed, or `None` once it is no longer
    /// tracked (released or declared lost).
    pub(crate) fn confirmed_until(&self, id: u64) -> Option<Instant> {
        self.shared.lock().get(&id).map(|e| e.confirmed_until)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Entry>> {
        sync::lock(&self.entries)
    }

    /// Declares lost every entry past its deadline; returns the earliest remaining deadline,
    /// how many were lost, and whether a renewed Redisson read hold is left (it needs the
    /// shorter renewal period).
    fn expire(&self, now: Instant, releases: &mut Vec<ReleaseJob>) -> (Option<Instant>, u64, bool) {
        let mut entries = self.lock();
        let mut earliest: Option<Instant> = None;
        let mut lost = 0;
        let mut readers = false;
        entries.retain(|_, e| {
            let deadline = e.loss_deadline(self).unwrap_or(now);
            let reason = if e.max_hold_until.is_some_and(|t| now >= t) {
                releases.push(ReleaseJob::new(&e.names, &e.owner, e.confirmed_until));
                Some(LossReason::MaxHoldExceeded)
            } else if now >= deadline {
                Some(e.expiry())
            } else {
                // Declared by a look of the holder's (past the deadline as the signal knew it)
                // before this task came round: stop renewing it.
                e.signal.get()
            };
            match reason {
                Some(reason) => {
                    e.signal.declare(&e.names.name, reason);
                    lost += 1;
                    false
                }
                None => {
                    let next = e.max_hold_until.map_or(deadline, |t| t.min(deadline));
                    earliest = Some(earliest.map_or(next, |x| x.min(next)));
                    readers |= e.renew && e.shares_java_renewals();
                    true
                }
            }
        });
        (earliest, lost, readers)
    }
}

/// Which holds a renewal round renews.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// Every renewed hold (every period).
    All,
    /// Only Redisson read holds (every reader period, between the full rounds).
    Readers,
}

async fn run(client: Weak<Inner>, shared: Arc<Shared>) {
    let mut next_renewal = Instant::now() + shared.period;
    let mut next_reader_renewal = Instant::now() + shared.reader_period;
    let mut had_readers = false;
    loop {
        let Some((mut earliest, mut readers)) = settle(&client, &shared) else {
            return;
        };
        let now = Instant::now();
        if readers && !had_readers {
            // The first read hold since there were none: just granted, renewed a period on.
            next_reader_renewal = now + shared.reader_period;
        }
        let round = if now >= next_renewal {
            Some(Round::All)
        } else if readers && now >= next_reader_renewal {
            Some(Round::Readers)
        } else {
            None
        };
        if let Some(round) = round {
            let Some(inner) = client.upgrade() else {
                return;
            };
            // Other deadlines (explicit leases, max hold, locks past saving) are declared on
            // time while the round is in flight; the round itself is bounded by the deadlines
            // of the locks it renews.
            let outcome = {
                let mut renewal = std::pin::pin!(renew(&inner, &shared, round));
                loop {
                    let timer =
                        earliest.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
                    tokio::select! {
                        outcome = &mut renewal => break outcome,
                        _ = tokio::time::sleep_until(timer) => {}
                        // A lock registered meanwhile may be due before the round ends.
                        _ = shared.changed.notified() => {}
                    }
                    let Some((next, _)) = settle(&client, &shared) else {
                        return;
                    };
                    earliest = next;
                }
            };
            let retry = Instant::now() + shared.retry;
            // Either round renews the read holds.
            next_reader_renewal = outcome.map_or(retry, |sent| sent + shared.reader_period);
            if round == Round::All {
                next_renewal = outcome.map_or(retry, |sent| sent + shared.period);
            }
            drop(inner);
            // Renewal may have removed or confirmed entries; recompute the earliest deadline.
            let Some(next) = settle(&client, &shared) else {
                return;
            };
            (earliest, readers) = next;
        }

        let mut wake = earliest.map_or(next_renewal, |d| d.min(next_renewal));
        if readers {
            wake = wake.min(next_reader_renewal);
        }
        had_readers = readers;
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = shared.changed.notified() => {}
            // The master changed (Sentinel): find out now whether our grants survived.
            _ = shared.renew_now.notified() => next_renewal = Instant::now(),
        }
    }
}

/// Declares overdue entries lost, counts them and queues the releases they need. Returns the
/// earliest remaining deadline and whether a renewed Redisson read hold is left, or `None` once
/// the client is gone.
fn settle(client: &Weak<Inner>, shared: &Shared) -> Option<(Option<Instant>, bool)> {
    let mut releases = Vec::new();
    let (earliest, lost, readers) = shared.expire(Instant::now(), &mut releases);
    if lost > 0 {
        let inner = client.upgrade()?;
        Counters::add(&inner.counters.losses, lost);
        for job in releases {
            inner.releaser.submit(job);
        }
    }
    Some((earliest, readers))
}

/// One renewal round's locks, by acquisition id.
type Batch = Vec<(u64, Arc<LockNames>, Arc<str>)>;

/// Renews the watchdog entries of a `round` in one batch. Returns when the request was sent;
/// an error when the round must be retried soon.
async fn renew(inner: &Inner, shared: &Shared, round: Round) -> Result<Instant, ()> {
    let (batch, deadline) = renewal_batch(shared, round);
    let sent = Instant::now();
    if batch.is_empty() {
        return Ok(sent);
    }
    let limit = round_limit(deadline, sent, inner.config.response_timeout);
    let pairs: Vec<(&str, &str)> = batch
        .iter()
        .map(|(_, n, o)| (n.key.as_str(), &**o))
        .collect();
    let lease_ms = shared.lease.as_millis() as u64;
    // A Redis round trip: OpenTelemetry's client-span and database attributes.
    let span = tracing::debug_span!(
        "lock.renew",
        locks = batch.len(),
        otel.kind = "client",
        db.system.name = "redis",
        db.operation.name = inner.backend.script_command(),
        db.operation.batch.size = batch.len()
    );
    let query = inner.backend.renew(&pairs, lease_ms, limit);
    let results = match tracing::Instrument::instrument(query, span).await {
        Ok(results) => results,
        Err(e) => {
            tracing::warn!(error = %e, timeout = ?limit, locks = batch.len(), "lock renewal failed; retrying");
            crate::metrics::renewal_failures(batch.len() as u64);
            return Err(());
        }
    };
    Counters::add(&inner.counters.renewal_round_trips, 1);
    if apply(inner, shared, &batch, results, sent) > 0 {
        tracing::warn!("some renewals were not confirmed; retrying");
        return Err(());
    }
    Ok(sent)
}

/// The locks a `round` renews (not those past their maximum hold time), and the earliest loss
/// deadline among them.
fn renewal_batch(shared: &Shared, round: Round) -> (Batch, Option<Instant>) {
    let mut deadline: Option<Instant> = None;
    let batch = shared
        .lock()
        .iter()
        .filter(|(_, e)| {
            e.renew
                && e.max_hold_until.is_none_or(|t| t > Instant::now())
                && (round == Round::All || e.shares_java_renewals())
        })
        .map(|(id, e)| {
            let lost_at = e.loss_deadline(shared);
            deadline = match (deadline, lost_at) {
                (Some(d), Some(l)) => Some(d.min(l)),
                (d, l) => d.or(l),
            };
            (*id, e.names.clone(), e.owner.clone())
        })
        .collect();
    (batch, deadline)
}

/// How long a round may take: never past the earliest loss deadline of a lock being renewed
/// (its loss must be declared on time even when Redis hangs), and ending a little before it,
/// so what was confirmed is recorded before the loop's timer declares the overdue locks lost
/// (on a cluster, a hanging node must not cost the locks confirmed on the other nodes).
fn round_limit(deadline: Option<Instant>, sent: Instant, response_timeout: Duration) -> Duration {
    deadline
        .map(|d| {
            let left = d.saturating_duration_since(sent);
            left - left / 8
        })
        .unwrap_or(response_timeout)
        .clamp(Duration::from_millis(1), response_timeout)
}

/// Records a round's results, sent at `sent`: renewed locks are confirmed for the lease from
/// then (Redisson read holds for the shorter reader lease), locks found gone are declared
/// lost. Returns how many were not confirmed.
fn apply(
    inner: &Inner,
    shared: &Shared,
    batch: &Batch,
    results: Vec<Option<bool>>,
    sent: Instant,
) -> usize {
    let mut entries = shared.lock();
    let (mut renewed, mut lost, mut unconfirmed) = (0usize, 0usize, 0usize);
    for ((id, names, _), result) in batch.iter().zip(results) {
        let Some(entry) = entries.get_mut(id) else {
            continue;
        };
        match result {
            Some(true) => {
                entry.confirmed_until = if entry.shares_java_renewals() {
                    sent + shared.reader_lease
                } else {
                    sent + shared.lease
                };
                if let Some(deadline) = entry.loss_deadline(shared) {
                    entry.signal.extend(deadline);
                }
                renewed += 1;
            }
            Some(false) => {
                entry.signal.declare(&names.name, LossReason::Deleted);
                entries.remove(id);
                lost += 1;
            }
            None => unconfirmed += 1,
        }
    }
    drop(entries);
    tracing::debug!(renewed, lost, unconfirmed, "renewal batch done");
    Counters::add(&inner.counters.renewals, renewed as u64);
    crate::metrics::renewals(renewed as u64);
    crate::metrics::renewal_failures(unconfirmed as u64);
    Counters::add(&inner.counters.losses, lost as u64);
    unconfirmed
}

#[cfg(test)]
mod tests;
