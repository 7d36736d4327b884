//! The Lua scripts that implement the lock protocol on Redis, and the calls that run them.
//!
//! Each script is a `.lua` file next to this one, hashed once and sent with `EVALSHA`. A
//! [`Call`] is one invocation with its keys and arguments, built here and nowhere else; the
//! Redis backend (`topology/operations.rs`) sends calls, followed by `WAIT` when replicas must
//! acknowledge, and reloads a script the server lost (`SCRIPT FLUSH`, a restart, a failover to
//! a replica that never saw it).

use std::borrow::Cow;
use std::sync::LazyLock;

use redis::{Cmd, Script, Value};

pub(crate) use crate::backend::{CapacityOp, HandOff, LockState, Reply};
use crate::family::{Family, PLACE_TTL};
use crate::layout::Layout;
use crate::names::LockNames;

mod denied;
mod functions;
pub(crate) mod redisson;
pub(crate) use denied::denied;
pub(crate) use functions::{Dialect, is_missing};

/// A script: `prelude.lua` (the shared functions) followed by its own file, hashed once.
macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| Script::new(&with_prelude(include_str!($file))))
    };
}

/// Takes (or idempotently re-takes) the lock and bumps the fencing counter.
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
/// Renews many leases at once, of any family.
pub(crate) static RENEW: LazyLock<Script> = script!("renew.lua");
/// Deletes the lock whoever holds it and publishes the unlock message.
pub(crate) static FORCE_UNLOCK: LazyLock<Script> = script!("force_unlock.lua");
/// Reads the lock's state: holders, fencing token, waiters (`PUBSUB NUMSUB`).
pub(crate) static INSPECT: LazyLock<Script> = script!("inspect.lua");

/// Runs queued mutex acquires and releases in one call (group commit): `batch.lua` after the
/// functions of `acquire.lua` and `release.lua`, so each operation is exactly its own script's.
pub(crate) static BATCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&with_prelude(
        &[
            function_only(include_str!("acquire.lua")),
            function_only(include_str!("release.lua")),
            include_str!("batch.lua"),
        ]
        .concat(),
    ))
});

/// A script without its last line, the `return f(KEYS[1], …)` that runs its function.
fn function_only(script: &str) -> &str {
    let body = script.trim_end();
    let last = body.rfind('\n').map_or(0, |i| i + 1);
    debug_assert!(
        body[last..].starts_with("return "),
        "a script's last line runs its function"
    );
    &body[..last]
}

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

/// The definitions of `prelude.lua` (the shared functions: the one way a lock is granted, the
/// fencing counter, the sorted-set helpers) that `script` uses, directly or through one
/// another, in the prelude's order, followed by `script`.
///
/// Only those: Redis runs a script's whole text on every call, and each definition it carries
/// costs a closure there.
fn with_prelude(script: &str) -> String {
    let definitions = &*PRELUDE;
    let mut kept = vec![false; definitions.len()];
    let mut unread = vec![without_comments(script)];
    while let Some(code) = unread.pop() {
        for (i, definition) in definitions.iter().enumerate() {
            if !kept[i] && definition.names.iter().any(|name| mentions(&code, name)) {
                kept[i] = true;
                unread.push(without_comments(definition.text));
            }
        }
    }
    let mut code = String::new();
    for (definition, _) in definitions.iter().zip(&kept).filter(|(_, kept)| **kept) {
        code.push_str(definition.text);
        code.push_str("\n\n");
    }
    code.push_str(script);
    code
}

