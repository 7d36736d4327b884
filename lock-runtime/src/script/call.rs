//! [`Call`]: one script invocation with its keys and arguments, built here and nowhere else
//! (and the one plain command among them: [`Call::plain_acquire`]). Each constructor is one
//! `match` on the lock's [`Scheme`]: which script serves the call in the name's layout and
//! family.

use std::borrow::Cow;

use redis::{Cmd, Script};

use super::{
    FAIR_ACQUIRE, Publishing, RENEW, RW_ACQUIRE, SEMAPHORE_ACQUIRE, TOKEN, functions, redisson,
};
use crate::backend::{CapacityOp, HandOff};
use crate::keys::{LockNames, PLACE_TTL, Role, Scheme};

/// One script invocation: the script (to reload it), and its command: the `FCALL` of the
/// library function that runs the same script (`functions.rs`) if there is one, else its
/// `EVALSHA`. Built once, in the form most endpoints take. (Or a plain command, without a
/// script: [`Call::plain_acquire`].)
#[derive(Debug, Clone)]
pub(crate) struct Call {
    /// `None` for a plain command.
    script: Option<&'static Script>,
    cmd: Cmd,
    /// The library function `cmd` calls, if it is an `FCALL`.
    function: Option<&'static str>,
}

/// The scripts `calls` use, each once: what to load after the server lost them.
pub(crate) fn scripts_of(calls: &[Call]) -> Vec<&'static Script> {
    let mut scripts: Vec<&'static Script> = Vec::new();
    for script in calls.iter().filter_map(|call| call.script) {
        if !scripts.iter().any(|s| std::ptr::eq(*s, script)) {
            scripts.push(script);
        }
    }
    scripts
}

/// The failover epoch a call that issues a token carries, by which this crate's layout orders
/// tokens first (see "Fencing epochs" in `prelude.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(all(feature = "sentinel", feature = "cluster")), allow(dead_code))]
pub(crate) enum Epoch {
    /// Behind Sentinel: the master's `config-epoch`, confirmed with its address and run id.
    Of(u64),
    /// On Redis Cluster: the `configEpoch` of the node that runs the call, read there.
    Node,
}

/// A script argument.
#[derive(Clone, Copy)]
pub(super) enum Arg<'a> {
    Str(&'a str),
    Int(u64),
    /// The fencing argument of the scripts that issue tokens in this crate's layout: the
    /// counter's retention in milliseconds, then `:<epoch>` or `:node` with an [`Epoch`].
    Fencing {
        retention_ms: u64,
        epoch: Option<Epoch>,
    },
}

impl Arg<'_> {
    /// The fencing argument of a call for `names`: `epoch` only in the layout whose tokens
    /// are ordered by it ([`Scheme::orders_tokens_by_epoch`]).
    fn fencing(names: &LockNames, retention_ms: u64, epoch: Option<Epoch>) -> Arg<'static> {
        Arg::Fencing {
            retention_ms,
            epoch: epoch.filter(|_| names.scheme.orders_tokens_by_epoch()),
        }
    }

    /// Its length in the command, at most.
    fn len(&self) -> usize {
        match self {
            Arg::Str(s) => s.len(),
            Arg::Int(_) => 20,
            Arg::Fencing { .. } => 41,
        }
    }
}

