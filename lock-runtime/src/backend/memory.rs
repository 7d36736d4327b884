//! A backend that is not Redis: locks in a map, leases on tokio's clock, unlock messages
//! delivered straight to every client's demultiplexer. The acquire loop, guards, the watchdog
//! and the releaser run against it unchanged, under real or paused time; the public handle is
//! [`MemoryLocks`](crate::MemoryLocks) (feature `memory`), and the runtime's own unit tests use
//! it too.
//!
//! It keeps the mutex protocol of the Lua scripts (`acquire.lua`, `release.lua`, `renew.lua`,
//! `force_unlock.lua`, `inspect.lua`): one owner per lock with a lease, re-taking our own hold
//! is idempotent, every grant bumps the name's fencing counter, a release or force-unlock
//! publishes an unlock message, a release may hand the lock to a waiting task of the releasing
//! client unless that client must yield to another process that waits (`HandOff::yield_ms`).
//! Fair locks, read/write locks and semaphores are not implemented: [`Backend::supports`] says
//! so, and the lock refuses them with `LockError::Unsupported` before anything is sent.
//!
//! Faults for tests: [`MemoryBackend::fail_next_acquire`] (busy, or the server unreachable),
//! [`MemoryBackend::lose`] (the lock taken away behind its holder's back),
//! [`MemoryBackend::hang_renewals`] (renewals never answer).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use redis::aio::AsyncPushSender;
use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{
    Acked, Backend, BoxFuture, CapacityOp, Channels, GroupDone, HandOff, LockState, Release, Reply,
    ScanNode,
};
use crate::family::Family;
use crate::names::LockNames;
use crate::sync;

/// What the next acquire attempt of a lock meets instead of the lock's real state.
///
/// Queued with [`MemoryLocks::fail_next_acquire`](crate::MemoryLocks::fail_next_acquire) or
/// [`fail_next_acquire_of_any`](crate::MemoryLocks::fail_next_acquire_of_any); each queued
/// fault is used by one acquire attempt, in the order they were queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fault {
    /// The next attempt that finds the lock free finds it held by another owner instead: the
    /// lock is granted to a stand-in owner (of no client, owner id `memory-fault:busy`, with a
    /// fresh fencing token) for the given lease, which then runs out like any lease (no unlock
    /// message). A `try_acquire(Duration::ZERO)`, or a wait shorter than the lease, fails with
    /// [`LockError::WaitTimeout`](crate::LockError::WaitTimeout) (its
    /// [`is_busy`](crate::LockError::is_busy) is true, its
    /// [`retry_after`](crate::LockError::retry_after) the lease left); a longer wait gets the
    /// lock when the lease ends, or at once when the lock is force-unlocked or
    /// [lost](crate::MemoryLocks::lose). Every client sees the lock busy meanwhile.
    Busy(Duration),
    /// The attempt fails as if the Redis server were down (the connection refused): the
    /// acquisition retries the way it would on Redis, fails with
    /// [`LockError::Backend`](crate::LockError::Backend), whose
    /// [`is_unavailable`](crate::LockError::is_unavailable) is true, and holds nothing.
    Unavailable,
}

/// One held lock.
struct Hold {
    name: String,
    owner: String,
    token: i64,
    until: Instant,
}

/// A client's refusal to take a lock for a while, after it handed the lock on locally as often
/// as it may in a row while another process waited (see `yield` in `prelude.lua`).
struct Yielded {
    client: String,
    until: Instant,
}

/// A connected client: where its unlock messages go and how to make its watchdog renew now.
struct Subscriber {
    router: Box<dyn AsyncPushSender>,
    renew_now: Weak<Notify>,
}

#[derive(Default)]
struct State {
    holds: HashMap<String, Hold>,
    /// The fencing counter of each key.
    tokens: HashMap<String, i64>,
    /// The name and unlock channel of each key ever used.
    names: HashMap<String, (String, String)>,
    /// Subscribed connections (client connection ids) per unlock channel.
    subscriptions: HashMap<String, HashSet<u64>>,
    yielded: HashMap<String, Yielded>,
    /// Faults queued per lock name, and for any name (the empty string).
    faults: HashMap<String, VecDeque<Fault>>,
    /// Owners whose acquisition meets an unreachable server until it gives up (releases).
    unreachable: HashSet<String>,
}

