//! This crate's own key layout ([`Layout::Native`](crate::Layout::Native)): lock names and
//! the Redis keys derived from them.
//!
//! For a lock named `N` under prefix `P` the client uses three keys:
//!
//! | name | lock | fencing counter | unlock channel |
//! |---|---|---|---|
//! | plain: `stock:42` | `P:{N}` | `P:{N}:fence` | `P:{N}:unlock` |
//! | with its own hash tag: `order:{user:7}` | `P:#N` | `P:fence:#N` | `P:unlock:#N` |
//! | no hash tag, starting with `}`: `}x` | `P:%{E}` | `P:%{E}:fence` | `P:%{E}:unlock` |
//!
//! (`E` is `N` with `%` written `%25` and `}` written `%7D`.)
//!
//! Two guarantees, both checked over tens of thousands of adversarial names in the tests:
//!
//! - **One slot.** By Redis' rule (the hash tag is the text between the first `{` and the
//!   first `}` after it, if that is not empty) the three keys of a name have the same tag: the
//!   name itself up to its first `}` when wrapped (`{N}`), the user's own tag when the name has
//!   one, so the lock can sit next to the data it protects, and `E` for the rest. A name that
//!   starts with `}` cannot be wrapped (its tag would be empty and Redis would hash each key
//!   whole), hence the escaped form.
//! - **No aliasing.** No name produces a key that is another name's key, fence or channel.
//!   After `P:`, a lock hash starts with `{`, `#` or `%` (one marker per form, so `x` and `{x}`
//!   are different locks); a wrapped or escaped key ends with the `}` that closes it, so its
//!   fence and channel, which append a role after that brace, can be no lock hash. A name with
//!   its own tag runs to the end of its key, where a name could forge any role suffix
//!   (`{u}:fence`), so its role goes before it instead (`fence:`, `unlock:`: no lock hash
//!   starts with a letter).
//!
//! The prefix is the operator's: prefixes that extend one another (`lock` and `lock:fence`)
//! can name the same keys, so give unrelated applications unrelated prefixes.

use super::{Family, LockNames, Scheme, hash_tag, validate_name};
use crate::LockError;

impl LockNames {
    pub(crate) fn new(prefix: &str, name: &str) -> Result<Self, LockError> {
        validate_name(name)?;
        let names = if hash_tag(name).is_some() {
            // The user's text ends the key: a role appended after it could be forged by
            // another name, so the role goes in front (see the module docs). Joined with
            // `concat`, which sizes the string first (`format!` grows it as it writes: several
            // reallocations for every lock name a client meets).
            LockNames {
                name: name.to_owned(),
                key: [prefix, ":#", name].concat(),
                fence: [prefix, ":fence:#", name].concat(),
                channel: [prefix, ":unlock:#", name].concat(),
                scheme: Scheme::Mutex,
            }
        } else {
            // Our own `}` closes the key, so the role can follow it.
            let key = if name.starts_with('}') {
                [prefix, ":%{", &escape(name), "}"].concat()
            } else {
                [prefix, ":{", name, "}"].concat()
            };
            LockNames {
                name: name.to_owned(),
                fence: [&key, ":fence"].concat(),
                channel: [&key, ":unlock"].concat(),
                key,
                scheme: Scheme::Mutex,
            }
        };
        Ok(names)
    }

    /// The same keys, used as `family`.
    pub(crate) fn with_family(mut self, family: Family) -> LockNames {
        self.scheme = Scheme::native(family);
        self
    }

    /// Another key of this name, for `role` (a fair lock's queue, a semaphore's stored
    /// capacity, …): in the same slot, and no other name can produce it, by the same rule as
    /// the fencing counter and the channel (the role follows the closing brace, or goes in
    /// front of a name with its own hash tag).
    pub(crate) fn role(&self, role: Role) -> String {
        let role = role.as_str();
        if hash_tag(&self.name).is_some() {
            // `P:#N`: the role goes before the user's text.
            let prefix = &self.key[..self.key.len() - self.name.len() - 2];
            format!("{prefix}:{role}:#{}", self.name)
        } else {
            format!("{}:{role}", self.key)
        }
    }

