//! Lock names and the Redis keys derived from them.
//!
//! For a lock named `N` under prefix `P` the client uses three keys:
//!
//! | what | key |
//! |---|---|
//! | the lock hash (owner → hold count, always with a TTL) | `P:{N}` |
//! | the fencing counter | `P:{N}:fence` |
//! | the unlock channel | `P:{N}:unlock` |
//!
//! All three share the hash tag `{N}`, so they live in one cluster slot. If `N` already
//! contains a well-formed hash tag (`order:{user:7}`), the name is used without extra braces,
//! after a `#` marker (`P:#order:{user:7}`), so the user's tag decides the slot and the lock
//! can sit next to the data it protects. The marker keeps the two forms apart: the names `x`
//! and `{x}` are different locks (`P:{x}` and `P:#{x}`).

use crate::LockError;

/// The longest lock name accepted, in bytes.
///
/// A lock name must also be non-empty and free of control characters; anything else (any
/// UTF-8 text) is fine. A name is wrapped in a hash tag (`<prefix>:{name}`) so that the lock,
/// its fencing counter and its unlock channel share one cluster slot; a name that already
/// contains a non-empty hash tag (`order:{user:7}`) keeps it (`<prefix>:#order:{user:7}`).
///
/// Names built from untrusted input should be escaped by the caller (the `lock-tower` layer
/// does this for path parameters and headers), so that a value cannot alias another lock.
pub const MAX_NAME_LEN: usize = 1024;

/// The Redis keys of one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockNames {
    pub(crate) name: String,
    pub(crate) key: String,
    pub(crate) fence: String,
    pub(crate) channel: String,
}

impl LockNames {
    pub(crate) fn new(prefix: &str, name: &str) -> Result<Self, LockError> {
        validate_name(name)?;
        let base = if has_hash_tag(name) {
            format!("{prefix}:#{name}")
        } else {
            format!("{prefix}:{{{name}}}")
        };
        Ok(LockNames {
            name: name.to_owned(),
            fence: format!("{base}:fence"),
            channel: format!("{base}:unlock"),
            key: base,
        })
    }
}

fn validate_name(name: &str) -> Result<(), LockError> {
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

/// Redis' own rule: the tag is between the first `{` and the first `}` after it, if non-empty.
fn has_hash_tag(name: &str) -> bool {
    match name.find('{') {
        Some(open) => match name[open + 1..].find('}') {
            Some(len) => len > 0,
            None => false,
        },
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(n.fence, "lock:#order:{user:7}:fence");
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

    #[test]
    fn prefixes_with_braces_are_rejected() {
        assert!(validate_prefix("lock").is_ok());
        assert!(validate_prefix("a{b").is_err());
        assert!(validate_prefix("").is_err());
    }
}
