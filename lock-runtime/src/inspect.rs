//! Looking at locks from the outside: [`Lock::info`] (who holds a lock, for how long, its last
//! fencing token, who waits) and [`LockClient::scan`] (the names of the locks under the
//! client's prefix, found with `SCAN`). What `lockctl` shows is read through these.
//!
//! Both read the layout the lock family writes (see `family.rs` and `names.rs`) and nothing
//! else: a key under the prefix that is not a lock's is reported, never touched, and data of
//! another type at a lock's key is [`LockError::ForeignData`].

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::time::Duration;

use crate::backend::{LockState, ScanNode};
use crate::keys::{Family, Mode};
use crate::keys::{LockNames, Scheme};
use crate::{Lock, LockClient, LockError};

/// At most this many holders are listed by [`Lock::info`]; [`LockInfo::holder_count`] counts
/// them all.
pub const MAX_LISTED_HOLDERS: u32 = 1000;

/// How many keys one `SCAN` call looks at by default (its `COUNT`).
const DEFAULT_SCAN_COUNT: u32 = 250;

/// How many keys that belong to no lock a [`LockScan`] remembers.
const MAX_UNKNOWN_KEYS: usize = 100;

/// Which member of the lock family a name is used as, as read from Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// A [`Lock`] made by [`LockClient::lock`].
    Mutex,
    /// A fair lock ([`LockClient::fair_lock`]). On Redis a fair lock is the mutex's hash plus a
    /// queue that exists only while someone waits, so a fair lock nobody waits for reads as a
    /// [`Mutex`](LockKind::Mutex) unless the handle asked is a fair lock.
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
    /// The id of the [`LockClient`] that holds it (see [`LockClient::id`]), when the owner id
    /// has the runtime's form.
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let guard = locks.lock("stock:42").acquire().await?;
    /// let info = locks.lock("stock:42").info().await?.expect("held");
    /// assert_eq!(info.holders[0].client_id(), Some(locks.id()));
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn client_id(&self) -> Option<&str> {
        let base = match self.owner.rsplit_once('#') {
            Some((base, "r" | "w")) => base,
            Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => base,
            _ => &self.owner,
        };
        // A writer of Redisson's read/write lock: `<client>:<n>:write`.
        let base = base
            .strip_suffix(crate::keys::redisson::WRITER)
            .unwrap_or(base);
        base.rsplit_once(':')
            .map(|(client, _)| client)
            .filter(|c| !c.is_empty())
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
    /// One number for "how many wait": a fair lock's queue length; otherwise the larger of the
    /// waiting writers and the subscribed connections (see [`Waiters`]).
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
        let foreign_rw = names.scheme.layout() == crate::Layout::Redisson
            && names.scheme != Scheme::RedissonReadWrite
            && state.kind == "hash"
            && state.holders.iter().any(|(field, _)| field == "mode");
        if foreign_rw {
            state.holders.retain(|(field, _)| field != "mode");
            state.holder_count = state.holder_count.saturating_sub(1);
        }
        let kind =
            if foreign_rw || (names.scheme == Scheme::RedissonReadWrite && state.kind == "hash") {
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
                        let mode = match crate::keys::redisson::rw_mode_of(&owner) {
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
    /// [`lock`](LockClient::lock) handle on a semaphore's name reports the semaphore), on every
    /// topology. [`LockError::ForeignData`] when the key holds data of another type.
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
            "none" | "hash" | "zset" => Ok(state),
            _ => Err(LockError::ForeignData {
                key: names.key.clone(),
                found: state.kind,
            }),
        }
    }
}

