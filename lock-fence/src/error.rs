//! The one error type of the crate.

/// Everything a fenced write can report.
///
/// The enum is `#[non_exhaustive]`: match the variants you handle and keep a catch-all arm.
/// [`is_stale`](FenceError::is_stale) tells the one that matters most apart: a holder with a
/// newer fencing token has written, so this holder's lock is gone and its write was refused
/// (roll the transaction back and give up the request; retrying with the same token cannot
/// succeed).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// A newer holder has written: the write with `token` was refused.
    #[error("stale fencing token {token} for `{name}`: a holder with token {newest} has written")]
    Stale {
        /// The lock name (for a [token column](crate#the-token-column), `table[key]`; for
        /// Redis, the key).
        name: String,
        /// The refused token.
        token: u64,
        /// The newest token the store has accepted.
        newest: u64,
    },
    /// The token does not fit SQL's `BIGINT` (at most `i64::MAX`, about 9.2·10¹⁸).
    ///
    /// On Redis (either key layout) a lock's fencing token is the Redis server's clock in
    /// microseconds at the grant (or the name's previous token + 1, when the clock has not
    /// passed it): about 1.8·10¹⁵ in 2026 (below 2⁵³ behind Sentinel, where tokens are ordered
    /// by the failover epoch first), not a small count from 1. That is far below
    /// `i64::MAX` (the microsecond clock reaches it in the year 294 247), so this error means
    /// a token that did not come from a lock, or a server clock set wildly wrong. (Only
    /// `lock-runtime`'s in-memory test backend, `MemoryLocks`, counts from 1.)
    #[error(
        "fencing token {token} is larger than a SQL BIGINT can hold ({})",
        i64::MAX
    )]
    TokenOutOfRange {
        /// The token.
        token: u64,
    },
    /// A table or column name cannot be used in SQL.
    #[error("invalid SQL identifier {identifier:?}: {reason}")]
    InvalidIdentifier {
        /// The identifier as given.
        identifier: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The Redis key holds something that is not a fenced value (another type, or a hash with
    /// other fields): left untouched.
    #[error("key `{key}` holds {found}, not a fenced value; refusing to touch it")]
    ForeignData {
        /// The key.
        key: String,
        /// What was found there (a Redis type, or what is wrong with the hash).
        found: String,
    },
    /// The lock failed: most often [`LockError::Lost`](lock_runtime::LockError::Lost) from
    /// asking a hold for its fencing token after it was lost, so that a fenced section can use
    /// `?` on both ([`LockGuard::fencing_token`](lock_runtime::LockGuard::fencing_token) and
    /// the store's calls) with one error type.
    ///
    /// ```no_run
    /// # async fn demo(guard: lock_runtime::LockGuard) -> Result<(), lock_fence::FenceError> {
    /// let token = guard.fencing_token().await?; // a lost hold: FenceError::Lock(Lost { .. })
    /// # let _ = token; Ok(()) }
    /// ```
    #[cfg(feature = "lock-runtime")]
    #[cfg_attr(docsrs, doc(cfg(feature = "lock-runtime")))]
    #[error("lock error: {0}")]
    Lock(#[from] lock_runtime::LockError),
    /// The database failed (connection, SQL, constraint, serialization failure, …).
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "postgres", feature = "sqlite"))))]
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Redis failed (connection, script, …).
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    #[error("redis error: {0}")]
    Redis(#[from] redis::RedisError),
}

impl FenceError {
    /// Whether a newer holder has written ([`FenceError::Stale`]).
    pub fn is_stale(&self) -> bool {
        matches!(self, FenceError::Stale { .. })
    }

    /// Whether the lock was lost before the write ([`FenceError::Lock`] with
    /// [`LockError::Lost`](lock_runtime::LockError::Lost)): nothing was written; like a stale
    /// token, retrying under the same hold cannot succeed.
    #[cfg(feature = "lock-runtime")]
    #[cfg_attr(docsrs, doc(cfg(feature = "lock-runtime")))]
    pub fn is_lost(&self) -> bool {
        matches!(self, FenceError::Lock(e) if e.is_lost())
    }
}
