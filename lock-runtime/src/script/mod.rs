//! The Lua scripts that implement the lock protocol on Redis, and the calls that run them.
//!
//! Each script is a `.lua` file next to this one, put together with the `prelude.lua`
//! definitions it uses (`prelude.rs`) and hashed once. On one server and behind Sentinel the
//! native scripts are also loaded as functions of one Redis library (`functions.rs`) and called
//! with `FCALL`; elsewhere (a cluster, a server before Redis 7, a proxy or ACL that refuses
//! functions) they go as `EVALSHA`. A [`Call`] is one invocation with its keys and arguments,
//! built in `call.rs` and nowhere else, by a `match` on the lock's scheme; its reply is read in
//! `reply.rs`. The Redis backend sends calls (`topology/call.rs`), followed by `WAIT`
//! when replicas must acknowledge, and reloads a script or the library the server lost
//! (`SCRIPT FLUSH`, `FUNCTION FLUSH`, a restart, a failover to a replica that never saw it).
//!
//! `redisson/` holds the scripts of Redisson's layout (their keys are named in
//! `keys/redisson.rs`).

use std::sync::LazyLock;

use redis::Script;

mod call;
mod denied;
mod functions;
mod prelude;
pub(crate) mod redisson;
mod reply;

pub(crate) use call::{Call, Epoch, scripts_of};
pub(crate) use functions::{Dialect, is_missing};
#[cfg(feature = "cluster")]
use prelude::sharded;
use prelude::with_prelude;
pub(crate) use reply::{is_cross_slot, is_no_script};

/// A script: `prelude.lua` (the shared functions) followed by its own file, hashed once.
macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| Script::new(&with_prelude(include_str!($file))))
    };
}

/// Takes (or idempotently re-takes) the lock, with a fencing token or without one.
pub(crate) static ACQUIRE: LazyLock<Script> = script!("acquire.lua");
/// Releases our hold and publishes the unlock message, or hands the lock to a local waiter.
pub(crate) static RELEASE: LazyLock<Script> = script!("release.lua");
/// Takes a fair lock when it is our turn, or keeps our place in its queue.
pub(crate) static FAIR_ACQUIRE: LazyLock<Script> = script!("fair_acquire.lua");
/// Releases a fair lock (or leaves its queue) and wakes the next waiter by name.
pub(crate) static FAIR_RELEASE: LazyLock<Script> = script!("fair_release.lua");
/// Takes the read or write side of a read/write lock.
pub(crate) static RW_ACQUIRE: LazyLock<Script> = script!("rw_acquire.lua");
/// Takes permits of a semaphore.
pub(crate) static SEMAPHORE_ACQUIRE: LazyLock<Script> = script!("semaphore_acquire.lua");
/// Releases a read/write lock's side or a semaphore's permits.
pub(crate) static HOLDERS_RELEASE: LazyLock<Script> = script!("holders_release.lua");
/// Reads or changes a semaphore's capacity.
pub(crate) static SEMAPHORE_CAPACITY: LazyLock<Script> = script!("semaphore_capacity.lua");
/// Issues a fencing token to the holder of a mutex taken without one (tokens on demand).
pub(crate) static TOKEN: LazyLock<Script> = script!("token.lua");
/// Renews many leases at once, of any family.
pub(crate) static RENEW: LazyLock<Script> = script!("renew.lua");
/// Deletes the lock whoever holds it and publishes the unlock message.
pub(crate) static FORCE_UNLOCK: LazyLock<Script> = script!("force_unlock.lua");
/// Reads the lock's state: holders, fencing token, waiters (`PUBSUB NUMSUB`).
pub(crate) static INSPECT: LazyLock<Script> = script!("inspect.lua");

/// The sharded twin of a publishing script (`SPUBLISH`), for Redis Cluster.
#[cfg(feature = "cluster")]
macro_rules! sharded_script {
    ($file:literal) => {
        LazyLock::new(|| Script::new(&sharded(&with_prelude(include_str!($file)))))
    };
}

#[cfg(feature = "cluster")]
static ACQUIRE_SHARDED: LazyLock<Script> = sharded_script!("acquire.lua");
#[cfg(feature = "cluster")]
static RELEASE_SHARDED: LazyLock<Script> = sharded_script!("release.lua");
#[cfg(feature = "cluster")]
static FORCE_UNLOCK_SHARDED: LazyLock<Script> = sharded_script!("force_unlock.lua");
#[cfg(feature = "cluster")]
static FAIR_RELEASE_SHARDED: LazyLock<Script> = sharded_script!("fair_release.lua");
#[cfg(feature = "cluster")]
static HOLDERS_RELEASE_SHARDED: LazyLock<Script> = sharded_script!("holders_release.lua");
#[cfg(feature = "cluster")]
static SEMAPHORE_CAPACITY_SHARDED: LazyLock<Script> = sharded_script!("semaphore_capacity.lua");
#[cfg(feature = "cluster")]
static INSPECT_SHARDED: LazyLock<Script> = sharded_script!("inspect.lua");

/// The scripts that publish unlock messages (or count an unlock channel's subscribers), for
/// classic or sharded pub/sub.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Publishing {
    /// The mutex acquire (which counts the unlock channel's subscribers when clients take
    /// turns).
    pub(crate) acquire: &'static LazyLock<Script>,
    pub(crate) release: &'static LazyLock<Script>,
    pub(crate) force_unlock: &'static LazyLock<Script>,
    pub(crate) fair_release: &'static LazyLock<Script>,
    pub(crate) holders_release: &'static LazyLock<Script>,
    pub(crate) semaphore_capacity: &'static LazyLock<Script>,
    pub(crate) inspect: &'static LazyLock<Script>,
    pub(crate) redisson_fair_release: &'static LazyLock<Script>,
    pub(crate) redisson_fair_force_unlock: &'static LazyLock<Script>,
    /// Redisson's `RSemaphore` (every operation; see `redisson/semaphore.rs`).
    pub(crate) redisson_semaphore: &'static LazyLock<Script>,
    /// Redisson's `RPermitExpirableSemaphore` (every operation).
    pub(crate) redisson_permits: &'static LazyLock<Script>,
    /// Redisson's read/write lock's.
    pub(crate) redisson_rwlock: redisson::rwlock::Scripts,
}