impl LockClient {
    /// The names of the locks under this client's prefix whose name matches `pattern` (a glob
    /// as Redis reads them: `*`, `?`, `[a-z]`, `[^x]`, `\` escapes; `*` for every lock), found
    /// with `SCAN` in bounded batches (on a cluster: on every master), so Redis is never
    /// blocked the way `KEYS` would block it.
    ///
    /// Every member of the family is found (mutexes, fair locks, read/write locks,
    /// semaphores), each once, while it is held. Keys under the prefix that are a lock's other
    /// keys (fencing counter, queue, …) are skipped; keys that belong to no lock are skipped
    /// and reported by [`LockScan::unknown_keys`]. Like `SCAN`, a lock taken or released
    /// during the scan may or may not be listed.
    ///
    /// With [`Layout::Redisson`](crate::Layout::Redisson) locks are not under a prefix: the
    /// scan's first batch is a [`LockError::InvalidConfig`].
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let mut scan = locks.scan("stock:*");
    /// while let Some(names) = scan.next_batch().await? {
    ///     for name in names {
    ///         if let Some(info) = locks.lock(&name).info().await? {
    ///             println!("{name}: {} holder(s)", info.holder_count);
    ///         }
    ///     }
    /// }
    /// // Or at most 100 names at once:
    /// let first = locks.scan("*").collect_up_to(100).await?;
    /// # let _ = first; Ok(()) }
    /// ```
    pub fn scan(&self, pattern: &str) -> LockScan {
        let prefix = &self.inner.config.prefix;
        LockScan {
            client: self.clone(),
            pattern: pattern.chars().collect(),
            key_pattern: format!("{}:*", escape_glob(prefix)),
            count: DEFAULT_SCAN_COUNT,
            nodes: None,
            node: 0,
            cursor: 0,
            pending: VecDeque::new(),
            seen: HashSet::new(),
            unknown: Vec::new(),
            unknown_count: 0,
            done: false,
        }
    }
}

/// A scan of the lock names under a client's prefix; made by [`LockClient::scan`].
pub struct LockScan {
    client: LockClient,
    pattern: Vec<char>,
    key_pattern: String,
    count: u32,
    nodes: Option<Vec<ScanNode>>,
    node: usize,
    cursor: u64,
    /// Names found but not handed out yet (by [`LockScan::collect_up_to`]).
    pending: VecDeque<String>,
    /// Names handed out: `SCAN` may return a key twice.
    seen: HashSet<String>,
    unknown: Vec<String>,
    unknown_count: usize,
    done: bool,
}

impl LockScan {
    /// How many keys each `SCAN` call looks at (its `COUNT` hint; default 250, at least 1).
    /// Larger batches mean fewer round trips and longer (still short) commands on the server.
    pub fn batch_size(mut self, count: u32) -> LockScan {
        self.count = count.max(1);
        self
    }

    /// The next batch of lock names (one `SCAN` call; a batch may be empty while the scan goes
    /// on), or `None` when every key was looked at.
    pub async fn next_batch(&mut self) -> Result<Option<Vec<String>>, LockError> {
        if !self.pending.is_empty() {
            return Ok(Some(self.pending.drain(..).collect()));
        }
        if !self.client.inner.config.layout.has_prefix() {
            return Err(LockError::InvalidConfig(
                "a scan lists the locks under the client's prefix, and Redisson's layout has none"
                    .into(),
            ));
        }
        let backend = self.client.inner.backend.clone();
        let nodes = match &self.nodes {
            Some(nodes) => nodes,
            None => {
                let nodes = backend
                    .scan_nodes()
                    .await
                    .map_err(|e| LockError::backend("scan", e))?;
                self.nodes.insert(nodes)
            }
        };
        let Some(&node) = nodes.get(self.node) else {
            self.done = true;
            return Ok(None);
        };
        let (cursor, keys) = backend
            .scan(node, self.cursor, &self.key_pattern, self.count)
            .await
            .map_err(|e| LockError::backend("scan", e))?;
        if cursor == 0 {
            self.node += 1;
        }
        self.cursor = cursor;
        let client = self.client.clone();
        let prefix = &client.inner.config.prefix;
        let mut names = Vec::new();
        for key in keys {
            let Ok(key) = String::from_utf8(key) else {
                self.note_unknown(None);
                continue;
            };
            match classify(prefix, &key) {
                KeyRole::Lock(name) => {
                    if glob_match(&self.pattern, &name) && self.seen.insert(name.clone()) {
                        names.push(name);
                    }
                }
                KeyRole::Companion => {}
                KeyRole::Unknown => self.note_unknown(Some(key)),
            }
        }
        Ok(Some(names))
    }

    /// Up to `limit` more names, scanning as many batches as that takes; fewer only when the
    /// scan is done. Names beyond `limit` found by the last batch are kept for the next call.
    pub async fn collect_up_to(&mut self, limit: usize) -> Result<Vec<String>, LockError> {
        let mut out = Vec::new();
        while out.len() < limit {
            let Some(batch) = self.next_batch().await? else {
                break;
            };
            self.pending.extend(batch);
            while out.len() < limit {
                match self.pending.pop_front() {
                    Some(name) => out.push(name),
                    None => break,
                }
            }
        }
        Ok(out)
    }