/// A piece of `prelude.lua`: one or more top-level `local` definitions, with their comments.
struct Definition {
    /// The names it defines.
    names: Vec<&'static str>,
    text: &'static str,
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
pub(crate) static NATIVE: [Native; 11] = [
    native!("acquire", ACQUIRE, Yes),
    native!("release", RELEASE, AllowOom),
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

/// `prelude.lua` cut at its blank lines; pieces that define nothing (its header) are left out.
static PRELUDE: LazyLock<Vec<Definition>> = LazyLock::new(|| {
    include_str!("prelude.lua")
        .split("\n\n")
        .filter_map(|text| {
            let names: Vec<&str> = text
                .lines()
                .filter_map(|line| {
                    let rest = line.strip_prefix("local ")?;
                    let rest = rest.strip_prefix("function ").unwrap_or(rest);
                    let end = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    Some(&rest[..end])
                })
                .filter(|name| !name.is_empty())
                .collect();
            (!names.is_empty()).then(|| Definition {
                names,
                text: text.trim_matches('\n'),
            })
        })
        .collect()
});

/// Lua `text` without its comments (`--` to the end of a line; our scripts have no `--` in a
/// string).
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| line.split("--").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether Lua `code` mentions the identifier `name` (as a whole word).
fn mentions(code: &str, name: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    code.match_indices(name).any(|(at, _)| {
        !word(code[..at].chars().next_back()) && !word(code[at + name.len()..].chars().next())
    })
}

#[cfg(feature = "cluster")]
fn sharded(code: &str) -> String {
    let out = code
        .replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'")
        .replace(
            "redis.call('PUBSUB', 'NUMSUB'",
            "redis.call('PUBSUB', 'SHARDNUMSUB'",
        );
    debug_assert_ne!(
        out, code,
        "script has no PUBLISH or PUBSUB NUMSUB to turn into its sharded form"
    );
    out
}

/// One script invocation: the script (to reload it), and its command: the `FCALL` of the
/// library function that runs the same script (`functions.rs`) if there is one, else its
/// `EVALSHA`. Built once, in the form most endpoints take.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    script: &'static Script,
    cmd: Cmd,
    /// The library function `cmd` calls, if it is an `FCALL`.
    function: Option<&'static str>,
    /// How many of the arguments after the hash are keys.
    keys: usize,
}

/// The scripts `calls` use, each once: what to load after the server lost them.
pub(crate) fn scripts_of(calls: &[Call]) -> Vec<&'static Script> {
    let mut scripts: Vec<&'static Script> = Vec::new();
    for call in calls {
        if !scripts.iter().any(|s| std::ptr::eq(*s, call.script)) {
            scripts.push(call.script);
        }
    }
    scripts
}

/// A script argument.
enum Arg<'a> {
    Str(&'a str),
    Int(u64),
}

