//! [`LockInfo`]: what [`Lock::info`] reads of a lock (holders, lease, fencing token, waiters)
//! and which member of the family the data says it is.

use std::fmt;
use std::time::Duration;

use crate::backend::LockState;
use crate::keys::LockNames;
use crate::keys::{Family, Mode};
use crate::{Lock, LockError};

/// At most this many holders are listed by [`Lock::info`]; [`LockInfo::holder_count`] counts
/// them all.
pub const MAX_LISTED_HOLDERS: u32 = 1000;

/// Which member of the lock family a name is used as, as read from Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// A [`Lock`] made by [`LockClient::lock`](crate::LockClient::lock).
    Mutex,
    /// A fair lock ([`LockClient::fair_lock`](crate::LockClient::fair_lock)). On Redis a fair
    /// lock is the mutex's hash plus a queue that exists only while someone waits, so a fair
    /// lock nobody waits for reads as a [`Mutex`](LockKind::Mutex) unless the handle asked is a
    /// fair lock.
    Fair,
    /// A read/write lock ([`RwLock`](crate::RwLock)).
    ReadWrite,
    /// A semaphore ([`Semaphore`](crate::Semaphore)).
    Semaphore,
}

impl LockKind {
    /// A short name: `mutex`, `fair`, `read-write` or `semaphore`.
    ///
    /// ```
    /// assert_eq!(lock_runtime::LockKind::ReadWrite.as_str(), "read-write");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Mutex => "mutex",
            LockKind::Fair => "fair",
            LockKind::ReadWrite => "read-write",
            LockKind::Semaphore => "semaphore",
        }
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// How a holder holds a lock, as its owner id says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HoldMode {
    /// The whole lock (a mutex or a fair lock).
    Exclusive,
    /// The read side of a read/write lock.
    Read,
    /// The write side of a read/write lock.
    Write,
    /// This many permits of a semaphore.
    Permits(u32),
}

impl fmt::Display for HoldMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HoldMode::Exclusive => f.pad("exclusive"),
            HoldMode::Read => f.pad("read"),
            HoldMode::Write => f.pad("write"),
            HoldMode::Permits(1) => f.pad("1 permit"),
            HoldMode::Permits(n) => f.pad(&format!("{n} permits")),
        }
    }
}

/// One holder of a lock, as [`Lock::info`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The owner id written to Redis: `<client id>:<acquisition>`, with `#r`, `#w` or
    /// `#<permits>` for a reader, a writer or a semaphore's permits. (In Redisson's layout a
    /// reader is `<client id>:<n>` and a writer `<client id>:<n>:write`, Java's included.)
    pub owner: String,
    /// How it holds the lock.
    pub mode: HoldMode,
    /// What is left of its lease (`None` for a hash without a TTL, which is not ours).
    pub remaining: Option<Duration>,
}

impl Holder {
    /// The id of the [`LockClient`](crate::LockClient) that holds it (see
    /// [`LockClient::id`](crate::LockClient::id)), when the owner id has the runtime's form.
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let guard = locks.lock("stock:42").acquire().await?;
    /// let info = locks.lock("stock:42").info().await?.expect("held");
    /// assert_eq!(info.holders[0].client_id(), Some(locks.id()));
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn client_id(&self) -> Option<&str> {
        crate::keys::owner::client_id(&self.owner)
    }
}

/// Who waits for a lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiters {
    /// Waiters with a place in Redis: a fair lock's queue, or a read/write lock's waiting
    /// writers. Exact.
    pub queued: usize,
    /// Connections subscribed to the lock's unlock channel (`PUBSUB NUMSUB`, or
    /// `PUBSUB SHARDNUMSUB` on a cluster). Every waiting task of one client shares one
    /// subscription, so this counts the *processes* (clients) that wait, not their tasks; and a
    /// client unsubscribes shortly after its last waiter stops, so it may lag by a moment.
    pub subscribed: usize,
}

/// What [`Lock::info`] found: a held lock's holders, lease, fencing token and waiters, read in
/// one atomic step.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock name.
    pub name: String,
    /// Its Redis key (prefix included).
    pub key: String,
    /// Which member of the lock family it is.
    pub kind: LockKind,
    /// Its holders (at most [`MAX_LISTED_HOLDERS`]).
    pub holders: Vec<Holder>,
    /// How many holders there are in all.
    pub holder_count: usize,
    /// How long until the lock falls free if nobody renews it: the key's TTL, or the end of the
    /// last holder's lease (`None` for a hash without a TTL, which is not ours).
    pub remaining: Option<Duration>,
    /// The fencing token last issued for this name (to the current holder, unless a grant was
    /// rolled back), if the fencing counter is there.
    pub fencing_token: Option<u64>,
    /// Who waits.
    pub waiters: Waiters,
    /// A semaphore's capacity stored in Redis ([`Semaphore::set_capacity`](crate::Semaphore::set_capacity));
    /// `None` when each handle's own applies.
    pub capacity: Option<u32>,
}