    /// Whether every key was looked at and every name handed out.
    pub fn is_done(&self) -> bool {
        self.done && self.pending.is_empty()
    }

    /// Keys under the prefix seen so far that belong to no lock (not a lock's key, nor its
    /// fencing counter, queue or other keys): another application's data under the same
    /// prefix, or a lock of a newer layout. The first 100; see
    /// [`unknown_key_count`](LockScan::unknown_key_count) for how many.
    pub fn unknown_keys(&self) -> &[String] {
        &self.unknown
    }

    /// How many keys under the prefix seen so far belong to no lock (including keys that are
    /// not UTF-8).
    pub fn unknown_key_count(&self) -> usize {
        self.unknown_count
    }

    fn note_unknown(&mut self, key: Option<String>) {
        self.unknown_count += 1;
        if let Some(key) = key
            && self.unknown.len() < MAX_UNKNOWN_KEYS
        {
            self.unknown.push(key);
        }
    }
}

impl fmt::Debug for LockScan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockScan")
            .field("pattern", &self.pattern.iter().collect::<String>())
            .field("node", &self.node)
            .field("cursor", &self.cursor)
            .field("done", &self.is_done())
            .finish_non_exhaustive()
    }
}

/// What a key under the prefix is.
#[derive(Debug, PartialEq, Eq)]
enum KeyRole {
    /// The main key of the lock with this name.
    Lock(String),
    /// Another key of a lock (fencing counter, queue, places, waiting writers, capacity).
    Companion,
    /// No lock's.
    Unknown,
}

/// The keys a lock has besides its main key (`names.rs`, `family.rs`).
const ROLES: [&str; 6] = ["fence", "unlock", "queue", "places", "writers", "capacity"];

fn classify(prefix: &str, key: &str) -> KeyRole {
    if let Some(name) = lock_name_of(prefix, key) {
        return KeyRole::Lock(name);
    }
    let Some(rest) = key.strip_prefix(prefix).and_then(|r| r.strip_prefix(':')) else {
        return KeyRole::Unknown;
    };
    for role in ROLES {
        // `P:{N}:role` and `P:%{E}:role`.
        if let Some(base) = key.strip_suffix(role).and_then(|b| b.strip_suffix(':'))
            && let Some(name) = lock_name_of(prefix, base)
            && LockNames::new(prefix, &name).is_ok_and(|n| n.role(role) == key)
        {
            return KeyRole::Companion;
        }
        // `P:role:#N`.
        if let Some(name) = rest.strip_prefix(role).and_then(|r| r.strip_prefix(":#"))
            && LockNames::new(prefix, name).is_ok_and(|n| n.role(role) == key)
        {
            return KeyRole::Companion;
        }
    }
    KeyRole::Unknown
}

/// The lock name whose main key is `key`, if any: the inverse of `LockNames::new`, checked by
/// deriving the key again (so no other key of any name is mistaken for a lock).
fn lock_name_of(prefix: &str, key: &str) -> Option<String> {
    let rest = key.strip_prefix(prefix)?.strip_prefix(':')?;
    let name = if let Some(escaped) = rest.strip_prefix("%{").and_then(|r| r.strip_suffix('}')) {
        unescape(escaped)?
    } else if let Some(wrapped) = rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        wrapped.to_owned()
    } else {
        rest.strip_prefix('#')?.to_owned()
    };
    (LockNames::new(prefix, &name).ok()?.key == key).then_some(name)
}