struct Shared {
    state: Mutex<State>,
    subscribers: Mutex<Vec<Subscriber>>,
    hang_renewals: AtomicBool,
    renewals: AtomicUsize,
    next_connection: AtomicU64,
}

/// Locks in memory; clones share them.
#[derive(Clone)]
pub(crate) struct MemoryBackend {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend").finish_non_exhaustive()
    }
}

/// A client's subscription connection.
pub(crate) struct MemoryChannels {
    shared: Arc<Shared>,
    id: u64,
    subscribed: HashSet<String>,
}

/// The key under which faults for any name are queued.
const ANY_NAME: &str = "";
/// The owner id of a hold made by [`Fault::Busy`]: another owner, of no client.
pub(crate) const BUSY_OWNER: &str = "memory-fault:busy";

impl MemoryBackend {
    pub(crate) fn new() -> MemoryBackend {
        MemoryBackend {
            shared: Arc::new(Shared {
                state: Mutex::default(),
                subscribers: Mutex::default(),
                hang_renewals: AtomicBool::new(false),
                renewals: AtomicUsize::new(0),
                next_connection: AtomicU64::new(1),
            }),
        }
    }

    /// Connects a client: its unlock messages go to `router` (its demultiplexer's), `renew_now`
    /// makes its watchdog renew at once. Returns its subscription connection.
    pub(crate) fn connect(
        &self,
        router: impl AsyncPushSender + 'static,
        renew_now: &Arc<Notify>,
    ) -> MemoryChannels {
        sync::lock(&self.shared.subscribers).push(Subscriber {
            router: Box::new(router),
            renew_now: Arc::downgrade(renew_now),
        });
        MemoryChannels {
            shared: self.shared.clone(),
            id: self.shared.next_connection.fetch_add(1, Ordering::Relaxed),
            subscribed: HashSet::new(),
        }
    }

    /// Renewal requests from now on never answer (a frozen server).
    #[cfg(test)]
    pub(crate) fn hang_renewals(&self) {
        self.shared.hang_renewals.store(true, Ordering::Relaxed);
    }

    /// How many locks renewal requests have covered so far.
    #[cfg(test)]
    pub(crate) fn renewals(&self) -> usize {
        self.shared.renewals.load(Ordering::Relaxed)
    }

    /// Deletes a lock whoever holds it, without a message (an operator's `DEL`).
    #[cfg(test)]
    pub(crate) fn delete(&self, key: &str) {
        self.lock().holds.remove(key);
    }

    /// When the lock at `key` expires, if anyone holds it.
    #[cfg(test)]
    pub(crate) fn expiry(&self, key: &str) -> Option<Instant> {
        let mut state = self.lock();
        live(&mut state, key).map(|h| h.until)
    }

    /// Queues `fault` for the next acquisition of `name` (`None`: of any name).
    pub(crate) fn fail_next_acquire(&self, name: Option<&str>, fault: Fault) {
        self.lock()
            .faults
            .entry(name.unwrap_or(ANY_NAME).to_owned())
            .or_default()
            .push_back(fault);
    }