impl Call {
    fn new<'a>(
        script: &'static Script,
        keys: &[&str],
        args: impl IntoIterator<Item = Arg<'a>>,
    ) -> Call {
        let function = functions::LIBRARY.function_of(script);
        let mut cmd = match function {
            Some(function) => {
                let mut cmd = redis::cmd("FCALL");
                cmd.arg(function);
                cmd
            }
            None => {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(script.get_hash());
                cmd
            }
        };
        cmd.arg(keys.len()).arg(keys);
        for arg in args {
            match arg {
                Arg::Str(s) => cmd.arg(s),
                Arg::Int(n) => cmd.arg(n),
            };
        }
        Call {
            script,
            cmd,
            function,
            keys: keys.len(),
        }
    }

    /// `Some('a')` for a mutex acquire, `Some('r')` for a mutex release (both in our layout,
    /// with classic pub/sub): what [`Call::batch`] can run together.
    pub(crate) fn batch_kind(&self) -> Option<&'static str> {
        if std::ptr::eq(self.script, LazyLock::force(&ACQUIRE)) {
            Some("a")
        } else if std::ptr::eq(self.script, LazyLock::force(&RELEASE)) {
            Some("r")
        } else {
            None
        }
    }

    /// `batch.lua`: `calls` (each with a [`Call::batch_kind`]) as one script call that runs
    /// them in order and replies with one reply per call.
    pub(crate) fn batch(calls: &[&Call]) -> Call {
        let mut keys: Vec<&[u8]> = Vec::new();
        let mut args: Vec<Vec<u8>> = Vec::new();
        for call in calls {
            let kind = call.batch_kind().unwrap_or("r");
            // FCALL and the function (or EVALSHA and the hash), the key count, the keys, the
            // arguments.
            let mut parts = call.cmd.args_iter().skip(3).filter_map(|arg| match arg {
                redis::Arg::Simple(bytes) => Some(bytes),
                _ => None,
            });
            keys.extend(parts.by_ref().take(call.keys));
            let own: Vec<&[u8]> = parts.collect();
            args.push(kind.as_bytes().to_vec());
            args.push(own.len().to_string().into_bytes());
            args.extend(own.into_iter().map(<[u8]>::to_vec));
        }
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(BATCH.get_hash())
            .arg(keys.len())
            .arg(&keys)
            .arg(&args);
        Call {
            script: &BATCH,
            cmd,
            function: None,
            keys: keys.len(),
        }
    }

    /// `acquire.lua`: take or re-take the lock for `owner`, bump the fencing counter (kept
    /// `retention_ms` after its last use). `waiting`: the owner's client waits for the lock
    /// (is subscribed to its unlock channel), which the mutex's turns across clients count.
    ///
    /// The script is the name's family's: a fair lock's also keeps the waiter's place in its
    /// queue, a read/write lock's a waiting writer's place, a semaphore's checks the capacity.
    pub(crate) fn acquire(
        publishing: Publishing,
        names: &LockNames,
        owner: &str,
        lease_ms: u64,
        retention_ms: u64,
        waiting: bool,
    ) -> Call {
        if let Some(call) = redisson::acquire(publishing, names, owner, lease_ms, retention_ms) {
            return call;
        }
        let args = [Arg::Str(owner), Arg::Int(lease_ms), Arg::Int(retention_ms)];
        let place_ms = Arg::Int(PLACE_TTL.as_millis() as u64);
        match names.family {
            Family::Mutex => Call::new(
                publishing.acquire,
                &[&names.key, &names.fence, &names.channel],
                args.into_iter()
                    .chain([Arg::Str(if waiting { "1" } else { "0" })]),
            ),
            Family::Fair => Call::new(
                &FAIR_ACQUIRE,
                &[
                    &names.key,
                    &names.fence,
                    &names.role("queue"),
                    &names.role("places"),
                ],
                args.into_iter().chain([place_ms]),
            ),
            Family::ReadWrite => Call::new(
                &RW_ACQUIRE,
                &[&names.key, &names.fence, &names.role("writers")],
                args.into_iter().chain([place_ms]),
            ),
            Family::Semaphore { capacity, .. } => Call::new(
                &SEMAPHORE_ACQUIRE,
                &[&names.key, &names.fence, &names.role("capacity")],
                args.into_iter().chain([Arg::Int(capacity.into())]),
            ),
        }
    }

    /// `release.lua`: release `owner`'s hold and publish the unlock message, or, with `next`,
    /// hand the lock to that waiting owner.
    ///
    /// For the other families: release `owner`'s hold *and* its place among the waiters (a
    /// fair lock's queue, a read/write lock's waiting writers), waking the waiters that can
    /// now go. `next` is for the mutex only.
    pub(crate) fn release(
        publishing: Publishing,
        names: &LockNames,
        owner: &str,
        next: Option<&HandOff<'_>>,
    ) -> Call {
        if let Some(call) = redisson::release(publishing, names, owner) {
            return call;
        }
        let owner_arg = [Arg::Str(owner)];
        match names.family {
            Family::Mutex => {}
            Family::Fair => {
                let keys = [
                    names.key.as_str(),
                    &names.channel,
                    &names.role("queue"),
                    &names.role("places"),
                ];
                return Call::new(publishing.fair_release, &keys, owner_arg);
            }
            Family::ReadWrite => {
                let keys = [names.key.as_str(), &names.channel, &names.role("writers")];
                return Call::new(publishing.holders_release, &keys, owner_arg);
            }
            Family::Semaphore { .. } => {
                let keys = [names.key.as_str(), &names.channel];
                return Call::new(publishing.holders_release, &keys, owner_arg);
            }
        }
        let keys = [names.key.as_str(), &names.channel, &names.fence];
        let mut args = vec![Arg::Str(owner)];
        if let Some(next) = next {
            args.extend([
                Arg::Str(next.owner),
                Arg::Int(next.lease_ms),
                Arg::Int(next.retention_ms),
            ]);
            if let Some(yield_ms) = next.yield_ms {
                args.push(Arg::Int(yield_ms));
            }
        }
        Call::new(publishing.release, &keys, args)
    }

    /// `force_unlock.lua`: delete the lock whoever holds it and publish the unlock message.
    pub(crate) fn force_unlock(publishing: Publishing, names: &LockNames) -> Call {
        if let Some(call) = redisson::force_unlock(publishing, names) {
            return call;
        }
        let keys = [names.key.as_str(), &names.channel];
        if names.layout == Layout::Redisson {
            // Redisson reads every payload as a number: `0` wakes a waiter per process, as
            // Java's own force unlock does (one suffices: the lock is free).
            return Call::new(publishing.force_unlock, &keys, [Arg::Str("0")]);
        }
        Call::new(publishing.force_unlock, &keys, [])
    }

    /// `semaphore_capacity.lua`: a semaphore's free permits or capacity, or a change of its
    /// stored capacity (which wakes every waiter).
    pub(crate) fn semaphore_capacity(
        publishing: Publishing,
        names: &LockNames,
        default_capacity: u32,
        op: CapacityOp,
    ) -> Call {
        if let Some(call) = redisson::semaphore::capacity(publishing, names, default_capacity, op) {
            return call;
        }
        let keys = [names.key.as_str(), &names.role("capacity"), &names.channel];
        let (op, value) = match op {
            CapacityOp::Free => ("free", 0),
            CapacityOp::Capacity => ("capacity", 0),
            CapacityOp::Set(n) => ("set", n),
            CapacityOp::Clear => ("clear", 0),
        };
        Call::new(
            publishing.semaphore_capacity,
            &keys,
            [
                Arg::Int(default_capacity.into()),
                Arg::Str(op),
                Arg::Int(value.into()),
            ],
        )
    }

    /// `inspect.lua`: the lock's state, whichever member of the family the name is used as
    /// (every role key of the name is passed; they share its slot), with at most
    /// `max_holders` holders listed.
    pub(crate) fn inspect(publishing: Publishing, names: &LockNames, max_holders: u32) -> Call {
        if let Some(call) = redisson::inspect(publishing, names, max_holders) {
            return call;
        }
        let keys = [
            names.key.as_str(),
            &names.fence,
            &names.channel,
            &names.role("queue"),
            &names.role("places"),
            &names.role("writers"),
            &names.role("capacity"),
        ];
        Call::new(publishing.inspect, &keys, [Arg::Int(max_holders.into())])
    }

    /// `renew.lua`: renew the leases of many `(key, owner)` pairs at once; replies with one
    /// `1` (renewed) or `0` (not ours any more) per pair.
    pub(crate) fn renew<'a>(
        locks: impl Iterator<Item = (&'a str, &'a str)> + Clone,
        lease_ms: u64,
    ) -> Call {
        let keys: Vec<&str> = locks.clone().map(|(key, _)| key).collect();
        let owners = locks.map(|(_, owner)| Arg::Str(owner));
        Call::new(
            &RENEW,
            &keys,
            std::iter::once(Arg::Int(lease_ms)).chain(owners),
        )
    }

    /// The script, to load it after the server lost it.
    pub(crate) fn script(&self) -> &'static Script {
        self.script
    }

    /// The `FCALL` command, when the script is one of the library's functions.
    pub(crate) fn fcall(&self) -> Option<&Cmd> {
        self.function.map(|_| &self.cmd)
    }

    /// The `EVALSHA` command (made from the `FCALL` for an endpoint that takes scripts only).
    pub(crate) fn evalsha(&self) -> Cow<'_, Cmd> {
        if self.function.is_none() {
            return Cow::Borrowed(&self.cmd);
        }
        let hash = self.script.get_hash();
        let mut cmd = Cmd::with_capacity(self.cmd.args_iter().count(), self.cmd_len() + 40);
        cmd.arg("EVALSHA").arg(hash);
        // FCALL and the function; then the key count, the keys and the arguments, as they are.
        for arg in self.cmd.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                cmd.arg(bytes);
            }
        }
        Cow::Owned(cmd)
    }

    /// The bytes of the command's arguments.
    fn cmd_len(&self) -> usize {
        self.cmd
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => bytes.len(),
                _ => 0,
            })
            .sum()
    }
}

