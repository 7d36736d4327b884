//! A mutex (`acquire.lua`, `release.lua`): one owner with a lease; re-taking our own hold is
//! idempotent; a release may hand the lock to a waiting task of the releasing client, unless
//! that client must yield to another process that waits.

use std::sync::MutexGuard;
use std::time::Duration;

use tokio::time::Instant;

use super::{
    Hold, MemoryBackend, State, bump_token, end_turn, live, live_set, millis_until, next_token,
    yielded_until,
};
use crate::backend::{HandOff, Reply};
use crate::keys::LockNames;

impl MemoryBackend {
    /// `release.lua`: release a mutex, hand it to `next`, or let it fall free.
    pub(super) fn release_mutex(
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
                {
                    // Others wait besides the releasing client: their turn.
                    if end_turn(&mut state, &names.key, &names.channel, owner, yield_ms) {
                        next = None;
                    }
                }
                if let Some(heir) = next {
                    let token = grant(&mut state, names, heir.owner, heir.lease_ms, heir.fenced);
                    return Reply::HandedOff(token);
                }
                drop(state);
                self.publish(&names.channel, "0");
                Reply::Done(1)
            }
            _ => Reply::NotDone(0),
        }
    }
}

/// `acquire.lua`: take a free mutex (or re-take our own), with a fencing token if `fenced`
/// (else token 0: issued on demand by [`token`]).
pub(super) fn acquire_mutex(
    state: &mut State,
    names: &LockNames,
    owner: &str,
    lease_ms: u64,
    fenced: bool,
) -> Reply {
    if live_set(state, &names.key).is_some() {
        return Reply::Foreign("zset".into());
    }
    match live(state, &names.key) {
        Some(hold) if hold.owner != owner => Reply::NotDone(millis_until(hold.until)),
        _ => match yielded_until(state, &names.key, owner) {
            Some(until) => Reply::NotDone(millis_until(until)),
            None => Reply::Done(grant(state, names, owner, lease_ms, fenced)),
        },
    }
}

/// `token.lua`: a fresh fencing token for `owner` while it holds the mutex (`NotDone(0)` when
/// it does not); a fair lock's holder is always given its token with the grant.
pub(super) fn token(state: &mut State, names: &LockNames, owner: &str) -> Reply {
    if live_set(state, &names.key).is_some() {
        return Reply::Foreign("zset".into());
    }
    match live(state, &names.key) {
        Some(hold) if hold.owner == owner => {
            let token = bump_token(state, &names.key);
            if let Some(hold) = state.holds.get_mut(&names.key) {
                hold.token = token;
            }
            Reply::Done(token)
        }
        _ => Reply::NotDone(0),
    }
}

/// Gives the lock to `owner`, with a fresh token if `fenced` (else token 0).
pub(super) fn grant(
    state: &mut State,
    names: &LockNames,
    owner: &str,
    lease_ms: u64,
    fenced: bool,
) -> i64 {
    let token = if fenced {
        next_token(state, &names.key)
    } else {
        // The next grant to anyone clears a yield, with a token or without.
        state.yielded.remove(&names.key);
        0
    };
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