    /// Drops every queued fault.
    pub(crate) fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Takes every hold of locks named `name` away from their holders (as an operator's `DEL`
    /// or `force_unlock` would), wakes the waiters and makes every client's watchdog renew at
    /// once, so the holders' guards report the loss now. Returns whether anything was held.
    pub(crate) fn lose(&self, name: &str) -> bool {
        let mut state = self.lock();
        let keys: Vec<String> = state
            .holds
            .iter()
            .filter(|(_, h)| h.name == name)
            .map(|(k, _)| k.clone())
            .collect();
        let mut channels = Vec::new();
        for key in keys {
            if live(&mut state, &key).is_some() {
                state.holds.remove(&key);
                if let Some((_, channel)) = state.names.get(&key) {
                    channels.push(channel.clone());
                }
            }
        }
        drop(state);
        for channel in &channels {
            self.publish(channel, "*");
        }
        if !channels.is_empty() {
            self.renew_now();
        }
        !channels.is_empty()
    }

    /// The holder of a lock named `name`: its owner id, fencing token and the end of its lease.
    pub(crate) fn holder(&self, name: &str) -> Option<(String, i64, Instant)> {
        let mut state = self.lock();
        let keys: Vec<String> = state
            .holds
            .iter()
            .filter(|(_, h)| h.name == name)
            .map(|(k, _)| k.clone())
            .collect();
        keys.iter()
            .find_map(|key| live(&mut state, key).map(|h| (h.owner.clone(), h.token, h.until)))
    }

    /// The fencing token last issued for a lock named `name`.
    pub(crate) fn last_token(&self, name: &str) -> Option<i64> {
        let state = self.lock();
        state
            .names
            .iter()
            .filter(|(_, (n, _))| n == name)
            .filter_map(|(key, _)| state.tokens.get(key).copied())
            .max()
    }

    /// The names of the locks held right now, sorted.
    pub(crate) fn held_names(&self) -> Vec<String> {
        let mut state = self.lock();
        let keys: Vec<String> = state.holds.keys().cloned().collect();
        let mut names: Vec<String> = keys
            .iter()
            .filter_map(|key| live(&mut state, key).map(|h| h.name.clone()))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        sync::lock(&self.shared.state)
    }

    /// Delivers an unlock message to every connected client (each demultiplexer routes only
    /// the channels it has waiters for); forgets clients that are gone.
    fn publish(&self, channel: &str, payload: &str) {
        let mut subscribers = sync::lock(&self.shared.subscribers);
        subscribers.retain(|s| {
            s.router
                .send(PushInfo {
                    kind: PushKind::Message,
                    data: vec![
                        Value::BulkString(channel.as_bytes().to_vec()),
                        Value::BulkString(payload.as_bytes().to_vec()),
                    ],
                })
                .is_ok()
        });
    }

    /// Makes every connected client's watchdog renew at once.
    fn renew_now(&self) {
        let subscribers = sync::lock(&self.shared.subscribers);
        for s in subscribers.iter() {
            if let Some(notify) = s.renew_now.upgrade() {
                notify.notify_one();
            }
        }
    }

    fn release_one(&self, names: &LockNames, owner: &str, next: Option<HandOff<'_>>) -> Reply {
        let mut state = self.lock();
        // An acquisition that met an unreachable server gives up by releasing.
        state.unreachable.remove(owner);
        match live(&mut state, &names.key) {
            Some(hold) if hold.owner == owner => {
                state.holds.remove(&names.key);
                let mut next = next;
                if let Some(heir) = next
                    && let Some(yield_ms) = heir.yield_ms
                    && subscribers(&state, &names.channel) > 1
                {
                    // Others wait besides the releasing client: their turn.
                    state.yielded.insert(
                        names.key.clone(),
                        Yielded {
                            client: client_of(owner).to_owned(),
                            until: Instant::now() + Duration::from_millis(yield_ms),
                        },
                    );
                    next = None;
                }
                if let Some(heir) = next {
                    let token = grant(&mut state, names, heir.owner, heir.lease_ms);
                    return Reply::HandedOff(token);
                }
                drop(state);
                self.publish(&names.channel, "0");
                Reply::Done(1)
            }
            _ => Reply::NotDone(0),
        }
    }

    /// The fault queued for this attempt, if any (the lock's own queue first, then any
    /// name's). A busy fault waits in its queue until an attempt finds the lock free.
    fn take_fault(state: &mut State, name: &str, free: bool) -> Option<Fault> {
        for queue in [name, ANY_NAME] {
            let Some(faults) = state.faults.get_mut(queue) else {
                continue;
            };
            let fault = match faults.front() {
                Some(Fault::Busy(_)) if !free => None,
                _ => faults.pop_front(),
            };
            if faults.is_empty() {
                state.faults.remove(queue);
            }
            if fault.is_some() {
                return fault;
            }
        }
        None
    }
}

/// The connections subscribed to `channel`.
fn subscribers(state: &State, channel: &str) -> usize {
    state.subscriptions.get(channel).map_or(0, HashSet::len)
}

/// The client part of an owner id (`<client id>:<acquisition>`).
fn client_of(owner: &str) -> &str {
    owner.rsplit_once(':').map_or(owner, |(client, _)| client)
}

/// The error a refused connection gives: what an acquire meets while Redis is down.
fn refused() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        "connection refused (a fault injected by MemoryLocks)",
    ))
}

/// Gives the lock to `owner` with a fresh token.
fn grant(state: &mut State, names: &LockNames, owner: &str, lease_ms: u64) -> i64 {
    state.yielded.remove(&names.key);
    let token = state.tokens.entry(names.key.clone()).or_default();
    *token += 1;
    let token = *token;
    state.holds.insert(
        names.key.clone(),
        Hold {
            name: names.name.clone(),
            owner: owner.to_owned(),
            token,
            until: Instant::now() + Duration::from_millis(lease_ms),
        },
    );
    token
}