impl redis::FromRedisValue for Reply {
    /// The `{code, detail}` pair every single-key script returns: `{1, n}` done, `{0, n}` not
    /// done, `{2, token}` released and handed over, `{3, capacity}` more permits asked than a
    /// semaphore has, `{-1, type}` foreign data.
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let (code, detail): (i64, Value) = redis::FromRedisValue::from_redis_value(v)?;
        let int = |v: Value| -> Result<i64, redis::ParsingError> {
            redis::FromRedisValue::from_redis_value(v)
        };
        match code {
            1 => Ok(Reply::Done(int(detail)?)),
            0 => Ok(Reply::NotDone(int(detail)?)),
            2 => Ok(Reply::HandedOff(int(detail)?)),
            3 => Ok(Reply::Exceeds(int(detail)?)),
            -1 => Ok(Reply::Foreign(redis::FromRedisValue::from_redis_value(
                detail,
            )?)),
            other => Err(format!("unexpected lock script status {other}").into()),
        }
    }
}

impl redis::FromRedisValue for LockState {
    /// `inspect.lua`'s reply: `{type, pttl, holders, holder count, token, queued, writers,
    /// subscribers, capacity}`. Text that is not UTF-8 (a foreign hash's fields) is read lossily.
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let fields: Vec<Value> = redis::FromRedisValue::from_redis_value(v)?;
        let [
            kind,
            pttl,
            holders,
            count,
            token,
            queued,
            writers,
            subscribers,
            capacity,
        ] = <[Value; 9]>::try_from(fields)
            .map_err(|f| format!("inspect replied {} fields, not 9", f.len()))?;
        let int = |v: Value| -> Result<i64, redis::ParsingError> {
            redis::FromRedisValue::from_redis_value(v)
        };
        let text = |v: Value| -> Result<String, redis::ParsingError> {
            match v {
                Value::BulkString(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
                v => redis::FromRedisValue::from_redis_value(v),
            }
        };
        let count_of = |v: Value| int(v).map(|n| u64::try_from(n).unwrap_or(0));
        let flat: Vec<Value> = redis::FromRedisValue::from_redis_value(holders)?;
        let mut pairs = Vec::with_capacity(flat.len() / 2);
        let mut flat = flat.into_iter();
        while let (Some(owner), Some(detail)) = (flat.next(), flat.next()) {
            // A foreign hash's value need not be a number.
            let detail = text(detail)?.trim().parse().unwrap_or(0);
            pairs.push((text(owner)?, detail));
        }
        let optional = |v: Value| -> Result<Option<String>, redis::ParsingError> {
            match v {
                Value::Nil => Ok(None),
                v => text(v).map(Some),
            }
        };
        Ok(LockState {
            kind: text(kind)?,
            pttl: int(pttl)?,
            holders: pairs,
            holder_count: count_of(count)?,
            token: optional(token)?.and_then(|t| t.parse().ok()),
            queued: count_of(queued)?,
            writers: count_of(writers)?,
            subscribers: count_of(subscribers)?,
            capacity: optional(capacity)?.and_then(|c| c.parse().ok()),
        })
    }
}

