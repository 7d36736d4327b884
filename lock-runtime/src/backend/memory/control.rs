//! What [`MemoryLocks`](crate::MemoryLocks) (and the runtime's unit tests) do to the memory
//! backend besides using it: faults queued for the next acquisitions, locks taken away, frozen
//! renewals, and a look at the holders.

#[cfg(test)]
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::{ANY_NAME, Fault, MemoryBackend, State, live, live_set};

impl MemoryBackend {
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

    /// The fault queued for this attempt, if any (the lock's own queue first, then any
    /// name's). A busy fault waits in its queue until an attempt finds the lock free.
    pub(super) fn take_fault(state: &mut State, name: &str, free: bool) -> Option<Fault> {
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

/// The error a refused connection gives: what an acquire meets while Redis is down.
pub(super) fn refused() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        "connection refused (a fault injected by MemoryLocks)",
    ))
}
