//! The kinds whose holders are a set (a sorted set on Redis): a read/write lock
//! (`rw_acquire.lua`: writers first) and a semaphore (`semaphore_acquire.lua`,
//! `semaphore_capacity.lua`), both released by `holders_release.lua`'s rules.

use std::time::Duration;

use tokio::time::Instant;

use super::{
    Members, State, bump_token, first_end, live, live_set, millis_until, next_token, yielded_until,
};
use crate::backend::Reply;
use crate::keys::LockNames;
use crate::keys::{Family, PLACE_TTL, owner};

/// Adds (or renews) `owner` among the holders of a read/write lock or semaphore, with a fresh
/// token (`grant_member` in `prelude.lua`).
pub(super) fn grant_member(
    state: &mut State,
    names: &LockNames,
    owner: &str,
    lease_ms: u64,
) -> i64 {
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

/// `token.lua` for a semaphore: a fresh fencing token for `owner` while it holds permits
/// (`NotDone(0)` when it does not): the permits of a hold passed in memory get theirs on demand.
pub(super) fn permits_token(state: &mut State, names: &LockNames, owner: &str) -> Reply {
    if live(state, &names.key).is_some() {
        return Reply::Foreign("hash".into());
    }
    if !live_set(state, &names.key).is_some_and(|(_, members)| members.contains_key(owner)) {
        return Reply::NotDone(0);
    }
    let token = bump_token(state, &names.key);
    if let Some((_, members)) = state.sets.get_mut(&names.key)
        && let Some(member) = members.get_mut(owner)
    {
        member.1 = token;
    }
    Reply::Done(token)
}

/// The permits an owner id carries: `#<permits>` at its end, else 1.
pub(super) fn permits_of(owner: &str) -> u64 {
    owner::suffix(owner)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// `rw_acquire.lua`: the read side (`#r`) or the write side (`#w`); waiting writers go first.
pub(super) fn acquire_rw(
    state: &mut State,
    names: &LockNames,
    owner: &str,
    lease_ms: u64,
) -> Reply {
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
pub(super) fn acquire_permits(
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
    let (held, mine, first) = live_set(state, &names.key).map_or((0, false, None), |(_, m)| {
        (
            m.keys().map(|o| permits_of(o)).sum::<u64>(),
            m.contains_key(owner),
            first_end(m.values().map(|(until, _)| *until)),
        )
    });
    // A re-take needs no capacity (it must succeed after the capacity went down).
    if !mine && wanted > capacity {
        return Reply::Exceeds(capacity as i64);
    }
    if !mine && held + wanted > capacity {
        return Reply::NotDone(first.unwrap_or(1));
    }
    // A client whose turn of passing permits in memory ended while others waited is kept out
    // for a while (a re-take of its own hold is not).
    if !mine && let Some(until) = yielded_until(state, &names.key, owner) {
        return Reply::NotDone(millis_until(until));
    }
    Reply::Done(grant_member(state, names, owner, lease_ms))
}

/// A semaphore's capacity: the stored one, else the handle's.
pub(super) fn capacity_in_force(state: &State, key: &str, default_capacity: u32) -> u32 {
    state
        .capacities
        .get(key)
        .copied()
        .unwrap_or(default_capacity)
}

/// `holders_release.lua`: release a read/write lock's side or a semaphore's permits, or stop
/// waiting as a writer; wake as many waiters as can now go (the permits freed, or `*`).
pub(super) fn release_member(
    state: &mut State,
    names: &LockNames,
    owner: &str,
) -> (Reply, Option<String>) {
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
        match owner::suffix(owner) {
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