/// Undoes `names.rs`' escape (`%25` → `%`, `%7D` → `}`); `None` for any other `%`.
fn unescape(escaped: &str) -> Option<String> {
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 3)?;
        out.push(match code {
            "25" => '%',
            "7D" => '}',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// `text` with every glob metacharacter escaped, for `SCAN … MATCH`.
fn escape_glob(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Whether `text` matches the glob `pattern`: `*` any run, `?` any one character, `[abc]`,
/// `[a-z]`, `[^x]` (or `[!x]`) a class, `\c` the character `c`. An unclosed class runs to the
/// end of the pattern. Backtracks only to the last `*`, so it takes linear-times-pattern time.
fn glob_match(pattern: &[char], text: &str) -> bool {
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if pattern.get(p) == Some(&'*') {
            star = Some((p, t));
            p += 1;
            continue;
        }
        if let Some(next) = match_one(pattern, p, text[t]) {
            p = next;
            t += 1;
            continue;
        }
        match star {
            // Let the last `*` take one more character and try again from there.
            Some((star_p, star_t)) => {
                p = star_p + 1;
                t = star_t + 1;
                star = Some((star_p, star_t + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// If the pattern element at `p` (not a `*`) matches `c`, where the next element starts.
fn match_one(pattern: &[char], p: usize, c: char) -> Option<usize> {
    match *pattern.get(p)? {
        '?' => Some(p + 1),
        '\\' if p + 1 < pattern.len() => (pattern[p + 1] == c).then_some(p + 2),
        '[' => {
            let mut i = p + 1;
            let negated = matches!(pattern.get(i), Some('^' | '!'));
            if negated {
                i += 1;
            }
            let mut matched = false;
            while let Some(&first) = pattern.get(i) {
                if first == ']' {
                    break;
                }
                let first = if first == '\\' && i + 1 < pattern.len() {
                    i += 1;
                    pattern[i]
                } else {
                    first
                };
                if pattern.get(i + 1) == Some(&'-')
                    && let Some(&last) = pattern.get(i + 2)
                    && last != ']'
                {
                    let (low, high) = if first <= last {
                        (first, last)
                    } else {
                        (last, first)
                    };
                    matched |= (low..=high).contains(&c);
                    i += 3;
                } else {
                    matched |= first == c;
                    i += 1;
                }
            }
            (matched != negated).then_some((i + 1).min(pattern.len()))
        }
        literal => (literal == c).then_some(p + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(pattern: &str, text: &str) -> bool {
        glob_match(&pattern.chars().collect::<Vec<_>>(), text)
    }

    #[test]
    fn globs_match_like_redis() {
        assert!(glob("*", ""));
        assert!(glob("*", "stock:42"));
        assert!(glob("stock:*", "stock:42"));
        assert!(!glob("stock:*", "order:1"));
        assert!(glob("stock:4?", "stock:42"));
        assert!(!glob("stock:4?", "stock:4"));
        assert!(glob("*:42", "stock:42"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
        assert!(glob("s[tu]ock", "stock"));
        assert!(glob("s[^u]ock", "stock"));
        assert!(!glob("s[!t]ock", "stock"));
        assert!(glob("[a-z]1", "q1"));
        assert!(!glob("[a-z]1", "Q1"));
        assert!(glob("\\*x", "*x"));
        assert!(!glob("\\*x", "ax"));
        assert!(glob("order:{user:*}", "order:{user:7}"));
        // Malformed patterns never panic.
        for bad in ["[", "[a-", "\\", "[\\", "[]", "[^"] {
            let _ = glob(bad, "a");
            let _ = glob(bad, "");
        }
    }

    /// Names that imitate the layout, as in `names.rs`' tests.
    fn tricky_names() -> Vec<String> {
        const PIECES: [&str; 12] = [
            "a", "{", "}", ":", "#", "%", "{u}", "fence", ":queue", "%7D", "%25", "lock:",
        ];
        let mut names: Vec<String> = PIECES.iter().map(|p| p.to_string()).collect();
        let mut last = names.clone();
        for _ in 1..3 {
            last = last
                .iter()
                .flat_map(|n| PIECES.iter().map(move |p| format!("{n}{p}")))
                .collect();
            names.extend(last.iter().cloned());
        }
        names
    }

    #[test]
    fn every_key_maps_back_to_its_name_or_role() {
        for name in tricky_names() {
            let n = LockNames::new("lock", &name).unwrap();
            assert_eq!(
                classify("lock", &n.key),
                KeyRole::Lock(name.clone()),
                "{name:?}: {:?}",
                n.key
            );
            for role in ROLES {
                assert_eq!(
                    classify("lock", &n.role(role)),
                    KeyRole::Companion,
                    "{name:?}: {role}"
                );
            }
            assert_eq!(classify("lock", &n.fence), KeyRole::Companion);
        }
    }

    #[test]
    fn keys_of_no_lock_are_unknown() {
        for key in [
            "lock:plain",
            "lock:",
            "lock:{",
            "lock:{}x}",
            "lock:#no-tag",
            "lock:%{bad%zz}",
            "lock:%{x}",
            "lock:{a}:other",
            "lock:fence:#no-tag",
            "lockx:{a}",
            "other:{a}",
        ] {
            assert_eq!(classify("lock", key), KeyRole::Unknown, "{key:?}");
        }
        // A prefix with glob characters is matched literally by SCAN.
        assert_eq!(escape_glob("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }

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
