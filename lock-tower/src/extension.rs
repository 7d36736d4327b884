//! [`HeldLock`]: the request extension that tells the inner service which lock it runs under.

use std::sync::Arc;

use lock_runtime::{LockError, LockGuard, TokenHandle};

use crate::access::Access;

/// The lock a request is being served under, inserted into the request's extensions before the
/// inner service is called.
///
/// Handlers use it to pass the fencing token to the storage they write (axum:
/// `Extension(held): Extension<HeldLock>`; tonic: `request.extensions().get::<HeldLock>()`).
///
/// Under a [`LockLayer`](crate::LockLayer) the token is issued on demand, like a
/// [`LockGuard`](lock_runtime::LockGuard)'s: the first
/// [`fencing_token`](HeldLock::fencing_token) asks Redis for it (one round trip, issued only
/// while the request's hold is ours), and every later call, from any clone, returns it. A
/// layer made [`fenced`](crate::LockLayer::fenced) takes its token with the grant, for
/// services that write a fenced store on every request. Under a
/// [`KeyedConcurrencyLimitLayer`](crate::KeyedConcurrencyLimitLayer) it describes the permit
/// the request holds, whose token always comes with the grant.
///
/// ```
/// # async fn demo(held: lock_tower::HeldLock) -> Result<(), lock_tower::LockError> {
/// let token = held.fencing_token().await?;
/// // UPDATE stock SET … , lock_token = token WHERE sku = … AND lock_token < token
/// assert_eq!(held.issued_token(), Some(token));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct HeldLock {
    tokens: TokenHandle,
    access: Option<Access>,
}

impl HeldLock {
    pub(crate) fn new(guard: &LockGuard, access: Option<Access>) -> HeldLock {
        HeldLock {
            tokens: guard.token_handle(),
            access,
        }
    }

    /// The lock name (for example `stock:42`).
    pub fn name(&self) -> &str {
        self.tokens.name()
    }

    /// The fencing token of this acquisition: strictly increasing per lock name. Send it with
    /// every write and have the storage reject writes with an older token.
    ///
    /// Issued with the grant under a [`fenced`](crate::LockLayer::fenced) layer, a read/write
    /// layer or a permit; otherwise the first call asks Redis (one round trip, checked
    /// against the holder in the same step) and caches it for the request. Both sides of a
    /// read/write lock share one counter: a writer's token is above every earlier reader's
    /// and writer's of the same name.
    ///
    /// # Errors
    /// [`LockError::Lost`] when the request's hold is lost, or over (the response was sent):
    /// no token is issued to a holder that lost its lock. A backend error when Redis could
    /// not be asked.
    pub async fn fencing_token(&self) -> Result<u64, LockError> {
        self.tokens.fencing_token().await
    }

    /// The fencing token if it has been issued already (with the grant, or by an earlier
    /// [`fencing_token`](HeldLock::fencing_token)); `None` otherwise. No round trip.
    pub fn issued_token(&self) -> Option<u64> {
        self.tokens.issued_token()
    }

    /// In [read/write mode](crate::LockLayer::read_write), the side the request holds; `None`
    /// under a mutex or a permit.
    pub fn access(&self) -> Option<Access> {
        self.access
    }
}

/// The locks a request is being served under by a [`MultiLockLayer`](crate::MultiLockLayer),
/// inserted into the request's extensions before the inner service is called: each lock name
/// with its fencing token, in the order the locks were taken (the global order of
/// [`MultiLock`](lock_runtime::MultiLock), duplicates removed). Cheap to clone.
///
/// Handlers pass each token to the storage they write, so that a write made under a lock that
/// has since been lost is refused (axum: `Extension(held): Extension<HeldLocks>`; tonic:
/// `request.extensions().get::<HeldLocks>()`).
///
/// ```
/// # fn demo(held: lock_tower::HeldLocks) {
/// for (name, token) in held.iter() {
///     println!("{name} is ours with fencing token {token}");
/// }
/// if let Some(token) = held.fencing_token("stock:sku-1") {
///     // UPDATE stock SET … WHERE sku = 'sku-1' AND fence < token
///     # let _ = token;
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLocks {
    locks: Arc<[(Arc<str>, u64)]>,
}

impl HeldLocks {
    #[cfg(test)]
    fn from_pairs(pairs: &[(&str, u64)]) -> HeldLocks {
        HeldLocks {
            locks: pairs.iter().map(|&(n, t)| (Arc::from(n), t)).collect(),
        }
    }

