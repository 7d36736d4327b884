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
//! - `mod.rs`: the state (one map per kind of key), the connected clients, and what every
//!   kind shares (a hold's lease, fencing tokens, unlock messages);
//! - `mutex.rs`, `fair.rs`, `holders.rs`: each kind's acquire and release (`holders.rs`: the
//!   read/write lock and the semaphore, whose holders are a set);
//! - `operations.rs`: the `Backend` operations, dispatched to the kinds;
//! - `channels.rs`: subscriptions; `control.rs`: faults and the look at the holders that
//!   [`MemoryLocks`](crate::MemoryLocks) offers.
//!
//! Faults for tests: [`MemoryBackend::fail_next_acquire`] (busy, or the server unreachable),
//! [`MemoryBackend::lose`] (the lock taken away behind its holder's back),
//! [`MemoryBackend::hang_renewals`] (renewals never answer).

mod channels;
mod control;
mod fair;
mod holders;
mod mutex;
mod operations;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use redis::aio::AsyncPushSender;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::BoxFuture;
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
}

/// The connections subscribed to `channel`.
fn subscribers(state: &State, channel: &str) -> usize {
    state.subscriptions.get(channel).map_or(0, HashSet::len)
}

/// The client part of an owner id (`<client id>:<acquisition>`).
fn client_of(owner: &str) -> &str {
    owner.rsplit_once(':').map_or(owner, |(client, _)| client)
}

/// Until when `owner`'s client is kept from `key` because its turn ended while others waited
/// (`yield` in `prelude.lua`), if it is.
fn yielded_until(state: &State, key: &str, owner: &str) -> Option<Instant> {
    state
        .yielded
        .get(key)
        .filter(|y| y.client == client_of(owner) && y.until > Instant::now())
        .map(|y| y.until)
}

/// Keeps `owner`'s client from `key` for `yield_ms` if another client waits for it (more
/// subscribers to `channel` than the releasing client's own): the end of its turn. Returns
/// whether it did.
fn end_turn(state: &mut State, key: &str, channel: &str, owner: &str, yield_ms: u64) -> bool {
    let others_wait = subscribers(state, channel) > 1;
    if others_wait {
        state.yielded.insert(
            key.to_owned(),
            Yielded {
                client: client_of(owner).to_owned(),
                until: Instant::now() + Duration::from_millis(yield_ms),
            },
        );
    }
    others_wait
}

/// The next fencing token of `key` for a grant (the next grant to anyone clears a yield).
fn next_token(state: &mut State, key: &str) -> i64 {
    state.yielded.remove(key);
    bump_token(state, key)
}

/// The next fencing token of `key`, the turns left as they are (a token on demand, within the
/// holder's turn: `token.lua`).
fn bump_token(state: &mut State, key: &str) -> i64 {
    let token = state.tokens.entry(key.to_owned()).or_default();
    *token += 1;
    *token
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

/// Milliseconds from now until `until`, at least 1 (a PTTL of a live key).
fn millis_until(until: Instant) -> i64 {
    let left = until.saturating_duration_since(Instant::now());
    (left.as_millis().max(1)).min(i64::MAX as u128) as i64
}

/// Milliseconds until the first of `ends` (at least 1), if any.
fn first_end(ends: impl Iterator<Item = Instant>) -> Option<i64> {
    ends.min().map(millis_until)
}

fn ready<T: Send + 'static>(value: T) -> BoxFuture<'static, T> {
    Box::pin(std::future::ready(value))
}
