//! [`LockClient::scan`]: the names of the locks under a client's prefix, found with `SCAN` in
//! bounded batches; which keys are a lock's main key, its other keys, or no lock's; and the
//! glob a name is matched against.

use std::collections::{HashSet, VecDeque};
use std::fmt;

use crate::backend::ScanNode;
use crate::keys::{KeyRole, LockNames};
use crate::{LockClient, LockError};

/// How many keys one `SCAN` call looks at by default (its `COUNT`).
const DEFAULT_SCAN_COUNT: u32 = 250;

/// How many keys that belong to no lock a [`LockScan`] remembers.
const MAX_UNKNOWN_KEYS: usize = 100;

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
            match LockNames::parse(prefix, &key) {
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

    #[test]
    fn a_prefix_with_glob_characters_is_matched_literally() {
        assert_eq!(escape_glob("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