impl Publishing {
    /// `PUBLISH`/`SUBSCRIBE`: one server, or the master behind Sentinel.
    pub(crate) const CLASSIC: Publishing = Publishing {
        acquire: &ACQUIRE,
        release: &RELEASE,
        force_unlock: &FORCE_UNLOCK,
        fair_release: &FAIR_RELEASE,
        holders_release: &HOLDERS_RELEASE,
        semaphore_capacity: &SEMAPHORE_CAPACITY,
        inspect: &INSPECT,
        redisson_fair_release: &redisson::fair::RELEASE,
        redisson_fair_force_unlock: &redisson::fair::FORCE_UNLOCK,
        redisson_semaphore: &redisson::semaphore::PLAIN,
        redisson_permits: &redisson::semaphore::PERMITS,
        redisson_rwlock: redisson::rwlock::Scripts::CLASSIC,
    };
    /// `SPUBLISH`/`SSUBSCRIBE` (Redis 7): a cluster, where a classic message would be
    /// broadcast to every node.
    #[cfg(feature = "cluster")]
    pub(crate) const SHARDED: Publishing = Publishing {
        acquire: &ACQUIRE_SHARDED,
        release: &RELEASE_SHARDED,
        force_unlock: &FORCE_UNLOCK_SHARDED,
        fair_release: &FAIR_RELEASE_SHARDED,
        holders_release: &HOLDERS_RELEASE_SHARDED,
        semaphore_capacity: &SEMAPHORE_CAPACITY_SHARDED,
        inspect: &INSPECT_SHARDED,
        redisson_fair_release: &redisson::fair::RELEASE_SHARDED,
        redisson_fair_force_unlock: &redisson::fair::FORCE_UNLOCK_SHARDED,
        redisson_semaphore: &redisson::semaphore::PLAIN_SHARDED,
        redisson_permits: &redisson::semaphore::PERMITS_SHARDED,
        redisson_rwlock: redisson::rwlock::Scripts::SHARDED,
    };
}

/// How the function library (`functions.rs`) holds a native script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InLibrary {
    /// Not at all: it is only ever sent as a script (`inspect.lua`, an operator's read).
    No,
    /// As a function, refused while Redis is out of memory.
    Yes,
    /// As a function that runs when Redis is out of memory (`allow-oom`): a lock must stay
    /// releasable and renewable on a full server.
    AllowOom,
}

/// A native script (with classic pub/sub): its file's stem, the script, its own file (without
/// the prelude), and how the function library holds it.
pub(crate) struct Native {
    pub(crate) stem: &'static str,
    pub(crate) script: &'static LazyLock<Script>,
    pub(crate) file: &'static str,
    pub(crate) library: InLibrary,
}

macro_rules! native {
    ($stem:literal, $script:ident, $library:ident) => {
        Native {
            stem: $stem,
            script: &$script,
            file: include_str!(concat!($stem, ".lua")),
            library: InLibrary::$library,
        }
    };
}

/// Every native script, once: what the function library, the ACL error reader (`denied.rs`)
/// and the tests that go over all scripts read.
pub(crate) static NATIVE: [Native; 12] = [
    native!("acquire", ACQUIRE, Yes),
    native!("release", RELEASE, AllowOom),
    native!("token", TOKEN, Yes),
    native!("fair_acquire", FAIR_ACQUIRE, Yes),
    native!("fair_release", FAIR_RELEASE, AllowOom),
    native!("rw_acquire", RW_ACQUIRE, Yes),
    native!("semaphore_acquire", SEMAPHORE_ACQUIRE, Yes),
    native!("holders_release", HOLDERS_RELEASE, AllowOom),
    native!("semaphore_capacity", SEMAPHORE_CAPACITY, Yes),
    native!("renew", RENEW, AllowOom),
    native!("force_unlock", FORCE_UNLOCK, AllowOom),
    native!("inspect", INSPECT, No),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "cluster")]
    fn sharded_scripts_publish_on_the_shard_channel() {
        for (classic, sharded) in [
            (&RELEASE, &RELEASE_SHARDED),
            (&FORCE_UNLOCK, &FORCE_UNLOCK_SHARDED),
            (&FAIR_RELEASE, &FAIR_RELEASE_SHARDED),
            (&HOLDERS_RELEASE, &HOLDERS_RELEASE_SHARDED),
            (&SEMAPHORE_CAPACITY, &SEMAPHORE_CAPACITY_SHARDED),
            (&INSPECT, &INSPECT_SHARDED),
            (&redisson::fair::RELEASE, &redisson::fair::RELEASE_SHARDED),
            (
                &redisson::fair::FORCE_UNLOCK,
                &redisson::fair::FORCE_UNLOCK_SHARDED,
            ),
            (
                &redisson::semaphore::PERMITS,
                &redisson::semaphore::PERMITS_SHARDED,
            ),
            (
                &redisson::semaphore::PLAIN,
                &redisson::semaphore::PLAIN_SHARDED,
            ),
        ] {
            assert_ne!(classic.get_hash(), sharded.get_hash());
        }
    }
}