impl Call {
    pub(super) fn new<'a, A>(script: &'static Script, keys: &[&str], args: A) -> Call
    where
        A: IntoIterator<Item = Arg<'a>>,
        A::IntoIter: Clone,
    {
        let args = args.into_iter();
        let function = functions::LIBRARY.function_of(script);
        // Sized up front: a command grown argument by argument reallocates its buffers several
        // times, and a lock and an unlock build one each.
        let size = 7
            + function.map_or(40, str::len)
            + 2
            + keys.iter().map(|k| k.len()).sum::<usize>()
            + args.clone().map(|a| a.len()).sum::<usize>();
        let mut cmd = Cmd::with_capacity(3 + keys.len() + args.clone().count(), size);
        match function {
            Some(function) => cmd.arg("FCALL").arg(function),
            None => cmd.arg("EVALSHA").arg(script.get_hash()),
        };
        cmd.arg(keys.len()).arg(keys);
        for arg in args {
            match arg {
                Arg::Str(s) => cmd.arg(s),
                Arg::Int(n) => cmd.arg(n),
                Arg::Fencing {
                    retention_ms,
                    epoch: None,
                } => cmd.arg(retention_ms),
                Arg::Fencing {
                    retention_ms,
                    epoch: Some(Epoch::Of(epoch)),
                } => cmd.arg(format!("{retention_ms}:{epoch}")),
                Arg::Fencing {
                    retention_ms,
                    epoch: Some(Epoch::Node),
                } => cmd.arg(format!("{retention_ms}:node")),
            };
        }
        Call {
            script: Some(script),
            cmd,
            function,
        }
    }

    /// `acquire.lua`: take or re-take the lock for `owner`, bump the fencing counter (kept
    /// `retention_ms` after its last use). `waiting`: the owner's client waits for the lock
    /// (is subscribed to its unlock channel), which the mutex's turns across clients count.
    /// `fenced`: issue a fencing token with the grant; a mutex taken without one gets it on
    /// demand ([`Call::token`]). The other families always issue one. A mutex of this crate's
    /// layout is a string (see `WAITED` in `prelude.lua`), of Redisson's a hash.
    ///
    /// The script is the name's scheme's: a fair lock's also keeps the waiter's place in its
    /// queue, a read/write lock's a waiting writer's place, a semaphore's checks the capacity.
    ///
    /// `epoch`: the failover epoch of the master the call goes to, if it has one; the tokens of
    /// this crate's layout are ordered by it first (see "Fencing epochs" in `prelude.lua`).
    /// Redisson's layout keeps its counter as Redisson does.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquire(
        publishing: Publishing,
        names: &LockNames,
        owner: &str,
        lease_ms: u64,
        retention_ms: u64,
        epoch: Option<Epoch>,
        waiting: bool,
        fenced: bool,
    ) -> Call {
        let fencing = Arg::fencing(names, retention_ms, epoch);
        let args = [Arg::Str(owner), Arg::Int(lease_ms), fencing];
        let place_ms = Arg::Int(PLACE_TTL.as_millis() as u64);
        match names.scheme {
            // Redisson's `RLock` hash, or this crate's mutex string.
            Scheme::Mutex | Scheme::RedissonMutex => {
                // The arguments after the first three are left off the end while they are the
                // script's defaults (not waiting, fenced, this crate's string): every argument
                // costs the server time on every call.
                let given = match (model(names.scheme), fenced, waiting) {
                    ("s", true, false) => 0,
                    ("s", true, true) => 1,
                    ("s", false, _) => 2,
                    _ => 3,
                };
                let rest = [
                    Arg::Str(if waiting { "1" } else { "0" }),
                    Arg::Str(if fenced { "1" } else { "0" }),
                    Arg::Str(model(names.scheme)),
                ];
                Call::new(
                    publishing.acquire,
                    &[&names.key, &names.fence, &names.channel],
                    args.into_iter().chain(rest.into_iter().take(given)),
                )
            }
            Scheme::Fair => Call::new(
                &FAIR_ACQUIRE,
                &[
                    &names.key,
                    &names.fence,
                    &names.role(Role::Queue),
                    &names.role(Role::Places),
                ],
                args.into_iter().chain([place_ms]),
            ),
            Scheme::ReadWrite => Call::new(
                &RW_ACQUIRE,
                &[&names.key, &names.fence, &names.role(Role::Writers)],
                args.into_iter().chain([place_ms]),
            ),
            Scheme::Semaphore { capacity } => Call::new(
                &SEMAPHORE_ACQUIRE,
                &[&names.key, &names.fence, &names.role(Role::Capacity)],
                args.into_iter().chain([Arg::Int(capacity.into())]),
            ),
            Scheme::RedissonFair => redisson::fair::acquire(names, owner, lease_ms, retention_ms),
            Scheme::RedissonReadWrite => {
                redisson::rwlock::acquire(names, owner, lease_ms, retention_ms)
            }
            Scheme::RedissonPermits { capacity } | Scheme::RedissonPlain { capacity } => {
                redisson::semaphore::acquire(
                    publishing,
                    names,
                    owner,
                    [lease_ms, retention_ms, capacity.into()],
                )
            }
        }
    }

    /// The first attempt at a mutex of this crate's layout taken without a token, as a plain
    /// command: `SET key owner NX PX lease GET`. Its reply is not a script's: nil when taken,
    /// else the value there (the holder's owner id, marked when someone waits; ours when a
    /// retried request had taken it), or a `WRONGTYPE` error for a key of another type, which
    /// `acquire.lua` then reads. `None` for every other scheme.
    pub(crate) fn plain_acquire(names: &LockNames, owner: &str, lease_ms: u64) -> Option<Call> {
        if names.scheme != Scheme::Mutex {
            return None;
        }
        let mut cmd = Cmd::with_capacity(7, 3 + names.key.len() + owner.len() + 4 + 20 + 3);
        cmd.arg("SET")
            .arg(&names.key)
            .arg(owner)
            .arg("NX")
            .arg("PX")
            .arg(lease_ms)
            .arg("GET");
        Some(Call {
            script: None,
            cmd,
            function: None,
        })
    }

    /// The release of a mutex of this crate's layout that no waiter marked, without a script,
    /// on a server that has it (Valkey 9.0 and later): `DELIFEQ key owner`, 1 when it deleted
    /// the lock, else 0 (marked by a waiter, another owner's, or free), which `release.lua`
    /// then tells apart. `None` for every other scheme.
    pub(crate) fn delete_if_equal(names: &LockNames, owner: &str) -> Option<Call> {
        if names.scheme != Scheme::Mutex {
            return None;
        }
        let mut cmd = Cmd::with_capacity(3, 8 + names.key.len() + owner.len());
        cmd.arg("DELIFEQ").arg(&names.key).arg(owner);
        Some(Call {
            script: None,
            cmd,
            function: None,
        })
    }

    /// `release.lua`: release `owner`'s hold and publish the unlock message, or, with `next`,
    /// hand the lock to that waiting owner.
    ///
    /// For the other families: release `owner`'s hold *and* its place among the waiters (a
    /// fair lock's queue, a read/write lock's waiting writers), waking the waiters that can
    /// now go. `next` is for the mutex only (`epoch`, for its grant: see [`Call::acquire`]).
    pub(crate) fn release(
        publishing: Publishing,
        names: &LockNames,
        owner: &str,
        next: Option<&HandOff<'_>>,
        epoch: Option<Epoch>,
    ) -> Call {
        let owner_arg = [Arg::Str(owner)];
        match names.scheme {
            Scheme::Mutex | Scheme::RedissonMutex => {
                Call::mutex_release(publishing, names, owner, next, epoch)
            }
            Scheme::Fair => {
                let keys = [
                    names.key.as_str(),
                    &names.channel,
                    &names.role(Role::Queue),
                    &names.role(Role::Places),
                ];
                Call::new(publishing.fair_release, &keys, owner_arg)
            }
            Scheme::ReadWrite => {
                let keys = [
                    names.key.as_str(),
                    &names.channel,
                    &names.role(Role::Writers),
                ];
                Call::new(publishing.holders_release, &keys, owner_arg)
            }
            Scheme::Semaphore { .. } => {
                let keys = [names.key.as_str(), &names.channel];
                Call::new(publishing.holders_release, &keys, owner_arg)
            }
            Scheme::RedissonFair => redisson::fair::release(publishing, names, owner),
            Scheme::RedissonReadWrite => {
                redisson::rwlock::release(publishing.redisson_rwlock, names, owner)
            }
            Scheme::RedissonPermits { .. } | Scheme::RedissonPlain { .. } => {
                redisson::semaphore::release(publishing, names, owner)
            }
        }
    }

    /// `holders_release.lua` for this crate's semaphore at the end of the releasing client's
    /// turn: the permits go, and if another process waits, this client's grants of the
    /// semaphore are refused for `yield_ms` (see [`Backend::release_ending_turn`]).
    ///
    /// [`Backend::release_ending_turn`]: crate::backend::Backend::release_ending_turn
    pub(crate) fn release_ending_turn(
        publishing: Publishing,
        names: &LockNames,
        owner: &str,
        yield_ms: u64,
        retention_ms: u64,
    ) -> Call {
        debug_assert!(matches!(names.scheme, Scheme::Semaphore { .. }));
        let keys = [names.key.as_str(), &names.channel, &names.fence];
        Call::new(
            publishing.holders_release,
            &keys,
            [
                Arg::Str(owner),
                Arg::Int(yield_ms),
                Arg::fencing(names, retention_ms, None),
            ],
        )
    }

    /// `release.lua` (see [`Call::release`]).
    fn mutex_release(
        publishing: Publishing,
        names: &LockNames,
        owner: &str,
        next: Option<&HandOff<'_>>,
        epoch: Option<Epoch>,
    ) -> Call {
        let Some(next) = next else {
            // The common release: no heir, so no fencing counter; the model only when it is
            // not the default string. Every key and argument costs the server time per call
            // (one function called with three keys and two arguments took about 15 % more than
            // with one of each, in a `redis-cli --pipe` harness on Redis 7.0).
            let keys = [names.key.as_str(), &names.channel];
            let model = model(names.scheme);
            return if model == "s" {
                Call::new(publishing.release, &keys, [Arg::Str(owner)])
            } else {
                Call::new(
                    publishing.release,
                    &keys,
                    [Arg::Str(owner), Arg::Str(model)],
                )
            };
        };
        let keys = [names.key.as_str(), &names.channel, &names.fence];
        let mut args = vec![
            Arg::Str(owner),
            Arg::Str(model(names.scheme)),
            Arg::Str(next.owner),
            Arg::Int(next.lease_ms),
            Arg::fencing(names, next.retention_ms, epoch),
            Arg::Str(if next.fenced { "1" } else { "0" }),
        ];
        if let Some(yield_ms) = next.yield_ms {
            args.push(Arg::Int(yield_ms));
        }
        Call::new(publishing.release, &keys, args)
    }

    /// `token.lua`: a fencing token for `owner`, the holder of a mutex (or of a semaphore's
    /// permits passed in memory) taken without one,
    /// issued only if it holds the lock at that moment (`epoch`: see [`Call::acquire`]).
    pub(crate) fn token(
        names: &LockNames,
        owner: &str,
        retention_ms: u64,
        epoch: Option<Epoch>,
    ) -> Call {
        Call::new(
            &TOKEN,
            &[&names.key, &names.fence],
            [
                Arg::Str(owner),
                Arg::fencing(names, retention_ms, epoch),
                Arg::Str(match names.scheme {
                    Scheme::Semaphore { .. } => "z",
                    scheme => model(scheme),
                }),
            ],
        )
    }

    /// `force_unlock.lua`: delete the lock whoever holds it and publish the unlock message.
    /// With `held_by` (this crate's layout only), only while its holders are exactly those
    /// owner ids.
    pub(crate) fn force_unlock(
        publishing: Publishing,
        names: &LockNames,
        held_by: Option<&[String]>,
    ) -> Call {
        let keys = [names.key.as_str(), &names.channel];
        match names.scheme {
            Scheme::Mutex | Scheme::Fair | Scheme::ReadWrite | Scheme::Semaphore { .. } => {
                match held_by {
                    Some(owners) => Call::new(
                        publishing.force_unlock,
                        &keys,
                        [Arg::Str("*"), Arg::Int(owners.len() as u64)]
                            .into_iter()
                            .chain(owners.iter().map(|o| Arg::Str(o))),
                    ),
                    // This crate's waiters read an empty payload as "free".
                    None => Call::new(publishing.force_unlock, &keys, []),
                }
            }
            // Redisson reads every payload as a number: `0` wakes a waiter per process, as
            // Java's own force unlock does (one suffices: the lock is free).
            Scheme::RedissonMutex => Call::new(publishing.force_unlock, &keys, [Arg::Str("0")]),
            Scheme::RedissonFair => redisson::fair::force_unlock(publishing, names),
            Scheme::RedissonReadWrite => {
                redisson::rwlock::force_unlock(publishing.redisson_rwlock, names)
            }
            Scheme::RedissonPermits { .. } | Scheme::RedissonPlain { .. } => {
                redisson::semaphore::force_unlock(publishing, names)
            }
        }
    }

    /// `semaphore_capacity.lua`: a semaphore's free permits or capacity, or a change of its
    /// stored capacity (which wakes every waiter).
    pub(crate) fn semaphore_capacity(
        publishing: Publishing,
        names: &LockNames,
        default_capacity: u32,
        op: CapacityOp,
    ) -> Call {
        match names.scheme {
            Scheme::RedissonPermits { .. } | Scheme::RedissonPlain { .. } => {
                return redisson::semaphore::capacity(publishing, names, default_capacity, op);
            }
            _ => {}
        }
        let keys = [
            names.key.as_str(),
            &names.role(Role::Capacity),
            &names.channel,
        ];
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
        match names.scheme {
            Scheme::RedissonFair => redisson::fair::inspect(publishing, names, max_holders),
            Scheme::RedissonReadWrite => {
                redisson::rwlock::inspect(publishing.redisson_rwlock, names, max_holders)
            }
            Scheme::RedissonPermits { .. } | Scheme::RedissonPlain { .. } => {
                redisson::semaphore::inspect(publishing, names, max_holders)
            }
            Scheme::Mutex
            | Scheme::RedissonMutex
            | Scheme::Fair
            | Scheme::ReadWrite
            | Scheme::Semaphore { .. } => {
                let keys = [
                    names.key.as_str(),
                    &names.fence,
                    &names.channel,
                    &names.role(Role::Queue),
                    &names.role(Role::Places),
                    &names.role(Role::Writers),
                    &names.role(Role::Capacity),
                ];
                Call::new(publishing.inspect, &keys, [Arg::Int(max_holders.into())])
            }
        }
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

    /// The script, to load it after the server lost it (`None` for a plain command).
    pub(crate) fn script(&self) -> Option<&'static Script> {
        self.script
    }

    /// The `FCALL` command, when the script is one of the library's functions.
    pub(crate) fn fcall(&self) -> Option<&Cmd> {
        self.function.map(|_| &self.cmd)
    }

    /// The `EVALSHA` command (made from the `FCALL` for an endpoint that takes scripts only).
    pub(crate) fn evalsha(&self) -> Cow<'_, Cmd> {
        let (Some(script), Some(_)) = (self.script, self.function) else {
            return Cow::Borrowed(&self.cmd);
        };
        let hash = script.get_hash();
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