impl LockInfo {
    /// At least how many *tasks* wait for the lock: a lower bound, exact for a fair lock.
    ///
    /// Redis knows waiting tasks one by one only where each has a place there: a fair lock's
    /// queue (one entry per waiting task) and a read/write lock's waiting writers. Elsewhere it
    /// knows only the clients subscribed to the unlock channel, and every waiting task of one
    /// client shares its client's one subscription; so a subscribed client counts as one task.
    /// Per kind:
    ///
    /// | kind | `waiting()` | exact? |
    /// |---|---|---|
    /// | [`Fair`](LockKind::Fair) | the queue's length ([`Waiters::queued`]) | yes: one per task |
    /// | [`ReadWrite`](LockKind::ReadWrite) | the larger of the waiting writers and the subscribed clients | no: 3 readers waiting in one client count 1 |
    /// | [`Mutex`](LockKind::Mutex), [`Semaphore`](LockKind::Semaphore) | the subscribed clients ([`Waiters::subscribed`]) | no: 3 tasks waiting in one client count 1 |
    ///
    /// So two tasks of one client waiting for a mutex read `1`, for a fair lock `2`. A client
    /// unsubscribes shortly after its last waiter stops, and a fair lock's place lasts a few
    /// seconds after its task gave up, so the figure may also lag behind by a moment. For
    /// "how many processes wait", read [`Waiters::subscribed`] (not for a fair lock in the
    /// Redisson layout, whose waiters each listen on a channel of their own).
    pub fn waiting(&self) -> usize {
        match self.kind {
            LockKind::Fair => self.waiters.queued,
            _ => self.waiters.queued.max(self.waiters.subscribed),
        }
    }

    /// The permits held, for a semaphore (the sum over the listed holders).
    pub fn permits_held(&self) -> u64 {
        self.holders
            .iter()
            .map(|h| match h.mode {
                HoldMode::Permits(n) => u64::from(n),
                _ => 0,
            })
            .sum()
    }

    fn from_state(names: &LockNames, mut state: LockState) -> LockInfo {
        // Redisson's read/write lock read through another handle of the name (`lock(name)`, as
        // `lockctl --redisson` reads every lock): a hash whose `mode` field is no holder, and
        // whose values are hold counts, not leases.
        let foreign_rw = names.scheme.reads_foreign_rw_hash(&state.kind, || {
            state.holders.iter().any(|(field, _)| field == "mode")
        });
        if foreign_rw {
            state.holders.retain(|(field, _)| field != "mode");
            state.holder_count = state.holder_count.saturating_sub(1);
        }
        let kind = if foreign_rw || names.scheme.holds_rw_hash(&state.kind) {
            // (Read through its own handle, its script lists the holders with the milliseconds
            // left of each, `mode` left out.)
            LockKind::ReadWrite
        } else {
            kind_of(&state, names.family())
        };
        let remaining = (state.pttl > 0).then(|| Duration::from_millis(state.pttl as u64));
        let holders = state
            .holders
            .into_iter()
            .map(|(owner, detail)| {
                let (mode, remaining) = match kind {
                    LockKind::Mutex | LockKind::Fair => (HoldMode::Exclusive, remaining),
                    LockKind::ReadWrite if foreign_rw => {
                        let mode = match crate::keys::owner::rw_mode_of(&owner) {
                            Mode::Write => HoldMode::Write,
                            _ => HoldMode::Read,
                        };
                        (mode, remaining)
                    }
                    LockKind::ReadWrite | LockKind::Semaphore => {
                        let mode = match names.mode_of(&owner) {
                            Mode::Read => HoldMode::Read,
                            Mode::Write => HoldMode::Write,
                            Mode::Permits(n) => HoldMode::Permits(n),
                            // The semaphore script counts a member without `#n` as one permit.
                            Mode::Exclusive => HoldMode::Permits(1),
                        };
                        (mode, Some(Duration::from_millis(detail.max(0) as u64)))
                    }
                };
                Holder {
                    owner,
                    mode,
                    remaining,
                }
            })
            .collect();
        let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        LockInfo {
            name: names.name.clone(),
            key: names.key.clone(),
            kind,
            holders,
            holder_count: count(state.holder_count),
            remaining,
            fencing_token: state.token.and_then(|t| u64::try_from(t).ok()),
            waiters: Waiters {
                queued: count(state.queued.max(state.writers)),
                subscribed: count(state.subscribers),
            },
            capacity: state.capacity,
        }
    }
}

