//! The one error type of the crate.

// `LockError::Timeout` is deprecated; the derived impls and the classification still name it.
#![allow(deprecated)]

use std::fmt;
use std::time::Duration;

/// Why a held lock stopped being ours.
///
/// Carried by [`LockError::Lost`] and returned by [`LockGuard::lost`](crate::LockGuard::lost).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// An explicit lease ran out (no watchdog renews leased locks).
    LeaseExpired,
    /// Renewal found the lock gone or held by someone else: it was deleted, force-unlocked or
    /// expired on the server (for example after a Redis restart).
    Deleted,
    /// Renewal could not be confirmed before the lease would have run out (minus a safety
    /// margin): Redis was unreachable or too slow. The lock is declared lost *before* Redis can
    /// expire it, so another owner cannot have it while we still believe we do.
    RenewalFailed,
    /// The maximum hold time ([`LockOptions::max_hold`](crate::LockOptions::max_hold)) passed;
    /// the lock was released.
    MaxHoldExceeded,
    /// The guard was released (or dropped) by its owner; only seen by re-entrant guards that
    /// outlive the outermost one.
    Released,
    /// A [`RedLock`](crate::RedLock) fell below its quorum: too many of its nodes lost their
    /// lock (or its validity ran out), so a majority no longer vouches for it.
    QuorumLost,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            LossReason::LeaseExpired => "the lease expired",
            LossReason::Deleted => "the lock was deleted or taken over on the server",
            LossReason::RenewalFailed => "renewal could not be confirmed before the lease ran out",
            LossReason::MaxHoldExceeded => "the maximum hold time passed",
            LossReason::Released => "the outermost guard was released",
            LossReason::QuorumLost => "fewer than a quorum of nodes still hold it",
        })
    }
}