/// The live hold at `key`; an expired one is removed.
fn live<'a>(state: &'a mut State, key: &str) -> Option<&'a mut Hold> {
    if state
        .holds
        .get(key)
        .is_some_and(|h| h.until <= Instant::now())
    {
        state.holds.remove(key);
    }
    state.holds.get_mut(key)
}

/// Milliseconds from now until `until`, at least 1 (a PTTL of a live key).
fn millis_until(until: Instant) -> i64 {
    let left = until.saturating_duration_since(Instant::now());
    (left.as_millis().max(1)).min(i64::MAX as u128) as i64
}

fn ready<T: Send + 'static>(value: T) -> BoxFuture<'static, T> {
    Box::pin(std::future::ready(value))
}

impl Backend for MemoryBackend {
    fn acquire<'a>(
        &'a self,
        names: &'a LockNames,
        owner: &'a str,
        lease_ms: u64,
        _retention_ms: u64,
    ) -> BoxFuture<'a, RedisResult<Acked<Reply>>> {
        let mut state = self.lock();
        state
            .names
            .entry(names.key.clone())
            .or_insert_with(|| (names.name.clone(), names.channel.clone()));
        if state.unreachable.contains(owner) {
            return ready(Err(refused()));
        }
        // Ours already (a retried attempt of the same acquisition), another's, or free.
        let ours = live(&mut state, &names.key).map(|h| h.owner == owner);
        if ours != Some(true) {
            match MemoryBackend::take_fault(&mut state, &names.name, ours.is_none()) {
                Some(Fault::Busy(lease)) => {
                    let lease_ms = lease.as_millis().clamp(1, u128::from(u64::MAX)) as u64;
                    grant(&mut state, names, BUSY_OWNER, lease_ms);
                }
                Some(Fault::Unavailable) => {
                    // Until the acquisition gives up: its reconciling retries (same owner id)
                    // meet the same refusal, as they would while the server is down.
                    if state.unreachable.len() < 10_000 {
                        state.unreachable.insert(owner.to_owned());
                    }
                    return ready(Err(refused()));
                }
                None => {}
            }
        }
        let reply = match live(&mut state, &names.key) {
            Some(hold) if hold.owner != owner => Reply::NotDone(millis_until(hold.until)),
            _ => match state.yielded.get(&names.key) {
                Some(y) if y.client == client_of(owner) && y.until > Instant::now() => {
                    Reply::NotDone(millis_until(y.until))
                }
                _ => Reply::Done(grant(&mut state, names, owner, lease_ms)),
            },
        };
        ready(Ok(Acked {
            reply,
            shortfall: None,
        }))
    }

    fn release<'a>(
        &'a self,
        names: &'a LockNames,
        owner: &'a str,
        next: Option<HandOff<'a>>,
    ) -> BoxFuture<'a, RedisResult<Acked<Reply>>> {
        let reply = self.release_one(names, owner, next);
        ready(Ok(Acked {
            reply,
            shortfall: None,
        }))
    }

    fn release_many<'a>(
        &'a self,
        jobs: &'a [Release<'a>],
        _limit: Duration,
    ) -> BoxFuture<'a, RedisResult<Vec<usize>>> {
        for job in jobs {
            self.release_one(job.names, job.owner, None);
        }
        ready(Ok(Vec::new()))
    }

    fn renew<'a>(
        &'a self,
        locks: &'a [(&'a str, &'a str)],
        lease_ms: u64,
        _limit: Duration,
    ) -> BoxFuture<'a, RedisResult<Vec<Option<bool>>>> {
        if self.shared.hang_renewals.load(Ordering::Relaxed) {
            return Box::pin(std::future::pending());
        }
        self.shared
            .renewals
            .fetch_add(locks.len(), Ordering::Relaxed);
        let mut state = self.lock();
        let until = Instant::now() + Duration::from_millis(lease_ms);
        let results = locks
            .iter()
            .map(|(key, owner)| match live(&mut state, key) {
                Some(hold) if hold.owner == *owner => {
                    hold.until = until;
                    Some(true)
                }
                _ => Some(false),
            })
            .collect();
        ready(Ok(results))
    }

    fn force_unlock<'a>(&'a self, names: &'a LockNames) -> BoxFuture<'a, RedisResult<Reply>> {
        let mut state = self.lock();
        let deleted = live(&mut state, &names.key).is_some();
        state.holds.remove(&names.key);
        drop(state);
        if deleted {
            self.publish(&names.channel, "*");
        }
        ready(Ok(if deleted {
            Reply::Done(1)
        } else {
            Reply::NotDone(0)
        }))
    }

    fn inspect<'a>(
        &'a self,
        names: &'a LockNames,
        _max_holders: u32,
    ) -> BoxFuture<'a, RedisResult<LockState>> {
        let mut state = self.lock();
        let token = state.tokens.get(&names.key).copied();
        let subscribed = subscribers(&state, &names.channel) as u64;
        let held =
            live(&mut state, &names.key).map(|hold| (hold.owner.clone(), millis_until(hold.until)));
        let lock = match held {
            Some((owner, pttl)) => LockState {
                kind: "hash".into(),
                pttl,
                holders: vec![(owner, 1)],
                holder_count: 1,
                token,
                subscribers: subscribed,
                ..LockState::default()
            },
            None => LockState {
                kind: "none".into(),
                token,
                subscribers: subscribed,
                ..LockState::default()
            },
        };
        ready(Ok(lock))
    }

    fn scan_nodes(&self) -> BoxFuture<'_, RedisResult<Vec<ScanNode>>> {
        ready(Ok(vec![ScanNode::Only]))
    }

    /// Every held lock's key in one page (the pattern is not applied: the caller filters).
    fn scan<'a>(
        &'a self,
        _node: ScanNode,
        _cursor: u64,
        _pattern: &'a str,
        _count: u32,
    ) -> BoxFuture<'a, RedisResult<(u64, Vec<Vec<u8>>)>> {
        let mut state = self.lock();
        let keys: Vec<String> = state.holds.keys().cloned().collect();
        let live_keys = keys
            .into_iter()
            .filter(|key| live(&mut state, key).is_some())
            .map(String::into_bytes)
            .collect();
        ready(Ok((0, live_keys)))
    }

    fn semaphore_capacity<'a>(
        &'a self,
        _names: &'a LockNames,
        _default_capacity: u32,
        _op: CapacityOp,
    ) -> BoxFuture<'a, RedisResult<Acked<Reply>>> {
        ready(Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "the in-memory backend has mutexes only",
        ))))
    }

    fn fails_over(&self) -> bool {
        false
    }

    fn supports(&self, family: Family) -> bool {
        family == Family::Mutex
    }
}