    pub(crate) fn new(guards: &[LockGuard]) -> HeldLocks {
        HeldLocks {
            locks: guards
                .iter()
                // The layer takes its locks fenced, and asks for the token of a name it
                // re-entered from an unfenced hold (`multi::service`): every guard has one.
                // The layer tests assert every token is positive.
                .map(|g| (Arc::from(g.name()), g.issued_token().unwrap_or(0)))
                .collect(),
        }
    }

    /// The fencing token of the lock named `name`, or `None` when the request does not hold it.
    ///
    /// Synchronous and infallible, unlike [`HeldLock::fencing_token`]: a
    /// [`MultiLockLayer`](crate::MultiLockLayer) has every token before the handler runs (taken
    /// with the grants), so there is nothing to ask Redis and nothing to fail. It does not
    /// check for a loss: the layer drops the handler's future when a lock is lost (answering
    /// 503), and a fenced store refuses a write whose token is older than one it has accepted.
    ///
    /// Either spelling of the name is accepted: the lock name as the runtime holds it, with
    /// the template's values [escaped](crate::name::escape) (`stock:E%3A1`), or as you would
    /// write it by hand from the raw values (`stock:E:1`, for a SKU `E:1` under the template
    /// `"stock:<items[].sku>"`). The escaped spelling is matched first; a raw spelling matches
    /// a held name whose `%XX` sequences decode to it. Should two held names decode to the same
    /// raw spelling (`a%3Ab:c` and `a:b%3Ac` both read `a:b:c`), the raw spelling is ambiguous
    /// and answers `None`: use the escaped one. (A linear search: a request holds at most
    /// [`max_names`](crate::MultiLockLayer::max_names) locks.)
    ///
    /// ```
    /// # fn demo(held: lock_tower::HeldLocks) {
    /// // Both find the lock on SKU `E:1` taken under the template "stock:<items[].sku>".
    /// let escaped = held.fencing_token("stock:E%3A1");
    /// let raw = held.fencing_token("stock:E:1");
    /// assert_eq!(escaped, raw);
    /// # }
    /// ```
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        if let Some((_, token)) = self.iter().find(|(n, _)| *n == name) {
            return Some(token);
        }
        let mut raw = self.iter().filter(|(n, _)| {
            n.contains('%') && *crate::name::percent_decode(n) == *name.as_bytes()
        });
        match (raw.next(), raw.next()) {
            (Some((_, token)), None) => Some(token),
            _ => None,
        }
    }

    /// Each lock name with its fencing token, in the order the locks were taken.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, u64)> + '_ {
        self.locks.iter().map(|(name, token)| (&**name, *token))
    }

    /// The lock names, in the order the locks were taken.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.locks.iter().map(|(name, _)| &**name)
    }

    /// How many locks the request holds (at least one).
    pub fn len(&self) -> usize {
        self.locks.len()
    }

    /// Whether the request holds no lock: never for a request served by a
    /// [`MultiLockLayer`](crate::MultiLockLayer).
    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::HeldLocks;
    use crate::name::escape;

    #[test]
    fn fencing_token_accepts_the_escaped_and_the_raw_name() {
        let escaped = format!("stock:{}", escape("E:1"));
        assert_eq!(escaped, "stock:E%3A1");
        let held = HeldLocks::from_pairs(&[("stock:plain", 7), (&escaped, 9)]);
        assert_eq!(held.fencing_token("stock:E%3A1"), Some(9));
        assert_eq!(held.fencing_token("stock:E:1"), Some(9));
        assert_eq!(held.fencing_token("stock:plain"), Some(7));
        assert_eq!(held.fencing_token("stock:E:2"), None);
        assert_eq!(held.fencing_token("stock:other"), None);
    }

    #[test]
    fn an_ambiguous_raw_name_answers_none_and_the_escaped_names_still_answer() {
        let held = HeldLocks::from_pairs(&[("a%3Ab:c", 1), ("a:b%3Ac", 2)]);
        assert_eq!(held.fencing_token("a:b:c"), None);
        assert_eq!(held.fencing_token("a%3Ab:c"), Some(1));
        assert_eq!(held.fencing_token("a:b%3Ac"), Some(2));
    }

    #[test]
    fn a_held_name_that_is_itself_raw_wins_over_a_decoded_one() {
        let held = HeldLocks::from_pairs(&[("a:b", 1), ("a%3Ab", 2)]);
        assert_eq!(held.fencing_token("a:b"), Some(1));
        assert_eq!(held.fencing_token("a%3Ab"), Some(2));
    }
}