/// Everything that can go wrong when taking, holding or releasing a lock.
///
/// The enum is `#[non_exhaustive]`: match the variants you handle and keep a catch-all arm.
/// The helpers [`is_busy`](LockError::is_busy), [`is_unavailable`](LockError::is_unavailable)
/// and [`retry_after`](LockError::retry_after) classify errors the way an HTTP or gRPC layer needs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock stayed held by another owner for the whole wait.
    #[error("timed out after {waited:?} waiting for lock `{name}`")]
    WaitTimeout {
        /// The lock name.
        name: String,
        /// How long we waited.
        waited: Duration,
        /// The holder's remaining lease when we gave up, if known.
        remaining_ttl: Option<Duration>,
    },
    /// The lock is not held by this owner (never was, already released, or expired).
    #[error("lock `{name}` is not held by this owner")]
    NotOwner {
        /// The lock name.
        name: String,
    },
    /// A held lock was lost (see [`LossReason`]).
    #[error("lock `{name}` was lost: {reason}")]
    Lost {
        /// The lock name.
        name: String,
        /// Why it was lost.
        reason: LossReason,
    },
    /// The lock name cannot be used.
    #[error("invalid lock name {name:?}: {reason}")]
    InvalidName {
        /// The offending name (cut to 64 characters).
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A configuration value (URL, duration, prefix, option) is invalid.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The Redis key of the lock holds data that is not ours (for example a plain string).
    /// Nothing was changed.
    #[error("key `{key}` holds a Redis {found} that is not a lock; refusing to touch it")]
    ForeignData {
        /// The full Redis key.
        key: String,
        /// The Redis type found there.
        found: String,
    },
    /// Redis could not be reached, did not answer in time, or answered with an error.
    #[error("redis error during {op}: {source}")]
    Backend {
        /// What we were doing.
        op: &'static str,
        /// The underlying redis error.
        #[source]
        source: redis::RedisError,
    },
    /// The Redis user (ACL) may not run a command a lock operation needs, or may not use the
    /// lock's keys or channels: `denied` says which ("the `pexpire` command (called by a lock
    /// script)", "the lock's keys"). A configuration error: retrying does not help. The
    /// commands a lock user needs are listed in the crate docs ("Managed Redis and ACLs").
    #[error("the redis user may not use {denied}, which {op} needs: {source}")]
    NoPermission {
        /// What we were doing.
        op: &'static str,
        /// What the ACL refused.
        denied: String,
        /// The underlying redis error.
        #[source]
        source: redis::RedisError,
    },
    /// Redis did not answer within the configured time (the connect or response timeout): an
    /// "unavailable" error. Not to be confused with [`WaitTimeout`](LockError::WaitTimeout),
    /// where Redis answered and the lock stayed busy.
    #[error("redis did not answer {op} within {timeout:?}")]
    ResponseTimeout {
        /// What we were doing.
        op: &'static str,
        /// The limit that passed.
        timeout: Duration,
    },
    /// The former name of [`ResponseTimeout`](LockError::ResponseTimeout). The library no longer
    /// returns it: a `match` arm on it matches nothing; match `ResponseTimeout` instead (or use
    /// [`is_unavailable`](LockError::is_unavailable)).
    #[deprecated(
        since = "0.2.0",
        note = "renamed to `ResponseTimeout` (too easily confused with `WaitTimeout`); this variant is never returned"
    )]
    #[error("redis did not answer {op} within {timeout:?}")]
    Timeout {
        /// What we were doing.
        op: &'static str,
        /// The limit that passed.
        timeout: Duration,
    },
    /// Fewer replicas than required acknowledged a write within the time allowed
    /// ([`LockClientBuilder::replica_ack`](crate::LockClientBuilder::replica_ack)). For an
    /// acquisition the lock was rolled back: nothing is held and no key is left behind.
    #[error(
        "only {acknowledged} of {required} required replicas acknowledged {op} of lock `{name}` within {timeout:?}"
    )]
    ReplicaAck {
        /// What we were doing (`"acquire"`, `"renew"`, `"release"`).
        op: &'static str,
        /// The lock name.
        name: String,
        /// Replicas that had to acknowledge.
        required: u32,
        /// Replicas that did.
        acknowledged: u32,
        /// How long we waited for them.
        timeout: Duration,
    },
    /// A release that succeeded on the master, but fewer replicas than required acknowledged it
    /// in time ([`LockClientBuilder::replica_ack`](crate::LockClientBuilder::replica_ack)).
    ///
    /// **Not a failed release; safe to ignore** (see [`is_released`](LockError::is_released)):
    /// the lock is free on the master, nothing of it is held by this process, and nothing needs
    /// retrying (the library does not retry it either). The only thing it leaves open: should
    /// the master fail before its replicas get the release, a promoted replica may still have
    /// the grant, under an owner id nobody renews, so the lock stays taken until that lease
    /// ends. Other holders then wait at most one lease; no two hold it at once. Log it, or
    /// count it as a sign that replicas lag; do not undo the work done under the lock.
    #[error(
        "lock `{name}` was released on the master, but only {acknowledged} of {required} required replicas acknowledged it within {timeout:?}"
    )]
    UnacknowledgedRelease {
        /// The lock name.
        name: String,
        /// Replicas that had to acknowledge.
        required: u32,
        /// Replicas that did.
        acknowledged: u32,
        /// How long we waited for them.
        timeout: Duration,
    },
    /// A release whose outcome cannot be known: its request failed with an unknown outcome (a
    /// timeout, a connection dropped after sending: the server may have run it), and the
    /// retry, with the same owner id, found the lock no longer ours. Either the first request
    /// released it (your critical section was protected to its end), or the lock had been lost
    /// before the release without the watchdog having seen it yet (a restart without
    /// persistence, a force-unlock, a failover that lost the grant), and your critical section
    /// may have overlapped another holder's. Nothing is left held either way.
    ///
    /// Treat it as you would a [`Lost`](LockError::Lost) when the work done under the lock
    /// must be known to have been protected (check it against your fenced store, or redo it);
    /// a fenced store has refused every write made with a token older than a later holder's.
    #[error(
        "lock `{name}`: the release's outcome is unknown (its request failed after it may have run, and the retry found the lock no longer ours): released then, or lost before"
    )]
    ReleaseUnconfirmed {
        /// The lock name.
        name: String,
    },
    /// A [`RedLock`](crate::RedLock) could not reach a quorum of its nodes: too many were down,
    /// too slow, or the time it took used up the validity. Partial acquisitions were released.
    #[error(
        "lock `{name}`: only {acquired} of {nodes} nodes granted it, a quorum is {quorum}{}",
        last_error.as_ref().map(|e| format!(" (last error: {e})")).unwrap_or_default()
    )]
    NoQuorum {
        /// The lock name.
        name: String,
        /// Nodes that granted the lock in the last attempt.
        acquired: usize,
        /// Nodes needed.
        quorum: usize,
        /// Nodes in all.
        nodes: usize,
        /// The last node error seen, if any (also the error's `source()`).
        #[source]
        last_error: Option<Box<LockError>>,
    },
    /// A semaphore acquisition asked for no permits, or for more than the semaphore's capacity
    /// (the capacity stored in Redis, if an operator set one, else the handle's). Nothing was
    /// taken.
    #[error(
        "cannot take {requested} permit(s) of semaphore `{name}`, whose capacity is {capacity}"
    )]
    InvalidPermits {
        /// The semaphore name.
        name: String,
        /// Permits asked for.
        requested: u32,
        /// The capacity in force.
        capacity: u32,
    },
    /// Several locks were asked for together (a cart's products, from a `#[distributed_lock]`
    /// template over a collection or a request body) and there are more distinct names than
    /// the configured maximum. Nothing was taken.
    #[error("{count} lock names asked for together; at most {max} are allowed")]
    TooManyNames {
        /// Distinct names asked for.
        count: usize,
        /// The configured maximum.
        max: usize,
    },
    /// Taking the lock here could only wait for a hold of the same task: the write side of a
    /// read/write lock inside the scope of its own read guard (an upgrade), or a name held in
    /// this scope as another primitive (a mutex taken as a semaphore, …). Nothing was sent.
    #[error("cannot take `{name}` here: {reason}")]
    WouldDeadlock {
        /// The lock name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// The operation does not exist for this primitive as laid out: a semaphore without
    /// leases in the native layout, or what a plain Redisson `RSemaphore` cannot give (its
    /// total capacity, taking back permits whose holders Redis does not record, an explicit
    /// lease); see [`Semaphore::without_leases`](crate::Semaphore::without_leases). Nothing
    /// was sent.
    #[error("`{name}`: {reason}")]
    Unsupported {
        /// The lock name.
        name: String,
        /// What is not supported, and why.
        reason: &'static str,
    },
    /// The server cannot run these locks, as found when the client was built (see
    /// [`LockClient::server`](crate::LockClient::server)): a Redis older than 7.0, a server
    /// without Lua scripting (`EVALSHA` unknown: a Valkey 9.1 built without its Lua module, a
    /// managed tier that forbids scripts, a config that renamed it away), or no `WAIT` while
    /// [`replica_ack`](crate::LockClientBuilder::replica_ack) is set (ElastiCache Serverless).
    /// `missing` names what it lacks, `fix` what to do. A configuration error: retrying does
    /// not help. (A command the server has but the user's ACL refuses is a
    /// [`NoPermission`](LockError::NoPermission) instead.)
    #[error("{server} cannot run these locks: it lacks {missing}; {fix}")]
    IncompatibleServer {
        /// The server, as it named itself ("Redis 6.0.9", "Valkey 9.1.2"), or "the server".
        server: String,
        /// What it lacks.
        missing: String,
        /// What to do about it.
        fix: &'static str,
        /// The server's refusal, when it answered one.
        #[source]
        source: Option<redis::RedisError>,
    },
    /// No default client was installed with
    /// [`LockClient::install_default`](crate::LockClient::install_default).
    #[error(
        "no default LockClient is installed: call LockClient::install_default at start-up or pass `client = …`"
    )]
    NoDefaultClient,
}

