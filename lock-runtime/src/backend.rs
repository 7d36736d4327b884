//! The seam between the lock logic and where locks live.
//!
//! The acquire loop, guards, the watchdog, the releaser and the demultiplexer know nothing of
//! Redis topologies: they call the lock operations of a [`Backend`] and the pub/sub operations
//! of [`Channels`]. The Redis backend (`topology/`) implements both for one server, a cluster
//! and a master behind Sentinel, with or without replica acknowledgement; per-topology
//! batching (renewals per node and per slot, releases per lock on a cluster) happens behind
//! these traits. The in-memory backend (`backend/memory/`, behind `MemoryLocks` with feature
//! `memory`) is a second implementation of both. Key layouts do not plug in here: a lock's
//! keys and its [`Scheme`](crate::keys::Scheme) are decided above the seam (`keys/`), and each
//! backend serves the schemes it can (the memory backend refuses Redisson's, see
//! [`Backend::refuses`]).
//!
//! Errors are `redis::RedisError`: `retry.rs` classifies them (an unknown outcome, a failover
//! symptom), and a backend that is not Redis reports its faults in the same terms.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use redis::RedisResult;

use crate::error::Shortfall;
use crate::keys::{LockNames, Scheme};

#[cfg(any(test, feature = "memory"))]
// Without the feature only the unit tests use it, and not all of it.
#[cfg_attr(not(feature = "memory"), allow(dead_code, unreachable_pub))]
pub(crate) mod memory;
#[cfg(test)]
mod tests;

/// A boxed future, so the traits stay object-safe.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Called as each group of channels of an (un)subscribe is settled: which channels, and how.
pub(crate) type GroupDone<'a> = &'a mut (dyn FnMut(&[String], RedisResult<()>) + Send);

/// Which attempt of an acquire [`Backend::acquire`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Approach {
    /// The first attempt of an acquire that waits if it must, with no task of its client
    /// waiting for the lock: only whether it is free matters, so the holder's remaining lease
    /// may be left out of a `NotDone` (reported as -2). Redis takes a mutex of this crate's
    /// layout asked without a token with a plain `SET NX PX`.
    Plain,
    /// The first attempt of an acquire that does not wait: a `NotDone` carries the holder's
    /// remaining lease (the caller's hint for when to try again).
    First,
    /// An attempt made while the owner's client waits for the lock (is subscribed to its
    /// unlock channel): counted for the turns a busy mutex's waiting clients take
    /// (`handoff.rs`), and it marks a held mutex so that its release wakes the waiters.
    Waiting,
}

/// The answer of a single-lock operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Done: taken with this fencing token, released, deleted, or locked with this PTTL in ms.
    Done(i64),
    /// Not done: held by another with this PTTL in ms (-1: no TTL, -2: vanished meanwhile, or
    /// not known: [`Approach::Plain`]), not ours, or free.
    NotDone(i64),
    /// Released and handed to the next owner with this fencing token (see [`HandOff`]).
    HandedOff(i64),
    /// Not done, and never will be as things stand: more permits were asked than the
    /// semaphore's capacity (this one).
    Exceeds(i64),
    /// The key holds data of this Redis type that is not a lock.
    Foreign(String),
}

/// What [`Backend::inspect`] reads about a lock, in one atomic step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LockState {
    /// The Redis type at the lock key: `none`, `string` (a mutex of this crate's layout, when
    /// it has a holder), `hash` (a fair lock, or a mutex in Redisson's layout), `zset` (a
    /// read/write lock or semaphore), or another type (data that is not a lock).
    pub(crate) kind: String,
    /// Milliseconds until the lock ends: the hash's PTTL (-1: a hash without TTL), or until the
    /// last live lease of a sorted set ends; 0 when nobody holds it.
    pub(crate) pttl: i64,
    /// Live holders, at most as many as asked for: the owner id and, for a sorted set, the
    /// milliseconds left of its lease (a hash's value, the hold count, for a hash).
    pub(crate) holders: Vec<(String, i64)>,
    /// How many live holders there are in all.
    pub(crate) holder_count: u64,
    /// The fencing token last issued, if the counter is there.
    pub(crate) token: Option<i64>,
    /// A fair lock's waiters whose place is live.
    pub(crate) queued: u64,
    /// A read/write lock's waiting writers whose place is live.
    pub(crate) writers: u64,
    /// Connections subscribed to the unlock channel.
    pub(crate) subscribers: u64,
    /// A semaphore's stored capacity.
    pub(crate) capacity: Option<u32>,
}