    /// What `key`, found under `prefix`, is: the main key of a lock (with its name), another
    /// key of one (its fencing counter, channel or a role key), or no lock's. The inverse of
    /// [`LockNames::new`] and [`LockNames::role`], checked by deriving the key again, so no
    /// key of any name is mistaken for another.
    pub(crate) fn parse(prefix: &str, key: &str) -> KeyRole {
        if let Some(name) = lock_name_of(prefix, key) {
            return KeyRole::Lock(name);
        }
        let Some(rest) = key.strip_prefix(prefix).and_then(|r| r.strip_prefix(':')) else {
            return KeyRole::Unknown;
        };
        for role in Role::ALL {
            let suffix = role.as_str();
            // `P:{N}:role` and `P:%{E}:role`.
            if let Some(base) = key.strip_suffix(suffix).and_then(|b| b.strip_suffix(':'))
                && let Some(name) = lock_name_of(prefix, base)
                && LockNames::new(prefix, &name).is_ok_and(|n| n.role(role) == key)
            {
                return KeyRole::Companion;
            }
            // `P:role:#N`.
            if let Some(name) = rest.strip_prefix(suffix).and_then(|r| r.strip_prefix(":#"))
                && LockNames::new(prefix, name).is_ok_and(|n| n.role(role) == key)
            {
                return KeyRole::Companion;
            }
        }
        KeyRole::Unknown
    }
}

/// A key of a native lock besides its main key, named by its role: every key but the lock's
/// own ends (or, for a name with its own hash tag, starts) with one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The fencing counter (`LockNames::fence`).
    Fence,
    /// The unlock channel (`LockNames::channel`).
    Unlock,
    /// A fair lock's queue of waiters.
    Queue,
    /// A fair lock's waiters' places (when each ends).
    Places,
    /// A read/write lock's waiting writers.
    Writers,
    /// A semaphore's stored capacity.
    Capacity,
}

impl Role {
    /// Every role, the fence and the channel included.
    pub(crate) const ALL: [Role; 6] = [
        Role::Fence,
        Role::Unlock,
        Role::Queue,
        Role::Places,
        Role::Writers,
        Role::Capacity,
    ];

    /// The role as the key spells it.
    fn as_str(self) -> &'static str {
        match self {
            Role::Fence => "fence",
            Role::Unlock => "unlock",
            Role::Queue => "queue",
            Role::Places => "places",
            Role::Writers => "writers",
            Role::Capacity => "capacity",
        }
    }
}

/// What a key under the prefix is ([`LockNames::parse`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum KeyRole {
    /// The main key of the lock with this name.
    Lock(String),
    /// Another key of a lock (fencing counter, channel, queue, places, waiting writers,
    /// capacity).
    Companion,
    /// No lock's.
    Unknown,
}

/// The lock name whose main key is `key`, if any: the inverse of `LockNames::new`, checked by
/// deriving the key again (so no other key of any name is mistaken for a lock).
fn lock_name_of(prefix: &str, key: &str) -> Option<String> {
    let rest = key.strip_prefix(prefix)?.strip_prefix(':')?;
    let name = if let Some(escaped) = rest.strip_prefix("%{").and_then(|r| r.strip_suffix('}')) {
        unescape(escaped)?
    } else if let Some(wrapped) = rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        wrapped.to_owned()
    } else {
        rest.strip_prefix('#')?.to_owned()
    };
    (LockNames::new(prefix, &name).ok()?.key == key).then_some(name)
}