impl LockError {
    /// The lock is held by someone else (a wait timed out). HTTP: 423/409; gRPC: `ABORTED`.
    pub fn is_busy(&self) -> bool {
        matches!(self, LockError::WaitTimeout { .. })
    }

    /// Redis is down, unreachable or too slow. HTTP: 503; gRPC: `UNAVAILABLE`.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            LockError::Backend { .. }
                | LockError::ResponseTimeout { .. }
                | LockError::Timeout { .. }
                | LockError::ReplicaAck { .. }
                | LockError::NoQuorum { .. }
        )
    }

    /// The release this error reports was done anyway: the lock is free on the master and the
    /// caller can treat the release as successful
    /// ([`UnacknowledgedRelease`](LockError::UnacknowledgedRelease): only the replicas'
    /// acknowledgement was missing).
    ///
    /// ```
    /// # async fn demo(guard: lock_runtime::LockGuard) -> Result<(), lock_runtime::LockError> {
    /// match guard.release().await {
    ///     Ok(()) => {}
    ///     Err(e) if e.is_released() => tracing::debug!("released; replicas lag: {e}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_released(&self) -> bool {
        matches!(self, LockError::UnacknowledgedRelease { .. })
    }

    /// The lock was lost while held.
    pub fn is_lost(&self) -> bool {
        matches!(self, LockError::Lost { .. })
    }

    /// For a busy lock, when a retry may succeed: the holder's remaining lease.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LockError::WaitTimeout { remaining_ttl, .. } => *remaining_ttl,
            _ => None,
        }
    }

    /// What a release that `shortfall` replicas short of acknowledging reports: done on the
    /// master, so an [`UnacknowledgedRelease`](LockError::UnacknowledgedRelease), never a
    /// failed release.
    pub(crate) fn unacknowledged_release(name: &str, shortfall: Shortfall) -> Self {
        LockError::UnacknowledgedRelease {
            name: name.to_owned(),
            required: shortfall.required,
            acknowledged: shortfall.acknowledged,
            timeout: shortfall.timeout,
        }
    }

    pub(crate) fn invalid_name(name: &str, reason: &'static str) -> Self {
        LockError::InvalidName {
            name: name.chars().take(64).collect(),
            reason,
        }
    }
}

/// How a replica acknowledgement fell short: the detail of [`LockError::ReplicaAck`] and
/// [`LockError::UnacknowledgedRelease`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shortfall {
    pub(crate) required: u32,
    pub(crate) acknowledged: u32,
    pub(crate) timeout: Duration,
}
