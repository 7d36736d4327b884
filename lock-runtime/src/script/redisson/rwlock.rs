//! Redisson's `RReadWriteLock` ([`RwLock`](crate::RwLock) in
//! [`Layout::Redisson`](crate::Layout::Redisson)): its scripts and calls, written from
//! Redisson's on-Redis contract (`redisson-wire.md` §4; no Redisson code).
//!
//! | what | Redis name | written by us |
//! |---|---|---|
//! | lock | hash `N` | `mode` = `read`/`write`; a reader's field `<client uuid>:<n>` → 1, the writer's `<client uuid>:<n>:write` → 1 |
//! | a read hold | `{N}:<reader field>:rwlock_timeout:1` | string `1`, `PX` the reader's lease |
//! | channel | `redisson_rwlock:{N}` | `0` from a read unlock that freed the lock, `1` from a write unlock and a force unlock |
//! | fencing counter | `redisson_lock_token:{N}` | as the mutex's (no TTL) |
//!
//! (`{N}` is `N` itself when `N` contains a `{`.)
//!
//! Why each part is there:
//!
//! - **Owner ids.** A reader's field is the acquisition's plain `<client uuid>:<n>`, the form of a
//!   Java reader's `<client uuid>:<thread id>`; the writer's ends in `:write`, as Java's do
//!   (`keys/redisson.rs`). Each acquisition has its own id and holds once: re-entry happens in the
//!   client's scope, so our counts are always 1 and a retried attempt re-arms its hold instead of
//!   counting it twice.
//! - **A reader's timeout key.** Redisson's read unlock re-arms the hash to the longest PTTL
//!   among *every* reader's `rwlock_timeout` keys and deletes it (publishing `0`) when none is
//!   left in read mode. A reader of ours therefore writes its key with its lease, and the
//!   watchdog renews it together with the hash (`renew.lua`), so a Java reader's unlock never
//!   frees the lock under a Rust reader.
//! - **Watchdogs must match.** Java's read renewal sets `N`'s TTL to Java's
//!   `lockWatchdogTimeout` with a plain `PEXPIRE` (3.x also re-arms every reader's timeout key
//!   to it, ours included), which can shorten what our last renewal set. A Rust reader is safe
//!   only while our renewal period (watchdog timeout / 3) is below Java's watchdog timeout:
//!   otherwise a Java reader that dies (3.x: or unlocks) right after its renewal lets `N`
//!   expire under a Rust reader that has not been told, and a writer gets in (review M1).
//!   Documented on `Layout::Redisson`; enforcing it (renewing Redisson readers more often, or
//!   reporting a reader lost from its own timeout key) is for `renew.lua` and the watchdog.
//! - **Wake-ups.** A write unlock publishes `1`, which wakes every Java waiter; the client reads a
//!   `1` on this channel as "wake every waiter" too (`demux::WakeRule`). A read unlock publishes
//!   `0`, which wakes one waiter per process; a reader of ours that gets in after it wakes the
//!   other local waiters (`acquire/mod.rs`).
//! - **No writer preference**, as in Redisson: a reader gets in whenever the lock is in read
//!   mode, so readers can starve a writer. (The native layout lets waiting writers go first.)
//! - **Force unlock** deletes the hash in either mode and publishes `1`.
//! - **Foreign data**: another type at `N`, a hash without a valid `mode` (an `RLock`'s), or a
//!   count that is not a number is reported, never written to.

use std::sync::LazyLock;

use redis::Script;

use crate::keys::redisson::{rw_timeout_prefix as timeout_prefix, rw_timeouts as timeouts};
use crate::keys::{LockNames, Mode};
use crate::script::call::Arg;
use crate::script::{Call, with_prelude};

/// `prelude.lua`, the read/write lock's shared `mode_of`, then `script`.
fn with_mode(script: &str) -> String {
    with_prelude(&[include_str!("rwlock_mode.lua"), script].concat())
}

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_mode(include_str!("rwlock_acquire.lua"))));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_mode(include_str!("rwlock_release.lua"))));
static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_mode(include_str!("rwlock_force_unlock.lua"))));
static INSPECT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_prelude(include_str!("rwlock_inspect.lua"))));

#[cfg(feature = "cluster")]
static RELEASE_SHARDED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&crate::script::sharded(&with_mode(include_str!(
        "rwlock_release.lua"
    ))))
});
#[cfg(feature = "cluster")]
static FORCE_UNLOCK_SHARDED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&crate::script::sharded(&with_mode(include_str!(
        "rwlock_force_unlock.lua"
    ))))
});
#[cfg(feature = "cluster")]
static INSPECT_SHARDED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&crate::script::sharded(&with_prelude(include_str!(
        "rwlock_inspect.lua"
    ))))
});

/// The read/write lock's scripts that publish (or count subscribers), for classic or sharded
/// pub/sub: its part of [`Publishing`](crate::script::Publishing).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scripts {
    release: &'static LazyLock<Script>,
    force_unlock: &'static LazyLock<Script>,
    inspect: &'static LazyLock<Script>,
}

