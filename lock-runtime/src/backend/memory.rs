//! A backend that is not Redis: locks in a map, leases on tokio's clock, unlock messages
//! delivered straight to every client's demultiplexer. The acquire loop, guards, the watchdog
//! and the releaser run against it unchanged, under real or paused time; the public handle is
//! [`MemoryLocks`](crate::MemoryLocks) (feature `memory`), and the runtime's own unit tests use
//! it too.
//!
//! It keeps the protocol of the Lua scripts in `script/`, function by function: a mutex
//! (`acquire.lua`, `release.lua`: one owner with a lease, re-taking our own hold is
//! idempotent, a release may hand the lock to a waiting task of the releasing client unless
//! that client must yield to another process that waits), a fair lock (`fair_acquire.lua`,
//! `fair_release.lua`: a queue of waiters whose places end unless refreshed, a release wakes
//! the waiter whose turn it is by owner id), a read/write lock (`rw_acquire.lua`: writers
//! first) and a semaphore (`semaphore_acquire.lua`, `semaphore_capacity.lua`), both released
//! by `holders_release.lua`'s rules, plus `renew.lua`, `force_unlock.lua` and `inspect.lua`.
//! Every grant bumps the name's fencing counter; a name used as two kinds is foreign data.
//! Timing comes from tokio's clock instead of the server's.
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
use crate::keys::LockNames;
use crate::keys::{Family, PLACE_TTL};
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
    /// fresh fencing token; for a read/write lock a writer, for a semaphore the holder of every
    /// permit) for the given lease, which then runs out like any lease (no unlock
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

/// A fair lock's waiter (`fair_acquire.lua`'s queue and places).
struct Waiter {
    owner: String,
    /// When its place ends unless it refreshes it.
    place_until: Instant,
}

/// The holders of a read/write lock or semaphore (the sorted set of the Lua scripts): owner id
/// → the end of its lease and its fencing token.
type Members = HashMap<String, (Instant, i64)>;

#[derive(Default)]
struct State {
    /// Mutexes and fair locks (a hash on Redis): one holder each.
    holds: HashMap<String, Hold>,
    /// Read/write locks and semaphores (a sorted set on Redis), by key, with the lock's name.
    sets: HashMap<String, (String, Members)>,
    /// Fair locks' waiters, in the order they first asked.
    queues: HashMap<String, Vec<Waiter>>,
    /// Read/write locks' waiting writers: owner id → the end of its place.
    writers: HashMap<String, HashMap<String, Instant>>,
    /// Semaphores' stored capacities.
    capacities: HashMap<String, u32>,
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

    /// The keys of locks named `name` (under any prefix) that anyone holds.
    fn held_keys(state: &mut State, name: &str) -> Vec<String> {
        let keys: Vec<String> = state
            .holds
            .iter()
            .filter(|(_, h)| h.name == name)
            .map(|(k, _)| k)
            .chain(
                state
                    .sets
                    .iter()
                    .filter(|(_, (n, _))| n == name)
                    .map(|(k, _)| k),
            )
            .cloned()
            .collect();
        keys.into_iter()
            .filter(|key| live(state, key).is_some() || live_set(state, key).is_some())
            .collect()
    }