impl MemoryChannels {
    fn change(&mut self, channels: &[String], subscribe: bool) {
        let mut state = sync::lock(&self.shared.state);
        for channel in channels {
            if subscribe {
                self.subscribed.insert(channel.clone());
                state
                    .subscriptions
                    .entry(channel.clone())
                    .or_default()
                    .insert(self.id);
            } else {
                self.subscribed.remove(channel);
                if let Some(set) = state.subscriptions.get_mut(channel) {
                    set.remove(&self.id);
                    if set.is_empty() {
                        state.subscriptions.remove(channel);
                    }
                }
            }
        }
    }
}

/// Subscriptions that are confirmed at once. Messages go to every client's router whether or
/// not it listens (the demultiplexer only routes those of channels with waiters); the
/// subscriptions are recorded for `PUBSUB NUMSUB`'s part (waiters in `info`, and whether
/// another process waits when a client would hand a lock on locally).
impl Channels for MemoryChannels {
    fn subscribe<'a>(
        &'a mut self,
        channels: &'a [String],
        done: GroupDone<'a>,
    ) -> BoxFuture<'a, ()> {
        self.change(channels, true);
        done(channels, Ok(()));
        ready(())
    }

    fn unsubscribe<'a>(
        &'a mut self,
        channels: &'a [String],
        done: GroupDone<'a>,
    ) -> BoxFuture<'a, ()> {
        self.change(channels, false);
        done(channels, Ok(()));
        ready(())
    }
}

/// A client that is gone is subscribed to nothing.
impl Drop for MemoryChannels {
    fn drop(&mut self) {
        let channels: Vec<String> = self.subscribed.drain().collect();
        self.change(&channels, false);
    }
}
