//! The keyspace: every Redis key, channel and owner id of every lock, in both layouts.
//!
//! - [`native`]: this crate's own layout (`P:{N}`, `P:{N}:fence`, `P:{N}:unlock` and the
//!   family's role keys), and why no two names meet;
//! - [`redisson`]: Redisson's layout, key by key, for every primitive (the wire contract);
//! - [`family`]: the primitives ([`Family`]) and what an acquisition asks for ([`Mode`]);
//! - [`owner`]: the owner ids of both layouts, written and read back;
//! - [`scheme`]: the pair (layout, family) resolved once per name into a [`Scheme`], which the
//!   scripts, the wake-up rules and the owner ids match on;
//! - [`layout`]: the public [`Layout`] and what it decides for a whole client.
//!
//! Nothing here talks to Redis: the layers above ask this module for names, and the scripts
//! (`script/`) receive them.

pub(crate) mod family;
pub(crate) mod layout;
pub(crate) mod native;
pub(crate) mod owner;
pub(crate) mod redisson;
pub(crate) mod scheme;

pub(crate) use family::{Family, Mode, PLACE_TTL};
pub use layout::Layout;
pub(crate) use native::{KeyRole, Role};
pub(crate) use scheme::{Scheme, Waking};

use crate::LockError;

/// The longest lock name accepted, in bytes.
///
/// A lock name must also be non-empty and free of control characters; anything else (any
/// UTF-8 text, braces anywhere) is accepted, and every accepted name gets a lock hash, a
/// fencing counter and an unlock channel that share one cluster slot and that no other name
/// can produce:
///
/// - a plain name is wrapped in a hash tag: `<prefix>:{name}`;
/// - a name that already contains a non-empty hash tag (`order:{user:7}`) keeps it
///   (`<prefix>:#order:{user:7}`), so the lock lands in the slot of that tag;
/// - a name without a hash tag that starts with `}` is escaped (`<prefix>:%{%7Dx}` for `}x`),
///   since wrapping it would give an empty tag. Its key is then up to three times as long.
///
/// The fencing counter and unlock channel keys of each form are listed in the crate docs
/// ("How it works").
///
/// Names built from untrusted input should still be escaped by the caller (the `lock-tower`
/// layer does this for path parameters and headers) so that two different values cannot be
/// spelled as one lock name.
pub const MAX_NAME_LEN: usize = 1024;

/// The Redis keys of one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockNames {
    pub(crate) name: String,
    pub(crate) key: String,
    pub(crate) fence: String,
    pub(crate) channel: String,
    /// The primitive the name is used as in its layout: decides the scripts that run on these
    /// keys, how waiters are woken and what owner ids look like.
    pub(crate) scheme: Scheme,
}

impl LockNames {
    /// The primitive the name is used as.
    pub(crate) fn family(&self) -> Family {
        self.scheme.family()
    }

    /// The owner id of an acquisition in `mode`, from `base` (`<client>:<n>`): what the
    /// scripts of this name's scheme need to know about the hold.
    pub(crate) fn owner(&self, mode: Mode, base: String) -> String {
        self.scheme.owner(mode, base)
    }

    /// The mode an owner id of this lock was written with.
    pub(crate) fn mode_of(&self, owner: &str) -> Mode {
        self.scheme.mode_of(owner)
    }

    /// How a waiter for this lock as `owner` is woken.
    pub(crate) fn waking(&self, owner: &str) -> Waking {
        match self.scheme {
            // Redisson's fair lock tells each waiter its turn on a channel of its own.
            Scheme::RedissonFair => Waking::Own(redisson::fair_waiter_channel(self, owner)),
            // Woken only when the message names us: our turn in the queue.
            Scheme::Fair => Waking::Directed,
            scheme => Waking::Shared {
                write_unlock_wakes_all: scheme.shares_read_wake_ups(),
            },
        }
    }
}

pub(crate) fn validate_name(name: &str) -> Result<(), LockError> {
    if name.is_empty() {
        return Err(LockError::invalid_name(
            name,
            "a lock name must not be empty",
        ));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(LockError::invalid_name(
            name,
            "a lock name must be at most 1024 bytes",
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(LockError::invalid_name(
            name,
            "a lock name must not contain control characters",
        ));
    }
    Ok(())
}

/// Validates a key prefix: non-empty, printable, no braces (they would take over the hash tag).
pub(crate) fn validate_prefix(prefix: &str) -> Result<(), LockError> {
    if prefix.is_empty()
        || prefix.len() > 256
        || prefix.contains(['{', '}'])
        || prefix.chars().any(char::is_control)
    {
        return Err(LockError::InvalidConfig(format!(
            "key prefix {prefix:?} must be 1 to 256 printable bytes without `{{` or `}}`"
        )));
    }
    Ok(())
}

/// Redis' own rule: the hash tag is the text between the first `{` and the first `}` after it,
/// if that is not empty.
pub(crate) fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let len = rest.find('}')?;
    (len > 0).then(|| &rest[..len])
}
