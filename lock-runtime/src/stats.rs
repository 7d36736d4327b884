//! Counters of what a client did, for metrics and benchmarks.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) acquisitions: AtomicU64,
    pub(crate) reentries: AtomicU64,
    pub(crate) renewal_round_trips: AtomicU64,
    pub(crate) renewals: AtomicU64,
    pub(crate) losses: AtomicU64,
    pub(crate) background_releases: AtomicU64,
    pub(crate) handoffs: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> ClientStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ClientStats {
            acquisitions: get(&self.acquisitions),
            reentries: get(&self.reentries),
            renewal_round_trips: get(&self.renewal_round_trips),
            renewals: get(&self.renewals),
            losses: get(&self.losses),
            background_releases: get(&self.background_releases),
            handoffs: get(&self.handoffs),
        }
    }
}

/// What a [`LockClient`](crate::LockClient) has done since it was built; see
/// [`LockClient::stats`](crate::LockClient::stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Locks taken from Redis (re-entries not counted).
    pub acquisitions: u64,
    /// Re-entrant acquisitions served from the scope without a round trip.
    pub reentries: u64,
    /// Round trips the watchdog made to renew leases (one per batch, however many locks).
    pub renewal_round_trips: u64,
    /// Leases renewed.
    pub renewals: u64,
    /// Held locks declared lost.
    pub losses: u64,
    /// Releases run by the background releaser (dropped guards, cancelled acquires).
    pub background_releases: u64,
    /// Locks handed straight to another task of this client by a release (see
    /// [`LockClientBuilder::handoff_limit`](crate::LockClientBuilder::handoff_limit)); also
    /// counted in `acquisitions`.
    pub handoffs: u64,
}