impl Scripts {
    /// `PUBLISH`, `PUBSUB NUMSUB`.
    pub(crate) const CLASSIC: Scripts = Scripts {
        release: &RELEASE,
        force_unlock: &FORCE_UNLOCK,
        inspect: &INSPECT,
    };
    /// `SPUBLISH`, `PUBSUB SHARDNUMSUB`: as Redisson on a Redis 7 cluster.
    #[cfg(feature = "cluster")]
    pub(crate) const SHARDED: Scripts = Scripts {
        release: &RELEASE_SHARDED,
        force_unlock: &FORCE_UNLOCK_SHARDED,
        inspect: &INSPECT_SHARDED,
    };
}

/// `read` or `write`: the side an owner id of this lock takes.
fn side(names: &LockNames, owner: &str) -> &'static str {
    match names.mode_of(owner) {
        Mode::Write => "write",
        _ => "read",
    }
}

/// `rwlock_acquire.lua`: take `owner`'s side (read, or write for a `:write` owner).
pub(crate) fn acquire(names: &LockNames, owner: &str, lease_ms: u64, retention_ms: u64) -> Call {
    let side = side(names, owner);
    let timeouts = timeouts(names, owner);
    let keys = [names.key.as_str(), &names.fence, &timeouts];
    // A writer has no timeout keys (Redisson gives its script `N` alone).
    let keys = if side == "write" {
        &keys[..2]
    } else {
        &keys[..]
    };
    let args = [
        Arg::Str(owner),
        Arg::Int(lease_ms),
        Arg::Int(retention_ms),
        Arg::Str(side),
    ];
    Call::new(&ACQUIRE, keys, args)
}

/// `rwlock_release.lua`: release `owner`'s side, publishing `0` (read) or `1` (write) when the
/// lock falls free.
pub(crate) fn release(scripts: Scripts, names: &LockNames, owner: &str) -> Call {
    let side = side(names, owner);
    let (timeouts, prefix) = (timeouts(names, owner), timeout_prefix(names));
    let keys = [names.key.as_str(), &names.channel, &timeouts, &prefix];
    let keys = if side == "write" {
        &keys[..2]
    } else {
        &keys[..]
    };
    Call::new(scripts.release, keys, [Arg::Str(owner), Arg::Str(side)])
}

/// `rwlock_force_unlock.lua`: delete the lock in either mode and publish `1`.
pub(crate) fn force_unlock(scripts: Scripts, names: &LockNames) -> Call {
    Call::new(scripts.force_unlock, &[&names.key, &names.channel], [])
}

/// `rwlock_inspect.lua`: the lock's state as `inspect.lua` reports it, `mode` aside.
pub(crate) fn inspect(scripts: Scripts, names: &LockNames, max_holders: u32) -> Call {
    let prefix = timeout_prefix(names);
    Call::new(
        scripts.inspect,
        &[&names.key, &names.fence, &names.channel, &prefix],
        [Arg::Int(max_holders.into())],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layout;
    use crate::keys::Family;

    fn args(call: &Call) -> Vec<String> {
        call.evalsha()
            .args_iter()
            .skip(2)
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => "<not a simple argument>".into(),
            })
            .collect()
    }

    #[test]
    fn calls_carry_redissons_keys() {
        let names = Layout::Redisson
            .names("p", "stock:42", Family::ReadWrite)
            .unwrap();
        let reader = "0a3e7a38-7f55-4e6c-9d8a-6b1f0e2d4c11:7";
        let writer = format!("{reader}:write");
        assert_eq!(
            args(&acquire(&names, reader, 30_000, 0)),
            [
                "3",
                "stock:42",
                "redisson_lock_token:{stock:42}",
                "{stock:42}:0a3e7a38-7f55-4e6c-9d8a-6b1f0e2d4c11:7:rwlock_timeout",
                reader,
                "30000",
                "0",
                "read"
            ]
        );
        assert_eq!(
            args(&acquire(&names, &writer, 30_000, 0))[..4],
            [
                "2",
                "stock:42",
                "redisson_lock_token:{stock:42}",
                writer.as_str()
            ]
        );
        assert_eq!(
            args(&release(Scripts::CLASSIC, &names, reader))[..5],
            [
                "4",
                "stock:42",
                "redisson_rwlock:{stock:42}",
                "{stock:42}:0a3e7a38-7f55-4e6c-9d8a-6b1f0e2d4c11:7:rwlock_timeout",
                "{stock:42}"
            ]
        );
        assert_eq!(
            args(&release(Scripts::CLASSIC, &names, &writer)),
            [
                "2",
                "stock:42",
                "redisson_rwlock:{stock:42}",
                writer.as_str(),
                "write"
            ]
        );
        // A name with its own hash tag keeps it: no braces added.
        let tagged = Layout::Redisson
            .names("p", "order:{u7}", Family::ReadWrite)
            .unwrap();
        assert_eq!(
            args(&release(Scripts::CLASSIC, &tagged, reader))[3..5],
            [
                "order:{u7}:0a3e7a38-7f55-4e6c-9d8a-6b1f0e2d4c11:7:rwlock_timeout",
                "order:{u7}"
            ]
        );
    }

    #[test]
    #[cfg(feature = "cluster")]
    fn sharded_scripts_publish_on_the_shard_channel() {
        for (classic, sharded) in [
            (&RELEASE, &RELEASE_SHARDED),
            (&FORCE_UNLOCK, &FORCE_UNLOCK_SHARDED),
            (&INSPECT, &INSPECT_SHARDED),
        ] {
            assert_ne!(classic.get_hash(), sharded.get_hash());
        }
    }
}