impl LockState {
    /// Whether anyone holds the lock (data that is not a lock aside).
    pub(crate) fn held(&self) -> bool {
        match self.kind.as_str() {
            "hash" => true,
            "string" | "zset" => self.holder_count > 0,
            _ => false,
        }
    }
}

/// The most arguments (the command's name included) any request a client builds carries by
/// default: ElastiCache Serverless's limit per request (3,999). Subscriptions go out in
/// commands of at most this many channels less one, a watchdog renewal call covers at most 500
/// locks (about 1,000 arguments).
/// [`LockClientBuilder::max_request_arguments`](crate::LockClientBuilder::max_request_arguments)
/// sets another limit, for a server or proxy with a lower one.
pub const MAX_REQUEST_ARGUMENTS: usize = 3_999;

/// The lowest argument limit a client accepts
/// ([`LockClientBuilder::max_request_arguments`](crate::LockClientBuilder::max_request_arguments)):
/// room for the largest single-lock call.
pub const MIN_REQUEST_ARGUMENTS: usize = 64;

/// Where one `SCAN` runs: the one server (or the master behind Sentinel), or the cluster
/// master that serves a slot (routed by the slot, so a failover is followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScanNode {
    Only,
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Slot(u16),
}

/// A write's reply, and whether enough replicas acknowledged it (when the client asks for
/// replica acknowledgement).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Acked<T> {
    pub(crate) reply: T,
    /// `Some` when fewer replicas than required acknowledged the write in time.
    pub(crate) shortfall: Option<Shortfall>,
}

/// A task of the releasing client that waits for the lock being released: the release grants
/// it the lock in the same step (fresh fencing token, its own lease) instead of letting the
/// lock fall free.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandOff<'a> {
    pub(crate) owner: &'a str,
    pub(crate) lease_ms: u64,
    /// How long the fencing counter is kept after this grant.
    pub(crate) retention_ms: u64,
    /// Whether the grant issues a fencing token (the next owner asked for one eagerly).
    pub(crate) fenced: bool,
    /// `Some` when the releasing client has handed the lock on as often as it may in a row:
    /// if another process waits, the release lets the lock fall free instead (`Done`) and
    /// refuses it to this client for this many milliseconds.
    pub(crate) yield_ms: Option<u64>,
}

/// What a semaphore capacity call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CapacityOp {
    /// How many permits are free.
    Free,
    /// The capacity in force (stored, or the handle's).
    Capacity,
    /// Store a capacity for every client.
    Set(u32),
    /// Remove the stored capacity.
    Clear,
}

/// One release for [`Backend::release_many`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Release<'a> {
    pub(crate) names: &'a LockNames,
    pub(crate) owner: &'a str,
}

