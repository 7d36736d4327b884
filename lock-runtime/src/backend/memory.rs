//! A backend that is not Redis: locks in a map, leases on tokio's clock, unlock messages
//! delivered straight to the demultiplexer's router. It exists to show (and test) that the
//! lock logic needs nothing but the [`Backend`] and [`Channels`] operations; the acquire loop,
//! guards, the watchdog and the releaser run against it unchanged under paused time.
//!
//! Faults for tests: [`MemoryBackend::hang_renewals`] makes renewals never answer,
//! [`MemoryBackend::delete`] takes a lock away behind its holder's back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::aio::AsyncPushSender;
use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::time::Instant;

use super::{
    Acked, Backend, BoxFuture, CapacityOp, Channels, GroupDone, HandOff, LockState, Release, Reply,
    ScanNode,
};
use crate::names::LockNames;
use crate::sync;

/// One held lock.
struct Hold {
    owner: String,
    until: Instant,
}

#[derive(Default)]
struct State {
    holds: HashMap<String, Hold>,
    /// The fencing counter of each key.
    tokens: HashMap<String, i64>,
    /// Which unlock channel belongs to which key.
    channels: HashMap<String, String>,
}

/// Locks in memory; clones share them.
#[derive(Clone)]
pub(crate) struct MemoryBackend {
    state: Arc<Mutex<State>>,
    router: Arc<Mutex<Option<Box<dyn AsyncPushSender>>>>,
    hang_renewals: Arc<AtomicBool>,
    renewals: Arc<AtomicUsize>,
}

impl MemoryBackend {
    pub(crate) fn new() -> MemoryBackend {
        MemoryBackend {
            state: Arc::default(),
            router: Arc::default(),
            hang_renewals: Arc::default(),
            renewals: Arc::default(),
        }
    }

    /// Where unlock messages go: the demultiplexer's router.
    pub(crate) fn connect_router(&self, router: impl AsyncPushSender + 'static) {
        *sync::lock(&self.router) = Some(Box::new(router));
    }

    /// Renewal requests from now on never answer (a frozen server).
    pub(crate) fn hang_renewals(&self) {
        self.hang_renewals.store(true, Ordering::Relaxed);
    }

    /// How many locks renewal requests have covered so far.
    pub(crate) fn renewals(&self) -> usize {
        self.renewals.load(Ordering::Relaxed)
    }

    /// Deletes a lock whoever holds it, without a message (an operator's `DEL`).
    pub(crate) fn delete(&self, key: &str) {
        self.lock().holds.remove(key);
    }

    /// When the lock at `key` expires, if anyone holds it.
    pub(crate) fn expiry(&self, key: &str) -> Option<Instant> {
        let mut state = self.lock();
        live(&mut state, key).map(|h| h.until)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        sync::lock(&self.state)
    }

    fn publish(&self, channel: &str) {
        let router = sync::lock(&self.router);
        if let Some(router) = router.as_ref() {
            let _ = router.send(PushInfo {
                kind: PushKind::Message,
                data: vec![
                    Value::BulkString(channel.as_bytes().to_vec()),
                    Value::BulkString(b"0".to_vec()),
                ],
            });
        }
    }

    fn release_one(&self, names: &LockNames, owner: &str, next: Option<HandOff<'_>>) -> Reply {
        let mut state = self.lock();
        match live(&mut state, &names.key) {
            Some(hold) if hold.owner == owner => {
                state.holds.remove(&names.key);
                if let Some(next) = next {
                    let token = grant(&mut state, names, next.owner, next.lease_ms);
                    return Reply::HandedOff(token);
                }
                drop(state);
                self.publish(&names.channel);
                Reply::Done(1)
            }
            _ => Reply::NotDone(0),
        }
    }
}

/// Gives the lock to `owner` with a fresh token.
fn grant(state: &mut State, names: &LockNames, owner: &str, lease_ms: u64) -> i64 {
    let token = state.tokens.entry(names.key.clone()).or_default();
    *token += 1;
    let token = *token;
    state.holds.insert(
        names.key.clone(),
        Hold {
            owner: owner.to_owned(),
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
            .channels
            .insert(names.key.clone(), names.channel.clone());
        let reply = match live(&mut state, &names.key) {
            Some(hold) if hold.owner != owner => {
                let pttl = hold.until.saturating_duration_since(Instant::now());
                Reply::NotDone(pttl.as_millis() as i64)
            }
            _ => Reply::Done(grant(&mut state, names, owner, lease_ms)),
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
        if self.hang_renewals.load(Ordering::Relaxed) {
            return Box::pin(std::future::pending());
        }
        self.renewals.fetch_add(locks.len(), Ordering::Relaxed);
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
            self.publish(&names.channel);
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
        let held = live(&mut state, &names.key).map(|hold| {
            let left = hold.until.saturating_duration_since(Instant::now());
            (hold.owner.clone(), left.as_millis() as i64)
        });
        let lock = match held {
            Some((owner, pttl)) => LockState {
                kind: "hash".into(),
                pttl,
                holders: vec![(owner, 1)],
                holder_count: 1,
                token,
                ..LockState::default()
            },
            None => LockState {
                kind: "none".into(),
                token,
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
}

/// Subscriptions that are confirmed at once: messages go to the router whether or not anyone
/// listens, and the demultiplexer only routes those of channels with waiters.
impl Channels for MemoryBackend {
    fn subscribe<'a>(
        &'a mut self,
        channels: &'a [String],
        done: GroupDone<'a>,
    ) -> BoxFuture<'a, ()> {
        done(channels, Ok(()));
        ready(())
    }

    fn unsubscribe<'a>(
        &'a mut self,
        channels: &'a [String],
        done: GroupDone<'a>,
    ) -> BoxFuture<'a, ()> {
        done(channels, Ok(()));
        ready(())
    }
}