/// Whether an error says a command's keys are in different cluster slots: a proxy in front of
/// a cluster (Redis Enterprise, Azure, Envoy) rejects a multi-key script call that spans slots.
pub(crate) fn is_cross_slot(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::CrossSlot)
}

/// Whether an error says the server has no script for our hash (after `SCRIPT FLUSH` or a
/// restart).
pub(crate) fn is_no_script(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::FromRedisValue;

    #[test]
    fn a_script_carries_the_prelude_definitions_it_uses_and_no_others() {
        let acquire = with_prelude(include_str!("acquire.lua"));
        for used in [
            "local function grant(",
            "local function next_token(",
            "local function clock_us(",
            "local clock_read",
            "local function others_wait(",
            "local TURN_LAPSE_US",
        ] {
            assert!(acquire.contains(used), "acquire.lua lacks `{used}`");
        }
        for unused in ["queue_head", "grant_member", "permits_held", "yield"] {
            let code = without_comments(&acquire);
            assert!(!mentions(&code, unused), "acquire.lua carries `{unused}`");
        }
        // Every definition is used by some script.
        let all: String = NATIVE.iter().map(|n| with_prelude(n.file)).collect();
        for definition in PRELUDE.iter() {
            assert!(
                all.contains(definition.text),
                "{:?} is never used",
                definition.names
            );
        }
    }

    #[test]
    fn mentions_matches_whole_words() {
        assert!(mentions("return grant(a)", "grant"));
        assert!(!mentions("return grant_member(a)", "grant"));
        assert!(!mentions("local regrant = 1", "grant"));
        assert!(mentions("grant", "grant"));
    }

    #[test]
    fn replies_parse() {
        let v = |code, detail| Value::Array(vec![Value::Int(code), detail]);
        assert_eq!(
            Reply::from_redis_value(v(1, Value::Int(42))).unwrap(),
            Reply::Done(42)
        );
        assert_eq!(
            Reply::from_redis_value(v(0, Value::Int(-1))).unwrap(),
            Reply::NotDone(-1)
        );
        assert_eq!(
            Reply::from_redis_value(v(-1, Value::BulkString(b"string".to_vec()))).unwrap(),
            Reply::Foreign("string".into())
        );
        assert!(Reply::from_redis_value(v(7, Value::Int(0))).is_err());
    }

    #[test]
    fn inspect_replies_parse() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = Value::Array(vec![
            Value::SimpleString("zset".into()),
            Value::Int(900),
            Value::Array(vec![bulk("c:1#2"), bulk("900"), bulk("c:2#1"), bulk("40")]),
            Value::Int(2),
            bulk("1700000000000001"),
            Value::Int(0),
            Value::Int(0),
            Value::Int(3),
            bulk("5"),
        ]);
        let state = LockState::from_redis_value(reply).unwrap();
        assert_eq!(state.kind, "zset");
        assert_eq!(state.pttl, 900);
        assert_eq!(
            state.holders,
            [("c:1#2".to_owned(), 900), ("c:2#1".to_owned(), 40)]
        );
        assert_eq!(state.token, Some(1_700_000_000_000_001));
        assert_eq!((state.subscribers, state.capacity), (3, Some(5)));
        assert!(state.held());
        let free = Value::Array(vec![
            bulk("none"),
            Value::Int(0),
            Value::Array(vec![]),
            Value::Int(0),
            Value::Nil,
            Value::Int(0),
            Value::Int(0),
            Value::Int(0),
            Value::Nil,
        ]);
        let state = LockState::from_redis_value(free).unwrap();
        assert!(!state.held());
        assert_eq!((state.token, state.capacity), (None, None));
        assert!(LockState::from_redis_value(Value::Array(vec![Value::Int(1)])).is_err());
    }

    #[test]
    fn calls_carry_their_keys_then_their_arguments() {
        let names = LockNames::new("lock", "a").unwrap();
        let args = |call: &Call| -> Vec<String> {
            call.evalsha()
                .args_iter()
                .map(|a| match a {
                    redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                    _ => "<not a simple argument>".into(),
                })
                .collect()
        };
        let acquire = Call::acquire(Publishing::CLASSIC, &names, "me:1", 30_000, 60_000, true);
        assert_eq!(
            args(&acquire)[..],
            [
                "EVALSHA".to_owned(),
                ACQUIRE.get_hash().to_owned(),
                "3".into(),
                names.key.clone(),
                names.fence.clone(),
                names.channel.clone(),
                "me:1".into(),
                "30000".into(),
                "60000".into(),
                "1".into()
            ]
        );
        let renew = Call::renew([("k1", "o1"), ("k2", "o2")].into_iter(), 900);
        assert_eq!(
            args(&renew)[2..],
            ["2", "k1", "k2", "900", "o1", "o2"].map(String::from)
        );
        let release = Call::release(Publishing::CLASSIC, &names, "me:1", None);
        assert_eq!(args(&release)[1], RELEASE.get_hash());
        assert_eq!(
            args(&release)[2..],
            [
                "3".to_owned(),
                names.key.clone(),
                names.channel.clone(),
                names.fence.clone(),
                "me:1".into()
            ]
        );
        let next = HandOff {
            owner: "me:2",
            lease_ms: 500,
            retention_ms: 60_000,
            yield_ms: None,
        };
        let handing_off = Call::release(Publishing::CLASSIC, &names, "me:1", Some(&next));
        assert_eq!(
            args(&handing_off)[6..],
            ["me:1", "me:2", "500", "60000"].map(String::from)
        );
        assert_eq!(
            args(&Call::inspect(Publishing::CLASSIC, &names, 100))[2..],
            [
                "7".to_owned(),
                names.key.clone(),
                names.fence.clone(),
                names.channel.clone(),
                names.role("queue"),
                names.role("places"),
                names.role("writers"),
                names.role("capacity"),
                "100".into()
            ]
        );
    }

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
