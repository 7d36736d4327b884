//! A fair lock (`fair_acquire.lua`, `fair_release.lua`): the mutex's hold plus a queue of
//! waiters whose places end unless refreshed; a release wakes the waiter whose turn it is, by
//! owner id.

use tokio::time::Instant;

use super::mutex::grant;
use super::{State, Waiter, live, live_set, millis_until};
use crate::backend::Reply;
use crate::keys::LockNames;
use crate::keys::PLACE_TTL;

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
pub(super) fn acquire_fair(
    state: &mut State,
    names: &LockNames,
    owner: &str,
    lease_ms: u64,
) -> Reply {
    if live_set(state, &names.key).is_some() {
        return Reply::Foreign("zset".into());
    }
    let first = queue_head(state, &names.key);
    let held = live(state, &names.key).map(|h| (h.owner == owner, h.until));
    let mine = held.is_some_and(|(mine, _)| mine);
    if mine || (held.is_none() && first.as_deref().is_none_or(|f| f == owner)) {
        let token = grant(state, names, owner, lease_ms, true);
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

/// Removes `owner` from a fair lock's queue.
fn leave_queue(state: &mut State, key: &str, owner: &str) {
    let Some(queue) = state.queues.get_mut(key) else {
        return;
    };
    queue.retain(|w| w.owner != owner);
    if queue.is_empty() {
        state.queues.remove(key);
    }
}

/// `fair_release.lua`: release our hold or leave the queue; wake the waiter whose turn it is
/// (by owner id; `1`: any one waiter when the queue is empty).
pub(super) fn release_fair(
    state: &mut State,
    names: &LockNames,
    owner: &str,
) -> (Reply, Option<String>) {
    let removed = match live(state, &names.key) {
        Some(hold) if hold.owner == owner => {
            state.holds.remove(&names.key);
            true
        }
        _ => false,
    };
    // As the script: the turn moves on when this owner had it once the waiters whose place
    // ended are dropped, or when dropping them gave it to another waiter.
    let raw_first = state
        .queues
        .get(&names.key)
        .and_then(|q| q.first().map(|w| w.owner.clone()));
    let first = queue_head(state, &names.key);
    let turn_moved = first.as_deref() == Some(owner) || (raw_first.is_some() && raw_first != first);
    leave_queue(state, &names.key, owner);
    let mut wake = None;
    if (removed || turn_moved) && live(state, &names.key).is_none() {
        wake = Some(queue_head(state, &names.key).unwrap_or_else(|| "1".to_owned()));
    }
    let reply = if removed {
        Reply::Done(1)
    } else {
        Reply::NotDone(0)
    };
    (reply, wake)
}