    /// Takes every hold of locks named `name` (every reader and permit holder too) away from
    /// their holders (as an operator's `DEL` or `force_unlock` would), wakes the waiters and
    /// makes every client's watchdog renew at once, so the holders' guards report the loss now.
    /// Returns whether anything was held.
    pub(crate) fn lose(&self, name: &str) -> bool {
        let mut state = self.lock();
        let mut channels = Vec::new();
        for key in MemoryBackend::held_keys(&mut state, name) {
            state.holds.remove(&key);
            state.sets.remove(&key);
            if let Some((_, channel)) = state.names.get(&key) {
                channels.push(channel.clone());
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

    /// The holders of locks named `name`: owner id, fencing token and the end of the lease,
    /// the first lease to end first.
    pub(crate) fn holders(&self, name: &str) -> Vec<(String, i64, Instant)> {
        let mut state = self.lock();
        let mut holders = Vec::new();
        for key in MemoryBackend::held_keys(&mut state, name) {
            if let Some(h) = live(&mut state, &key) {
                holders.push((h.owner.clone(), h.token, h.until));
            } else if let Some((_, members)) = live_set(&mut state, &key) {
                holders.extend(
                    members
                        .iter()
                        .map(|(owner, (until, token))| (owner.clone(), *token, *until)),
                );
            }
        }
        holders.sort_by(|a, b| a.2.cmp(&b.2).then_with(|| a.0.cmp(&b.0)));
        holders
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
        let keys: Vec<(String, String)> = state
            .holds
            .iter()
            .map(|(k, h)| (k.clone(), h.name.clone()))
            .chain(state.sets.iter().map(|(k, (n, _))| (k.clone(), n.clone())))
            .collect();
        let mut names: Vec<String> = keys
            .into_iter()
            .filter(|(key, _)| {
                live(&mut state, key).is_some() || live_set(&mut state, key).is_some()
            })
            .map(|(_, name)| name)
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
        let (reply, wake) = match names.family() {
            Family::Mutex => return self.release_mutex(state, names, owner, next),
            Family::Fair => release_fair(&mut state, names, owner),
            Family::ReadWrite | Family::Semaphore { .. } => {
                release_member(&mut state, names, owner)
            }
        };
        drop(state);
        if let Some(wake) = wake {
            self.publish(&names.channel, &wake);
        }
        reply
    }

    /// `release.lua`: release a mutex, hand it to `next`, or let it fall free.
    fn release_mutex(
        &self,
        mut state: MutexGuard<'_, State>,
        names: &LockNames,
        owner: &str,
        next: Option<HandOff<'_>>,
    ) -> Reply {
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

/// The next fencing token of `key` (the next grant to anyone clears a yield).
fn next_token(state: &mut State, key: &str) -> i64 {
    state.yielded.remove(key);
    let token = state.tokens.entry(key.to_owned()).or_default();
    *token += 1;
    *token
}

/// Gives the lock to `owner` with a fresh token.
fn grant(state: &mut State, names: &LockNames, owner: &str, lease_ms: u64) -> i64 {
    let token = next_token(state, &names.key);
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

/// Adds (or renews) `owner` among the holders of a read/write lock or semaphore, with a fresh
/// token (`grant_member` in `prelude.lua`).
fn grant_member(state: &mut State, names: &LockNames, owner: &str, lease_ms: u64) -> i64 {
    let token = next_token(state, &names.key);
    let until = Instant::now() + Duration::from_millis(lease_ms);
    state
        .sets
        .entry(names.key.clone())
        .or_insert_with(|| (names.name.clone(), Members::new()))
        .1
        .insert(owner.to_owned(), (until, token));
    token
}

/// The live holders at `key` (a read/write lock or semaphore); ended leases are removed, and an
/// empty set with them.
fn live_set<'a>(state: &'a mut State, key: &str) -> Option<&'a mut (String, Members)> {
    let now = Instant::now();
    let empty = match state.sets.get_mut(key) {
        Some((_, members)) => {
            members.retain(|_, (until, _)| *until > now);
            members.is_empty()
        }
        None => false,
    };
    if empty {
        state.sets.remove(key);
    }
    state.sets.get_mut(key)
}

/// Milliseconds until the first of `ends` (at least 1), if any.
fn first_end(ends: impl Iterator<Item = Instant>) -> Option<i64> {
    ends.min().map(millis_until)
}

/// The permits an owner id carries: `#<permits>` at its end, else 1.
fn permits_of(owner: &str) -> u64 {
    owner
        .rsplit_once('#')
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(1)
}

/// `acquire.lua`: take a free mutex (or re-take our own).
fn acquire_mutex(state: &mut State, names: &LockNames, owner: &str, lease_ms: u64) -> Reply {
    if live_set(state, &names.key).is_some() {
        return Reply::Foreign("zset".into());
    }
    match live(state, &names.key) {
        Some(hold) if hold.owner != owner => Reply::NotDone(millis_until(hold.until)),
        _ => match state.yielded.get(&names.key) {
            Some(y) if y.client == client_of(owner) && y.until > Instant::now() => {
                Reply::NotDone(millis_until(y.until))
            }
            _ => Reply::Done(grant(state, names, owner, lease_ms)),
        },
    }
}

/// A fair lock's first waiter whose place is live; waiters whose place ended are dropped.
fn queue_head(state: &mut State, key: &str) -> Option<String> {
    let now = Instant::now();
    let queue = state.queues.get_mut(key)?;
    queue.retain(|w| w.place_until > now);
    let first = queue.first().map(|w| w.owner.clone());
    if queue.is_empty() {
        state.queues.remove(key);
    }
    first
}

/// `fair_acquire.lua`: take the lock when it is free and our turn, else keep our place.
fn acquire_fair(state: &mut State, names: &LockNames, owner: &str, lease_ms: u64) -> Reply {
    if live_set(state, &names.key).is_some() {
        return Reply::Foreign("zset".into());
    }
    let first = queue_head(state, &names.key);
    let held = live(state, &names.key).map(|h| (h.owner == owner, h.until));
    let mine = held.is_some_and(|(mine, _)| mine);
    if mine || (held.is_none() && first.as_deref().is_none_or(|f| f == owner)) {
        let token = grant(state, names, owner, lease_ms);
        leave_queue(state, &names.key, owner);
        return Reply::Done(token);
    }
    let now = Instant::now();
    let place_until = now + PLACE_TTL;
    let queue = state.queues.entry(names.key.clone()).or_default();
    match queue.iter_mut().find(|w| w.owner == owner) {
        Some(waiter) => waiter.place_until = place_until,
        None => {
            queue.push(Waiter {
                owner: owner.to_owned(),
                place_until,
            });
        }
    }
    match held {
        Some((_, until)) => Reply::NotDone(millis_until(until)),
        // Free, but another waiter's turn: until its place ends at the latest.
        None => {
            let ends = state.queues.get(&names.key).and_then(|q| {
                q.iter()
                    .filter(|w| Some(&w.owner) == first.as_ref())
                    .map(|w| w.place_until)
                    .next()
            });
            Reply::NotDone(ends.map_or(1, millis_until))
        }
    }
}

/// Removes `owner` from a fair lock's queue; returns whether it was there, and first.
fn leave_queue(state: &mut State, key: &str, owner: &str) -> (bool, bool) {
    let Some(queue) = state.queues.get_mut(key) else {
        return (false, false);
    };
    let was_first = queue.first().is_some_and(|w| w.owner == owner);
    let before = queue.len();
    queue.retain(|w| w.owner != owner);
    let left = queue.len() < before;
    if queue.is_empty() {
        state.queues.remove(key);
    }
    (left, was_first)
}

/// `fair_release.lua`: release our hold or leave the queue; wake the waiter whose turn it is
/// (by owner id; `1`: any one waiter when the queue is empty).
fn release_fair(state: &mut State, names: &LockNames, owner: &str) -> (Reply, Option<String>) {
    let removed = match live(state, &names.key) {
        Some(hold) if hold.owner == owner => {
            state.holds.remove(&names.key);
            true
        }
        _ => false,
    };
    let (left, was_first) = leave_queue(state, &names.key, owner);
    let mut wake = None;
    if (removed || (left && was_first)) && live(state, &names.key).is_none() {
        wake = Some(queue_head(state, &names.key).unwrap_or_else(|| "1".to_owned()));
    }
    let reply = if removed {
        Reply::Done(1)
    } else {
        Reply::NotDone(0)
    };
    (reply, wake)
}

/// `rw_acquire.lua`: the read side (`#r`) or the write side (`#w`); waiting writers go first.
fn acquire_rw(state: &mut State, names: &LockNames, owner: &str, lease_ms: u64) -> Reply {
    if live(state, &names.key).is_some() {
        return Reply::Foreign("hash".into());
    }
    let now = Instant::now();
    if let Some(writers) = state.writers.get_mut(&names.key) {
        writers.retain(|_, until| *until > now);
        if writers.is_empty() {
            state.writers.remove(&names.key);
        }
    }
    let holders: Vec<(bool, Instant)> = live_set(state, &names.key)
        .map(|(_, members)| {
            members
                .iter()
                .map(|(o, (until, _))| (o == owner, *until))
                .collect()
        })
        .unwrap_or_default();
    let already = holders.iter().any(|(mine, _)| *mine);
    if !already {
        let holders_end = first_end(holders.iter().map(|(_, until)| *until));
        if owner.ends_with("#w") {
            if !holders.is_empty() {
                state
                    .writers
                    .entry(names.key.clone())
                    .or_default()
                    .insert(owner.to_owned(), now + PLACE_TTL);
                return Reply::NotDone(holders_end.unwrap_or(1));
            }
        } else {
            let writing = live_set(state, &names.key)
                .is_some_and(|(_, members)| members.keys().any(|o| o.ends_with("#w")));
            let claims = state
                .writers
                .get(&names.key)
                .and_then(|w| first_end(w.values().copied()));
            if writing || claims.is_some() {
                // Until the first lease or writer's claim that holds us back ends.
                let wait = match (holders_end, claims) {
                    (Some(h), Some(c)) => h.min(c),
                    (h, c) => h.or(c).unwrap_or(1),
                };
                return Reply::NotDone(wait);
            }
        }
    }
    let token = grant_member(state, names, owner, lease_ms);
    if let Some(writers) = state.writers.get_mut(&names.key) {
        writers.remove(owner);
        if writers.is_empty() {
            state.writers.remove(&names.key);
        }
    }
    Reply::Done(token)
}

/// `semaphore_acquire.lua`: take the permits the owner id carries, if that many are free.
fn acquire_permits(
    state: &mut State,
    names: &LockNames,
    owner: &str,
    lease_ms: u64,
    default_capacity: u32,
) -> Reply {
    if live(state, &names.key).is_some() {
        return Reply::Foreign("hash".into());
    }
    let capacity = u64::from(capacity_in_force(state, &names.key, default_capacity));
    let wanted = permits_of(owner);
    if wanted > capacity {
        return Reply::Exceeds(capacity as i64);
    }
    let (held, mine, first) = live_set(state, &names.key).map_or((0, false, None), |(_, m)| {
        (
            m.keys().map(|o| permits_of(o)).sum::<u64>(),
            m.contains_key(owner),
            first_end(m.values().map(|(until, _)| *until)),
        )
    });
    if !mine && held + wanted > capacity {
        return Reply::NotDone(first.unwrap_or(1));
    }
    Reply::Done(grant_member(state, names, owner, lease_ms))
}

/// A semaphore's capacity: the stored one, else the handle's.
fn capacity_in_force(state: &State, key: &str, default_capacity: u32) -> u32 {
    state
        .capacities
        .get(key)
        .copied()
        .unwrap_or(default_capacity)
}

/// `holders_release.lua`: release a read/write lock's side or a semaphore's permits, or stop
/// waiting as a writer; wake as many waiters as can now go (the permits freed, or `*`).
fn release_member(state: &mut State, names: &LockNames, owner: &str) -> (Reply, Option<String>) {
    let (removed, remaining) = match state.sets.get_mut(&names.key) {
        Some((_, members)) => {
            let removed = members.remove(owner).is_some();
            (removed, members.len())
        }
        None => (false, 0),
    };
    if removed && remaining == 0 {
        state.sets.remove(&names.key);
    }
    let mut left = false;
    let mut writers_left = 0;
    if names.family() == Family::ReadWrite
        && let Some(writers) = state.writers.get_mut(&names.key)
    {
        left = writers.remove(owner).is_some();
        writers_left = writers.len();
        if writers.is_empty() {
            state.writers.remove(&names.key);
        }
    }
    let wake = if removed {
        match owner.rsplit_once('#').map(|(_, n)| n) {
            Some(n) if n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty() => Some(n.to_owned()),
            _ => (remaining == 0).then(|| "*".to_owned()),
        }
    } else if left && writers_left == 0 {
        Some("*".to_owned())
    } else {
        None
    };
    let reply = if removed {
        Reply::Done(1)
    } else {
        Reply::NotDone(0)
    };
    (reply, wake)
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
        // One process: no turns across clients to take.
        _waiting: bool,
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
        let ours = match names.family() {
            Family::Mutex | Family::Fair => live(&mut state, &names.key).map(|h| h.owner == owner),
            Family::ReadWrite | Family::Semaphore { .. } => {
                live_set(&mut state, &names.key).map(|(_, members)| members.contains_key(owner))
            }
        };
        if ours != Some(true) {
            match MemoryBackend::take_fault(&mut state, &names.name, ours.is_none()) {
                Some(Fault::Busy(lease)) => {
                    let lease_ms = lease.as_millis().clamp(1, u128::from(u64::MAX)) as u64;
                    match names.family() {
                        Family::Mutex | Family::Fair => {
                            grant(&mut state, names, BUSY_OWNER, lease_ms);
                        }
                        // A writer, or every permit: nobody else gets in.
                        Family::ReadWrite => {
                            let owner = format!("{BUSY_OWNER}#w");
                            grant_member(&mut state, names, &owner, lease_ms);
                        }
                        Family::Semaphore { capacity, .. } => {
                            let capacity = state
                                .capacities
                                .get(&names.key)
                                .copied()
                                .unwrap_or(capacity);
                            let owner = format!("{BUSY_OWNER}#{}", capacity.max(1));
                            grant_member(&mut state, names, &owner, lease_ms);
                        }
                    }
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
        let reply = match names.family() {
            Family::Mutex => acquire_mutex(&mut state, names, owner, lease_ms),
            Family::Fair => acquire_fair(&mut state, names, owner, lease_ms),
            Family::ReadWrite => acquire_rw(&mut state, names, owner, lease_ms),
            Family::Semaphore { capacity, .. } => {
                acquire_permits(&mut state, names, owner, lease_ms, capacity)
            }
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
            .map(|(key, owner)| {
                if let Some(hold) = live(&mut state, key) {
                    if hold.owner == *owner {
                        hold.until = until;
                        return Some(true);
                    }
                    return Some(false);
                }
                let member = live_set(&mut state, key).and_then(|(_, m)| m.get_mut(*owner));
                match member {
                    Some((ends, _)) => {
                        *ends = until;
                        Some(true)
                    }
                    None => Some(false),
                }
            })
            .collect();
        ready(Ok(results))
    }

    fn force_unlock<'a>(&'a self, names: &'a LockNames) -> BoxFuture<'a, RedisResult<Reply>> {
        let mut state = self.lock();
        let deleted = live(&mut state, &names.key).is_some() || state.sets.contains_key(&names.key);
        state.holds.remove(&names.key);
        state.sets.remove(&names.key);
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
        max_holders: u32,
    ) -> BoxFuture<'a, RedisResult<LockState>> {
        let mut state = self.lock();
        let now = Instant::now();
        let mut lock = LockState {
            kind: "none".into(),
            token: state.tokens.get(&names.key).copied(),
            subscribers: subscribers(&state, &names.channel) as u64,
            capacity: state.capacities.get(&names.key).copied(),
            ..LockState::default()
        };
        if let Some(hold) = live(&mut state, &names.key) {
            lock.kind = "hash".into();
            lock.pttl = millis_until(hold.until);
            lock.holders = vec![(hold.owner.clone(), 1)];
            lock.holder_count = 1;
        } else if let Some((_, members)) = live_set(&mut state, &names.key) {
            let mut holders: Vec<(String, Instant)> = members
                .iter()
                .map(|(owner, (until, _))| (owner.clone(), *until))
                .collect();
            holders.sort_by_key(|(_, until)| *until);
            lock.kind = "zset".into();
            lock.holder_count = holders.len() as u64;
            lock.pttl = holders.last().map_or(0, |(_, until)| millis_until(*until));
            lock.holders = holders
                .into_iter()
                .take(max_holders as usize)
                .map(|(owner, until)| (owner, millis_until(until)))
                .collect();
        }
        lock.queued = state.queues.get(&names.key).map_or(0, |q| {
            q.iter().filter(|w| w.place_until > now).count() as u64
        });
        lock.writers = state.writers.get(&names.key).map_or(0, |w| {
            w.values().filter(|until| **until > now).count() as u64
        });
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
        let keys: Vec<String> = state
            .holds
            .keys()
            .chain(state.sets.keys())
            .cloned()
            .collect();
        let live_keys = keys
            .into_iter()
            .filter(|key| live(&mut state, key).is_some() || live_set(&mut state, key).is_some())
            .map(String::into_bytes)
            .collect();
        ready(Ok((0, live_keys)))
    }

    fn semaphore_capacity<'a>(
        &'a self,
        names: &'a LockNames,
        default_capacity: u32,
        op: CapacityOp,
    ) -> BoxFuture<'a, RedisResult<Acked<Reply>>> {
        let mut state = self.lock();
        let reply = if live(&mut state, &names.key).is_some() {
            Reply::Foreign("hash".into())
        } else {
            match op {
                CapacityOp::Set(n) => {
                    state.capacities.insert(names.key.clone(), n);
                }
                CapacityOp::Clear => {
                    state.capacities.remove(&names.key);
                }
                CapacityOp::Free | CapacityOp::Capacity => {}
            }
            let capacity = u64::from(capacity_in_force(&state, &names.key, default_capacity));
            let held: u64 = live_set(&mut state, &names.key)
                .map_or(0, |(_, m)| m.keys().map(|o| permits_of(o)).sum());
            match op {
                CapacityOp::Capacity => Reply::Done(capacity as i64),
                _ => Reply::Done(capacity.saturating_sub(held) as i64),
            }
        };
        drop(state);
        if matches!(op, CapacityOp::Set(_) | CapacityOp::Clear)
            && !matches!(reply, Reply::Foreign(_))
        {
            self.publish(&names.channel, "*");
        }
        ready(Ok(Acked {
            reply,
            shortfall: None,
        }))
    }

    fn fails_over(&self) -> bool {
        false
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
