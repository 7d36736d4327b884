//! The [`Backend`] operations on the memory backend: each looks at the state under one lock
//! and hands the kind-specific part to `mutex.rs`, `fair.rs` or `holders.rs`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::RedisResult;
use tokio::time::Instant;

use super::control::refused;
use super::fair::{acquire_fair, release_fair};
use super::holders::{
    acquire_permits, acquire_rw, capacity_in_force, grant_member, permits_of, permits_token,
    release_member,
};
use super::mutex::{acquire_mutex, grant, token};
use super::{
    BUSY_OWNER, Fault, MemoryBackend, end_turn, live, live_set, millis_until, ready, subscribers,
};
use crate::backend::{
    Acked, Approach, Backend, BoxFuture, CapacityOp, HandOff, LockState, Release, Reply, ScanNode,
};
use crate::keys::LockNames;
use crate::keys::{Family, Scheme};

impl MemoryBackend {
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
}

impl Backend for MemoryBackend {
    /// This crate's layout, every primitive; of Redisson's, the mutex only (its `RLock` hash is
    /// this crate's mutex hash). Redisson's fair lock, read/write lock and semaphores keep other
    /// state (a writer is `<id>:write`, permits are ids in a sorted set) that these mirrors do not
    /// model: served as if native, a read/write lock would admit two writers.
    fn refuses(&self, scheme: Scheme) -> Option<&'static str> {
        match scheme {
            Scheme::Mutex
            | Scheme::Fair
            | Scheme::ReadWrite
            | Scheme::Semaphore { .. }
            | Scheme::RedissonMutex => None,
            Scheme::RedissonFair
            | Scheme::RedissonReadWrite
            | Scheme::RedissonPermits { .. }
            | Scheme::RedissonPlain { .. } => Some(
                "the in-memory backend serves only the mutex of Redisson's layout (use a Redis server to test Redisson's fair lock, read/write lock or semaphores)",
            ),
        }
    }

    fn acquire<'a>(
        &'a self,
        names: &'a LockNames,
        owner: &'a str,
        lease_ms: u64,
        _retention_ms: u64,
        // One process: no turns across clients to take, no message to keep for waiters.
        _approach: Approach,
        fenced: bool,
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
                            grant(&mut state, names, BUSY_OWNER, lease_ms, true);
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
            Family::Mutex => acquire_mutex(&mut state, names, owner, lease_ms, fenced),
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

    fn token<'a>(
        &'a self,
        names: &'a LockNames,
        owner: &'a str,
        _retention_ms: u64,
    ) -> BoxFuture<'a, RedisResult<Acked<Reply>>> {
        let mut state = self.lock();
        if state.unreachable.contains(owner) {
            return ready(Err(refused()));
        }
        let reply = match names.scheme {
            Scheme::Semaphore { .. } => permits_token(&mut state, names, owner),
            _ => token(&mut state, names, owner),
        };
        ready(Ok(Acked {
            reply,
            shortfall: None,
        }))
    }

    fn release_ending_turn<'a>(
        &'a self,
        names: &'a LockNames,
        owner: &'a str,
        yield_ms: u64,
        _retention_ms: u64,
    ) -> BoxFuture<'a, RedisResult<Acked<Reply>>> {
        let mut state = self.lock();
        state.unreachable.remove(owner);
        let (reply, wake) = release_member(&mut state, names, owner);
        if matches!(reply, Reply::Done(_)) {
            end_turn(&mut state, &names.key, &names.channel, owner, yield_ms);
        }
        drop(state);
        if let Some(wake) = wake {
            self.publish(&names.channel, &wake);
        }
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

    fn force_unlock<'a>(
        &'a self,
        names: &'a LockNames,
        held_by: Option<&'a [String]>,
    ) -> BoxFuture<'a, RedisResult<Reply>> {
        let mut state = self.lock();
        if let Some(owners) = held_by {
            // As `force_unlock.lua`: only while the live holders are exactly `owners`.
            let holders: Vec<String> = match live(&mut state, &names.key) {
                Some(hold) => vec![hold.owner.clone()],
                None => live_set(&mut state, &names.key)
                    .map(|(_, members)| members.keys().cloned().collect())
                    .unwrap_or_default(),
            };
            if holders.is_empty() {
                return ready(Ok(Reply::NotDone(0)));
            }
            if holders.len() != owners.len() || !owners.iter().all(|o| holders.contains(o)) {
                return ready(Ok(Reply::NotDone(1)));
            }
        }
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
            // As on Redis: this crate's mutex is a string, a fair lock a hash (below: also
            // once someone queues for it).
            lock.kind = if names.scheme.stores_a_string() {
                "string".into()
            } else {
                "hash".into()
            };
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
        if lock.kind == "string" && lock.queued > 0 {
            lock.kind = "hash".into();
        }
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