/// The lock operations. Every method is one logical round trip; none retries on its own
/// except to reload what the server lost (a flushed script).
pub(crate) trait Backend: Send + Sync + 'static {
    /// Why this backend does not serve locks of `scheme`, if it does not: a lock handle then
    /// refuses every operation with [`LockError::Unsupported`](crate::LockError::Unsupported)
    /// before any call. Redis serves every scheme.
    fn refuses(&self, scheme: Scheme) -> Option<&'static str> {
        let _ = scheme;
        None
    }

    /// Takes the lock for `owner` (or re-takes it: idempotent for the same owner) with a lease
    /// of `lease_ms`; a new fencing token comes back in `Reply::Done` (0 for a mutex taken
    /// without one: `fenced` false). The fencing counter is kept `retention_ms` after its last
    /// use. `approach`: which attempt of the acquire this is (see [`Approach`]).
    fn acquire<'a>(
        &'a self,
        names: &'a LockNames,
        owner: &'a str,
        lease_ms: u64,
        retention_ms: u64,
        approach: Approach,
        fenced: bool,
    ) -> BoxFuture<'a, RedisResult<Acked<Reply>>>;

    /// A fencing token for `owner`, the holder of a mutex taken without one: `Done(token)`,
    /// issued only while it holds the lock (checked in the same step), greater than every
    /// token issued before for the name; `NotDone(0)` when it does not hold it.
    fn token<'a>(
        &'a self,
        names: &'a LockNames,
        owner: &'a str,
        retention_ms: u64,
    ) -> BoxFuture<'a, RedisResult<Acked<Reply>>>;

    /// Releases `owner`'s hold and wakes a waiter: `Done` when released, `NotDone` when the
    /// lock was not ours. With `next`, a lock left without owners is granted to `next.owner`
    /// instead (`HandedOff(token)`), and nobody is woken.
    fn release<'a>(
        &'a self,
        names: &'a LockNames,
        owner: &'a str,
        next: Option<HandOff<'a>>,
    ) -> BoxFuture<'a, RedisResult<Acked<Reply>>>;

    /// Releases a semaphore's permits at the end of this client's turn of passing them on in
    /// memory (`handoff.rs`): as [`Backend::release`] without a next owner, and if another
    /// process waits for the semaphore (its channel has more subscribers than this client),
    /// this client's grants of it are refused for `yield_ms` after the last grant, so the
    /// clients waiting longer take their turns first (`yield` in `prelude.lua`).
    fn release_ending_turn<'a>(
        &'a self,
        names: &'a LockNames,
        owner: &'a str,
        yield_ms: u64,
        retention_ms: u64,
    ) -> BoxFuture<'a, RedisResult<Acked<Reply>>>;

    /// Releases many holds in the background, within about `limit`. Returns the indices of
    /// those that failed (to retry); "not ours any more" counts as done.
    fn release_many<'a>(
        &'a self,
        jobs: &'a [Release<'a>],
        limit: Duration,
    ) -> BoxFuture<'a, RedisResult<Vec<usize>>>;

    /// Renews the leases of `(key, owner)` pairs to `lease_ms`, within about `limit`. Per lock:
    /// `Some(true)` renewed (and acknowledged), `Some(false)` no longer ours, `None` not
    /// confirmed (retry soon).
    fn renew<'a>(
        &'a self,
        locks: &'a [(&'a str, &'a str)],
        lease_ms: u64,
        limit: Duration,
    ) -> BoxFuture<'a, RedisResult<Vec<Option<bool>>>>;

    /// Deletes the lock whoever holds it and wakes a waiter: `Done` when a lock was deleted.
    /// With `held_by` (this crate's layout only), only if its live holders are exactly those
    /// owner ids, checked and deleted in one step: `NotDone(1)` when they are not (nothing
    /// changed), `NotDone(0)` when nobody holds it.
    fn force_unlock<'a>(
        &'a self,
        names: &'a LockNames,
        held_by: Option<&'a [String]>,
    ) -> BoxFuture<'a, RedisResult<Reply>>;

    /// The lock's state (holders, fencing token, waiters), listing at most `max_holders`
    /// holders.
    fn inspect<'a>(
        &'a self,
        names: &'a LockNames,
        max_holders: u32,
    ) -> BoxFuture<'a, RedisResult<LockState>>;

    /// Where a key scan must run: every master of a cluster, else the one server.
    fn scan_nodes(&self) -> BoxFuture<'_, RedisResult<Vec<ScanNode>>>;

    /// One `SCAN cursor MATCH pattern COUNT count` on `node`: the next cursor (0: that node is
    /// done) and the keys found.
    fn scan<'a>(
        &'a self,
        node: ScanNode,
        cursor: u64,
        pattern: &'a str,
        count: u32,
    ) -> BoxFuture<'a, RedisResult<(u64, Vec<Vec<u8>>)>>;

    /// A semaphore's free permits or capacity (`Done(n)`), or a change of the capacity stored
    /// for every client (which wakes every waiter).
    fn semaphore_capacity<'a>(
        &'a self,
        names: &'a LockNames,
        default_capacity: u32,
        op: CapacityOp,
    ) -> BoxFuture<'a, RedisResult<Acked<Reply>>>;

    /// Whether the deployment fails over by itself, so a brief unavailability is worth riding
    /// out instead of reporting it at once.
    fn fails_over(&self) -> bool;

    /// The Redis command that runs the lock scripts here (`FCALL` or `EVALSHA`), for the
    /// spans' `db.operation.name`.
    fn script_command(&self) -> &'static str {
        "EVALSHA"
    }
}

/// The subscription side, driven by the demultiplexer. Messages and connection losses reach
/// the demultiplexer through its push router, which the backend's connection was given.
pub(crate) trait Channels: Send + 'static {
    /// Subscribes to unlock channels, reporting each group to `done` as it is confirmed or
    /// fails (all at once on one server; per slot on a cluster, so one hanging shard holds up
    /// none of the others).
    fn subscribe<'a>(
        &'a mut self,
        channels: &'a [String],
        done: GroupDone<'a>,
    ) -> BoxFuture<'a, ()>;

    /// Unsubscribes, reporting like [`Channels::subscribe`].
    fn unsubscribe<'a>(
        &'a mut self,
        channels: &'a [String],
        done: GroupDone<'a>,
    ) -> BoxFuture<'a, ()>;
}