/// Which member of the family the data says it is; the handle's family decides what the data
/// cannot (a fair lock nobody waits for, a sorted set without holders' modes).
fn kind_of(state: &LockState, family: Family) -> LockKind {
    if state.kind == "string" {
        return LockKind::Mutex;
    }
    if state.kind == "hash" {
        return if family == Family::Fair || state.queued > 0 {
            LockKind::Fair
        } else {
            LockKind::Mutex
        };
    }
    let modes = || state.holders.iter().map(|(owner, _)| Mode::of_owner(owner));
    if modes().any(|m| matches!(m, Mode::Read | Mode::Write)) {
        return LockKind::ReadWrite;
    }
    if modes().any(|m| matches!(m, Mode::Permits(_))) || state.capacity.is_some() {
        return LockKind::Semaphore;
    }
    if family == Family::ReadWrite || state.writers > 0 {
        LockKind::ReadWrite
    } else {
        LockKind::Semaphore
    }
}

impl Lock {
    /// Who holds the lock, for how long, the fencing token last issued, and who waits; `None`
    /// when nobody holds it. One round trip, read atomically; nothing is changed.
    ///
    /// Works for every member of the family whatever the handle (a
    /// [`lock`](crate::LockClient::lock) handle on a semaphore's name reports the semaphore), on
    /// every topology. [`LockError::ForeignData`] when the key holds data of another type.
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// match locks.lock("stock:42").info().await? {
    ///     Some(info) => println!(
    ///         "{} held by {:?} for {:?} more, token {:?}, {} waiting",
    ///         info.name,
    ///         info.holders.iter().map(|h| &h.owner).collect::<Vec<_>>(),
    ///         info.remaining,
    ///         info.fencing_token,
    ///         info.waiting(),
    ///     ),
    ///     None => println!("free"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn info(&self) -> Result<Option<LockInfo>, LockError> {
        let names = self.names()?;
        let state = self.state(MAX_LISTED_HOLDERS).await?;
        Ok(state.held().then(|| LockInfo::from_state(names, state)))
    }

    /// The lock's state as the backend reads it, with at most `max_holders` holders listed;
    /// data of another type at the key is [`LockError::ForeignData`].
    pub(crate) async fn state(&self, max_holders: u32) -> Result<LockState, LockError> {
        let names = self.names()?;
        let state = self
            .client()
            .inner
            .backend
            .inspect(names, max_holders)
            .await
            .map_err(|e| LockError::backend("inspect", e))?;
        match state.kind.as_str() {
            // A string is this crate's mutex when the script found its holder in it.
            "none" | "hash" | "zset" => Ok(state),
            "string" if state.holder_count > 0 => Ok(state),
            _ => Err(LockError::ForeignData {
                key: names.key.clone(),
                found: state.kind,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_name_their_client() {
        let holder = |owner: &str| Holder {
            owner: owner.into(),
            mode: HoldMode::Exclusive,
            remaining: None,
        };
        assert_eq!(holder("abc:7").client_id(), Some("abc"));
        assert_eq!(holder("abc:7#r").client_id(), Some("abc"));
        assert_eq!(holder("abc:7#12").client_id(), Some("abc"));
        assert_eq!(holder("foreign").client_id(), None);
    }

    #[test]
    fn the_kind_comes_from_the_data_first() {
        let state = |kind: &str, owners: &[&str]| LockState {
            kind: kind.into(),
            holders: owners.iter().map(|o| (o.to_string(), 1)).collect(),
            holder_count: owners.len() as u64,
            ..LockState::default()
        };
        assert_eq!(
            kind_of(&state("hash", &["c:1"]), Family::Mutex),
            LockKind::Mutex
        );
        assert_eq!(
            kind_of(&state("hash", &["c:1"]), Family::Fair),
            LockKind::Fair
        );
        let queued = LockState {
            queued: 2,
            ..state("hash", &["c:1"])
        };
        assert_eq!(kind_of(&queued, Family::Mutex), LockKind::Fair);
        assert_eq!(
            kind_of(&state("zset", &["c:1#r"]), Family::Mutex),
            LockKind::ReadWrite
        );
        assert_eq!(
            kind_of(&state("zset", &["c:1#3"]), Family::ReadWrite),
            LockKind::Semaphore
        );
    }
}
