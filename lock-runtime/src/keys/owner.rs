//! The owner-id grammar of both layouts: how an acquisition's owner id is written, and every
//! way one is read back (its mode, the client that wrote it, whether a value is one at all).
//!
//! | scheme | owner id |
//! |---|---|
//! | native mutex, fair lock | `<client>:<n>` |
//! | native read/write lock | `<client>:<n>#r` or `<client>:<n>#w` |
//! | native semaphore | `<client>:<n>#<permits>` |
//! | Redisson `RReadWriteLock` | a reader `<client>:<n>`, the writer `<client>:<n>:write` |
//! | Redisson `RPermitExpirableSemaphore` | `permits:<id>[,<id>…]#<permits>` |
//! | Redisson `RSemaphore` | `plain:<client>:<n>#<permits>` (written nowhere) |
//!
//! `<client>` is the client's id (hex, `LockClient::id`), `<n>` the acquisition's number.

use super::Mode;

/// The most permits one `RPermitExpirableSemaphore` hold may take: its owner id carries one
/// 33-byte id per permit (33 KiB at this cap).
pub(super) const MAX_PERMITS_PER_HOLD: u32 = 1024;

/// The suffix of a writer's field in Redisson's `RReadWriteLock` (`<owner>:write`).
const WRITER: &str = ":write";

impl Mode {
    /// The owner id of an acquisition: `base` (`<client>:<n>`) with what the scripts need to
    /// know about the hold.
    pub(crate) fn owner(self, base: String) -> String {
        match self {
            Mode::Exclusive => base,
            Mode::Read => base + "#r",
            Mode::Write => base + "#w",
            Mode::Permits(n) => format!("{base}#{n}"),
        }
    }

    /// The mode an owner id was written with.
    pub(crate) fn of_owner(owner: &str) -> Mode {
        match suffix(owner) {
            Some("r") => Mode::Read,
            Some("w") => Mode::Write,
            Some(n) => n.parse().map_or(Mode::Exclusive, Mode::Permits),
            None => Mode::Exclusive,
        }
    }
}

/// What follows an owner id's last `#` (its mode: `r`, `w` or a count of permits), if it has
/// one; read as the scripts read it (the memory backend's models of them included).
pub(crate) fn suffix(owner: &str) -> Option<&str> {
    owner.rsplit_once('#').map(|(_, suffix)| suffix)
}

/// The owner id of an `RReadWriteLock` acquisition: a reader is `base` itself (`<client
/// uuid>:<n>`, as a Java reader's `<client uuid>:<thread id>`), the writer `base` with
/// Redisson's `:write`.
pub(crate) fn rw_owner(mode: Mode, base: String) -> String {
    match mode {
        Mode::Write => base + WRITER,
        _ => base,
    }
}

/// The mode of an `RReadWriteLock` field: the writer's `:write` suffix, or else a reader
/// (Java's fields included).
pub(crate) fn rw_mode_of(owner: &str) -> Mode {
    if owner.ends_with(WRITER) {
        Mode::Write
    } else {
        Mode::Read
    }
}

/// The owner id of an `RPermitExpirableSemaphore` acquisition of `n` permits:
/// `permits:<id>[,<id>…]#<n>`, one fresh id per permit, each 32 lower-case hex chars (16
/// random bytes, a v4 UUID's, decoded to the 16 raw bytes Redisson stores by the scripts).
pub(crate) fn permits_owner(n: u32) -> String {
    let ids: Vec<String> = (0..n)
        .map(|_| uuid::Uuid::new_v4().simple().to_string())
        .collect();
    format!("permits:{}#{n}", ids.join(","))
}

/// The owner id of a plain `RSemaphore` acquisition of `n` permits: `plain:<base>#<n>`.
pub(crate) fn plain_owner(base: String, n: u32) -> String {
    format!("plain:{base}#{n}")
}

/// The id of the client that wrote `owner`, when the owner id has the runtime's form (a
/// native mode suffix and a Redisson writer's `:write` taken off, the client is what stands
/// before the last `:`).
pub(crate) fn client_id(owner: &str) -> Option<&str> {
    let base = match owner.rsplit_once('#') {
        Some((base, "r" | "w")) => base,
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => owner,
    };
    // A writer of Redisson's read/write lock: `<client>:<n>:write`.
    let base = base.strip_suffix(WRITER).unwrap_or(base);
    base.rsplit_once(':')
        .map(|(client, _)| client)
        .filter(|c| !c.is_empty())
}

/// Whether `value` is an owner id of this crate's layout, `<client hex>:<n>` (as
/// `is_owner_id` in `prelude.lua`).
pub(crate) fn is_owner_id(value: &[u8]) -> bool {
    let text = std::str::from_utf8(value).unwrap_or_default();
    text.split_once(':').is_some_and(|(client, n)| {
        !client.is_empty()
            && client.bytes().all(|b| b.is_ascii_hexdigit())
            && !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_ids_round_trip_their_mode() {
        for mode in [
            Mode::Exclusive,
            Mode::Read,
            Mode::Write,
            Mode::Permits(1),
            Mode::Permits(40),
        ] {
            assert_eq!(Mode::of_owner(&mode.owner("abc:7".into())), mode);
        }
        assert_eq!(Mode::Permits(3).owner("c:1".into()), "c:1#3");
    }

    #[test]
    fn read_write_owners_read_like_redissons() {
        let base = "0a3e7a38-7f55-4e6c-9d8a-6b1f0e2d4c11:7".to_owned();
        assert_eq!(rw_owner(Mode::Read, base.clone()), base);
        let writer = rw_owner(Mode::Write, base.clone());
        assert_eq!(writer, format!("{base}:write"));
        assert_eq!(rw_mode_of(&writer), Mode::Write);
        assert_eq!(rw_mode_of(&base), Mode::Read);
    }

    #[test]
    fn permit_owner_ids_carry_one_permit_id_each() {
        let owner = permits_owner(3);
        let ids: Vec<&str> = owner
            .strip_prefix("permits:")
            .and_then(|rest| rest.rsplit_once('#'))
            .map(|(ids, _)| ids.split(',').collect())
            .unwrap_or_default();
        assert_eq!(ids.len(), 3);
        assert!(ids.iter().all(|id| {
            id.len() == 32
                && id
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        }));
        assert_eq!(Mode::of_owner(&owner), Mode::Permits(3));
        let plain = plain_owner("c:1".into(), 2);
        assert_eq!(plain, "plain:c:1#2");
        assert_eq!(Mode::of_owner(&plain), Mode::Permits(2));
    }

    #[test]
    fn the_client_is_read_from_every_form_of_owner_id() {
        assert_eq!(client_id("ab12:7"), Some("ab12"));
        assert_eq!(client_id("ab12:7#r"), Some("ab12"));
        assert_eq!(client_id("ab12:7#3"), Some("ab12"));
        assert_eq!(client_id("ab12:7:write"), Some("ab12"));
        assert_eq!(client_id("nocolon"), None);
        assert!(is_owner_id(b"ab12:7"));
        assert!(!is_owner_id(b"ab12:x"));
        assert!(!is_owner_id(b":7"));
    }
}