/// Undoes [`escape`] (`%25` → `%`, `%7D` → `}`); `None` for any other `%`.
fn unescape(escaped: &str) -> Option<String> {
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 3)?;
        out.push(match code {
            "25" => '%',
            "7D" => '}',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// `name` without `}` (which would end the hash tag) and with `%` escaped, so the mapping
/// stays one-to-one.
fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{MAX_NAME_LEN, validate_prefix};

    #[test]
    fn plain_names_are_wrapped_in_a_hash_tag() {
        let n = LockNames::new("lock", "stock:42").unwrap();
        assert_eq!(n.key, "lock:{stock:42}");
        assert_eq!(n.fence, "lock:{stock:42}:fence");
        assert_eq!(n.channel, "lock:{stock:42}:unlock");
    }

    #[test]
    fn a_name_with_its_own_hash_tag_keeps_it() {
        let n = LockNames::new("lock", "order:{user:7}").unwrap();
        assert_eq!(n.key, "lock:#order:{user:7}");
        assert_eq!(n.fence, "lock:fence:#order:{user:7}");
        assert_eq!(n.channel, "lock:unlock:#order:{user:7}");
    }

    /// Regression: `x` and `{x}` both mapped to `lock:{x}` (reported by the macro work).
    #[test]
    fn a_tagged_name_never_aliases_a_wrapped_one() {
        let plain = LockNames::new("lock", "x").unwrap();
        let tagged = LockNames::new("lock", "{x}").unwrap();
        assert_ne!(plain.key, tagged.key);
        assert_ne!(plain.channel, tagged.channel);
        assert_ne!(plain.fence, tagged.fence);
    }

    #[test]
    fn empty_braces_are_not_a_tag() {
        // Redis hashes `a{}b` whole; we wrap it so the three keys still share a slot.
        assert_eq!(LockNames::new("p", "a{}b").unwrap().key, "p:{a{}b}");
        assert_eq!(LockNames::new("p", "a{b").unwrap().key, "p:{a{b}");
    }

    /// Regression (L6): `}x` was wrapped as `p:{}x}`, whose tag is empty, so its lock, fence
    /// and channel hashed to three slots (CROSSSLOT on a cluster).
    #[test]
    fn a_name_starting_with_a_closing_brace_is_escaped() {
        let n = LockNames::new("p", "}x").unwrap();
        assert_eq!(n.key, "p:%{%7Dx}");
        assert_eq!(n.fence, "p:%{%7Dx}:fence");
        assert_eq!(n.channel, "p:%{%7Dx}:unlock");
        assert_eq!(LockNames::new("p", "}%").unwrap().key, "p:%{%7D%25}");
        // Braces after the first character keep the plain layout; the tag is `a`.
        assert_eq!(LockNames::new("p", "a}b").unwrap().key, "p:{a}b}");
    }

    #[test]
    fn bad_names_are_rejected() {
        for bad in ["", "a\nb", "nul\0"] {
            assert!(matches!(
                LockNames::new("p", bad),
                Err(LockError::InvalidName { .. })
            ));
        }
        let long = "x".repeat(MAX_NAME_LEN + 1);
        assert!(matches!(
            LockNames::new("p", &long),
            Err(LockError::InvalidName { .. })
        ));
        assert!(LockNames::new("p", &"x".repeat(MAX_NAME_LEN)).is_ok());
    }

    /// Every string of 1 to `most` of `pieces` joined.
    fn joined(pieces: &[&str], most: usize) -> Vec<String> {
        let mut names: Vec<String> = pieces.iter().map(|p| p.to_string()).collect();
        let mut last = names.clone();
        for _ in 1..most {
            last = last
                .iter()
                .flat_map(|n| pieces.iter().map(move |p| format!("{n}{p}")))
                .collect();
            names.extend(last.iter().cloned());
        }
        names
    }

    /// Names built from pieces that imitate the layout: braces anywhere, role words, the
    /// separators and markers. Every sequence of up to four pieces.
    fn adversarial_names() -> Vec<String> {
        const PIECES: [&str; 13] = [
            "a", "{", "}", ":", "#", "%", "{u}", "fence", "unlock", ":fence", ":unlock", "%7D",
            "lock:",
        ];
        let mut names = joined(&PIECES, 4);
        names.sort();
        names.dedup();
        names
    }

    /// What Redis Cluster hashes for a key: the text between the first `{` and the first `}`
    /// after it when that is not empty, else the whole key. Written from the Redis docs, apart
    /// from the code under test.
    fn hashed_part(key: &str) -> &[u8] {
        let bytes = key.as_bytes();
        bytes
            .iter()
            .position(|&b| b == b'{')
            .and_then(|open| {
                let rest = &bytes[open + 1..];
                let len = rest.iter().position(|&b| b == b'}')?;
                (len > 0).then(|| &rest[..len])
            })
            .unwrap_or(bytes)
    }

    /// Regression (L1): the name `{u}:fence` was the fencing counter of the lock `{u}`.
    #[test]
    fn no_name_is_the_fence_or_channel_of_another() {
        let lock = LockNames::new("lock", "{u}").unwrap();
        for forged in ["{u}:fence", "{u}:unlock"] {
            let other = LockNames::new("lock", forged).unwrap();
            for mine in [&lock.key, &lock.fence, &lock.channel] {
                for theirs in [&other.key, &other.fence, &other.channel] {
                    assert_ne!(mine, theirs, "{forged:?} aliases a key of \"{{u}}\"");
                }
            }
        }
    }

    /// The extra keys of the lock family (see `family.rs`).
    const ROLES: [Role; 4] = [Role::Queue, Role::Places, Role::Writers, Role::Capacity];

    /// Property: across many adversarial names, every derived key (lock, fence, channel, the
    /// family's extra keys) is
    /// derived from exactly one name in exactly one role.
    #[test]
    fn derived_keys_of_distinct_names_never_meet() {
        let names = adversarial_names();
        assert!(names.len() > 25_000, "{}", names.len());
        let mut owner: std::collections::HashMap<String, (String, &str)> =
            std::collections::HashMap::new();
        for name in &names {
            let n = LockNames::new("lock", name)
                .unwrap_or_else(|e| panic!("{name:?} must be laid out, not rejected: {e}"));
            assert_eq!(n.role(Role::Fence), n.fence, "{name:?}");
            assert_eq!(n.role(Role::Unlock), n.channel, "{name:?}");
            let roles = ROLES.map(|role| (role.as_str(), n.role(role)));
            for (role, key) in [
                ("key", &n.key),
                ("fence", &n.fence),
                ("channel", &n.channel),
            ]
            .into_iter()
            .chain(roles.iter().map(|(role, key)| (*role, key)))
            {
                if let Some((other, other_role)) = owner.insert(key.clone(), (name.clone(), role)) {
                    panic!("{key:?} is the {role} of {name:?} and the {other_role} of {other:?}");
                }
            }
        }
    }

    /// Property (L6): the lock, its fence and its channel hash to one slot by Redis' own rule,
    /// for names with braces in every position; a name with its own tag keeps it.
    #[test]
    fn the_three_keys_of_every_name_share_one_slot() {
        let mut names = adversarial_names();
        names.extend(
            [
                "}x", "}", "}}", "}{", "}{}", "a}{b}", "{}x", "{}}", "x}", "{{}}", "}{u}", "%}",
            ]
            .map(String::from),
        );
        for name in &names {
            let n = LockNames::new("lock", name)
                .unwrap_or_else(|e| panic!("{name:?} must be laid out, not rejected: {e}"));
            let tag = hashed_part(&n.key);
            assert_ne!(
                tag,
                n.key.as_bytes(),
                "{name:?}: {:?} has no hash tag",
                n.key
            );
            assert_eq!(
                tag,
                hashed_part(&n.fence),
                "{name:?}: {:?} vs {:?}",
                n.key,
                n.fence
            );
            assert_eq!(
                tag,
                hashed_part(&n.channel),
                "{name:?}: {:?} vs {:?}",
                n.key,
                n.channel
            );
            for role in ROLES {
                assert_eq!(tag, hashed_part(&n.role(role)), "{name:?}: {role:?}");
            }
            if hashed_part(name) != name.as_bytes() {
                assert_eq!(
                    tag,
                    hashed_part(name),
                    "{name:?} must keep its own hash tag"
                );
            }
        }
    }

    #[test]
    fn prefixes_with_braces_are_rejected() {
        assert!(validate_prefix("lock").is_ok());
        assert!(validate_prefix("a{b").is_err());
        assert!(validate_prefix("").is_err());
    }

    /// Names that imitate the layout, as in the tests above.
    fn tricky_names() -> Vec<String> {
        const PIECES: [&str; 12] = [
            "a", "{", "}", ":", "#", "%", "{u}", "fence", ":queue", "%7D", "%25", "lock:",
        ];
        joined(&PIECES, 3)
    }

    #[test]
    fn every_key_maps_back_to_its_name_or_role() {
        for name in tricky_names() {
            let n = LockNames::new("lock", &name).unwrap();
            assert_eq!(
                LockNames::parse("lock", &n.key),
                KeyRole::Lock(name.clone()),
                "{name:?}: {:?}",
                n.key
            );
            for role in Role::ALL {
                assert_eq!(
                    LockNames::parse("lock", &n.role(role)),
                    KeyRole::Companion,
                    "{name:?}: {role:?}"
                );
            }
            assert_eq!(LockNames::parse("lock", &n.fence), KeyRole::Companion);
        }
    }

    #[test]
    fn keys_of_no_lock_are_unknown() {
        for key in [
            "lock:plain",
            "lock:",
            "lock:{",
            "lock:{}x}",
            "lock:#no-tag",
            "lock:%{bad%zz}",
            "lock:%{x}",
            "lock:{a}:other",
            "lock:fence:#no-tag",
            "lockx:{a}",
            "other:{a}",
        ] {
            assert_eq!(LockNames::parse("lock", key), KeyRole::Unknown, "{key:?}");
        }
    }
}