/// The mutex model argument of `acquire.lua`, `release.lua` and `token.lua`: `s` for this
/// crate's mutex string, `h` for Redisson's hash.
fn model(scheme: Scheme) -> &'static str {
    if scheme == Scheme::Mutex { "s" } else { "h" }
}

#[cfg(test)]
mod tests {
    use super::super::{ACQUIRE, RELEASE};
    use super::*;

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
        let acquire = Call::acquire(
            Publishing::CLASSIC,
            &names,
            "me:1",
            30_000,
            60_000,
            None,
            true,
            false,
        );
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
                "1".into(),
                "0".into(),
            ]
        );
        let acquire_of = |names: &LockNames, epoch, waiting, fenced| {
            let call = Call::acquire(
                Publishing::CLASSIC,
                names,
                "me:1",
                30_000,
                60_000,
                epoch,
                waiting,
                fenced,
            );
            args(&call)
        };
        // The arguments that are the script's defaults are left off the end.
        let tail = |waiting, fenced, names: &LockNames| {
            acquire_of(names, None, waiting, fenced)[9..].to_vec()
        };
        assert_eq!(tail(false, true, &names), Vec::<String>::new());
        assert_eq!(tail(true, true, &names), ["1"]);
        assert_eq!(tail(false, false, &names), ["0", "0"]);
        let redisson = LockNames {
            scheme: Scheme::RedissonMutex,
            ..LockNames::new("lock", "a").unwrap()
        };
        assert_eq!(tail(false, true, &redisson), ["0", "1", "h"]);
        // A master's failover epoch goes with the retention, in this crate's layout only.
        let fencing = |names: &LockNames, epoch| {
            let token = Call::token(names, "me:1", 60_000, Some(epoch));
            (
                acquire_of(names, Some(epoch), false, true)[8].clone(),
                args(&token)[6].clone(),
            )
        };
        // Behind Sentinel the master's; on a cluster the node that runs the call reads its own.
        for (epoch, sent) in [(Epoch::Of(7), "60000:7"), (Epoch::Node, "60000:node")] {
            assert_eq!(fencing(&names, epoch), (sent.into(), sent.into()));
            assert_eq!(fencing(&redisson, epoch), ("60000".into(), "60000".into()));
        }
        let plain = Call::plain_acquire(&names, "me:1", 30_000).unwrap();
        assert_eq!(
            args(&plain)[..],
            [
                "SET".to_owned(),
                names.key.clone(),
                "me:1".into(),
                "NX".into(),
                "PX".into(),
                "30000".into(),
                "GET".into()
            ]
        );
        let release = Call::release(Publishing::CLASSIC, &names, "me:1", None, None);
        let renew = Call::renew([("k1", "o1"), ("k2", "o2")].into_iter(), 900);
        assert_eq!(
            args(&renew)[2..],
            ["2", "k1", "k2", "900", "o1", "o2"].map(String::from)
        );
        // Without an heir: two keys and the owner alone (the model defaults to the string).
        assert_eq!(args(&release)[1], RELEASE.get_hash());
        assert_eq!(
            args(&release)[2..],
            [
                "2".to_owned(),
                names.key.clone(),
                names.channel.clone(),
                "me:1".into(),
            ]
        );
        let next = HandOff {
            owner: "me:2",
            lease_ms: 500,
            retention_ms: 60_000,
            fenced: true,
            yield_ms: None,
        };
        let handing_off = Call::release(Publishing::CLASSIC, &names, "me:1", Some(&next), None);
        assert_eq!(
            args(&handing_off)[6..],
            ["me:1", "s", "me:2", "500", "60000", "1"].map(String::from)
        );
        assert_eq!(
            args(&Call::inspect(Publishing::CLASSIC, &names, 100))[2..],
            [
                "7".to_owned(),
                names.key.clone(),
                names.fence.clone(),
                names.channel.clone(),
                names.role(Role::Queue),
                names.role(Role::Places),
                names.role(Role::Writers),
                names.role(Role::Capacity),
                "100".into()
            ]
        );
    }
}
