//! A Redisson-class distributed lock for async Rust, on Redis.
//!
//! - **Reentrant by structure**, not by thread: inside a guard's [`scope`](LockGuard::scope)
//!   taking the same lock again re-enters without a round trip; a spawned task or a `join!`ed
//!   sibling is a different owner and is excluded.
//! - **Pub/sub wake-up**, never blind polling: every waiting task of a client shares one
//!   subscription connection; an unlock wakes one local waiter within about one round trip.
//! - **Watchdog renewal**: without an explicit lease the lease is renewed while the guard lives,
//!   for all locks of a client in one pipelined round trip; [`LockGuard::lost`] fires *before*
//!   the lease could expire when renewal cannot be confirmed.
//! - **Fencing tokens** that strictly increase per lock name, for storage that must reject a
//!   stale holder's writes: on demand by default ([`LockGuard::fencing_token`] asks Redis for
//!   one, issued only while the guard holds the lock), or with the grant in the same round trip
//!   for a lock taken [`fenced`](Lock::fenced) (or every lock of a client built with
//!   [`fenced_by_default`](LockClientBuilder::fenced_by_default)). A mutex granted without a
//!   token costs Redis no counter write.
//! - **Cancellation-safe**: dropping an acquire or release future (at any await point) or a
//!   guard never blocks and leaves nothing behind; the background releaser frees the lock within milliseconds.
//! - **[`MultiLock`]**: several locks (even on different clients and deployments) taken all or
//!   nothing, in one global order that every process derives alike (Redis key, then deployment
//!   identity), so overlapping multi-locks cannot deadlock, within one process or across many.
//! - **Every topology**: one server, Redis Cluster (feature `cluster`: sharded pub/sub,
//!   renewals batched per node), Sentinel (feature `sentinel`: follows failover), replica
//!   acknowledgement (`WAIT`), and [`RedLock`] over independent masters. See
//!   [Topologies](#topologies).
//! - **Testable without Redis** (feature `memory`): `MemoryLocks` hands out clients whose
//!   locks live in memory, with the same semantics (checked by one set of behaviour tests
//!   run against both), under tokio's paused time, plus hooks that make an acquire find the
//!   lock busy or Redis down and that take a held lock away. See
//!   [Testing without Redis](#testing-without-redis).
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_runtime::{LockClient, LockError, LockOptions};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), LockError> {
//! let locks = LockClient::connect("redis://127.0.0.1:6379").await?;
//!
//! // Wait up to 5 s for the lock; the watchdog renews it while `guard` lives.
//! let guard = locks.lock("stock:42").try_acquire(Duration::from_secs(5)).await?;
//! let token = guard.fencing_token().await?; // send it along with your writes
//!
//! // Run the critical section; if the lock is lost meanwhile, it is dropped and
//! // `LockError::Lost` is returned.
//! guard
//!     .run(async {
//!         // … read, compute, write with `token` …
//!     })
//!     .await?;
//! guard.release().await?;
//!
//! // A fixed 10 s lease without renewal; one attempt only.
//! let opts = LockOptions::new().wait(Duration::ZERO).lease(Duration::from_secs(10));
//! match locks.lock("report").acquire_with(opts).await {
//!     Ok(guard) => drop(guard), // released in the background within milliseconds
//!     Err(e) if e.is_busy() => println!("busy, retry in {:?}", e.retry_after()),
//!     Err(e) => return Err(e),
//! }
//! # let _ = token;
//! # Ok(())
//! # }
//! ```
//!
//! # The lock family
//!
//! The same client also hands out the rest of the family; each one is held through a
//! [`LockGuard`] with everything above (pub/sub wake-up, the watchdog or an explicit lease,
//! `lost()` before expiry, fencing tokens, cancellation safety, reentrancy by scope) and runs on
//! every topology.
//!
//! - [`Semaphore`] ([`LockClient::semaphore`]): up to N permits per name across every process,
//!   each with its own lease, so a crashed holder's permits come back; take one or several, see
//!   [`available`](Semaphore::available), change the capacity at run time. A release wakes as
//!   many waiters as permits came free.
//! - [`RwLock`] ([`LockClient::rw_lock`]): many readers or one writer; waiting writers go first;
//!   a dead reader blocks writers for its own lease only.
//! - A fair lock ([`LockClient::fair_lock`]): first come, first served across processes; the
//!   queue heals itself (a waiter that gives up leaves at once, one that died within 5 s).
//!
//! ```no_run
//! # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
//! use std::time::Duration;
//!
//! // At most 10 concurrent calls to this supplier's API, across every instance.
//! let permit = locks.semaphore("supplier:acme", 10).try_acquire(Duration::from_secs(2)).await?;
//! permit.release().await?;
//!
//! // Readers of a product's stock run in parallel; a restock holds it alone.
//! let stock = locks.rw_lock("stock:42");
//! let reading = stock.read().acquire().await?;
//! reading.release().await?;
//! let restock = stock.write().acquire().await?;
//! restock.release().await?;
//!
//! // First come, first served when the drop opens.
//! let turn = locks.fair_lock("drop:sneaker-42").acquire().await?;
//! turn.release().await?;
//! # Ok(()) }
//! ```
//!
//! A name is one primitive: the same name used as two (a mutex and a semaphore, say) is
//! reported as [`LockError::ForeignData`], or [`LockError::WouldDeadlock`] inside a scope.
//!
//! # How it works
//!
//! A lock named `N` is a Redis string at `<prefix>:{N}`: its holder's owner id, always with a
//! TTL (the lease), followed by `!` once another client waits for it. An uncontended acquire
//! is one plain `SET key owner NX PX lease GET`; Lua scripts take it while waiting or with a
//! fencing token, and release, renew and force-unlock it. A release publishes the unlock
//! message only when a waiter marked the lock (a waiting attempt that finds it held adds the
//! `!`), so a lock nobody waits for costs Redis one `SET` and one small script per use. On one server
//! or behind Sentinel (Redis 7) they are the functions of a library the client loads on first
//! use (`FUNCTION LOAD`, then `FCALL`: Redis runs only the function called, not a whole
//! script, on each call); on a cluster, or where the server refuses functions, they are sent
//! with `EVALSHA`. Either is loaded again after the server lost it. Releasing publishes on
//! `<prefix>:{N}:unlock`; the fencing counter lives at `<prefix>:{N}:fence`. (A fair lock is a
//! hash of owner → hold count, as every lock in Redisson's layout is.) The hash tag keeps all three in one
//! cluster slot. A name with its own hash tag keeps it, so the lock can sit in the slot of the
//! data it protects: `order:{user:7}` is at `<prefix>:#order:{user:7}`, its fencing counter at
//! `<prefix>:fence:#order:{user:7}` and its channel at `<prefix>:unlock:#order:{user:7}` (the
//! role goes first, so that no other name, such as `order:{user:7}:fence`, can reach them).
//! No lock name reaches another lock's keys. A name without a hash tag that starts with `}`
//! (whose wrapped tag would be empty) is escaped: `}x` is at `<prefix>:%{%7Dx}`, with
//! `:fence` and `:unlock` appended. See [`MAX_NAME_LEN`] for name rules.
//!
//! An owner id is `<client id>:<acquisition id>`: unguessable, and made anew for each outermost
//! acquisition, so two tasks of one process never share a hold by accident. It names a hold *in
//! Redis*, which can serve several tasks of one client in turn: when a hold passes in memory
//! (below), the next task takes it over with its owner id, so successive holders of a hot lock
//! may show the same owner id (`LockGuard::owner`, `LockInfo`, `lockctl`). Logs and metrics
//! that must tell holders apart should key on the hold's fencing token (issued per holder,
//! [`LockGuard::fencing_token`]) rather than on the owner id; a force-unlock by owner id
//! frees whichever task of that client holds it then.
//!
//! A waiting task subscribes to the unlock channel before each attempt, so no release can slip
//! between its attempt and its sleep. When the releasing task's own client has tasks waiting
//! for the lock, the release does not publish: the lock goes to the longest-waiting of them at
//! once (a *local hand-off*): in memory, without a round trip, when that task wants no token
//! with its grant (the process keeps its hold in Redis, renewed by the watchdog, and the task
//! takes it over); otherwise the release script grants it in the release's own round trip
//! (one round trip per hand-over instead of release, message and acquire). At most
//! [`handoff_limit`](LockClientBuilder::handoff_limit) times in a row, and for about 2 ms,
//! while another process waits, before a release lets the lock fall free for the other processes, which take turns
//! in a fixed cycle (the client whose last turn is longest ago goes first). SAFETY.md states
//! the fairness bound and the tests behind it.

//!
//! # Topologies
//!
//! The same [`Lock`] and [`LockGuard`] work on every deployment; only the builder differs.
//! The repository's `TOPOLOGIES.md` compares what each guarantees.
//!
//! ```no_run
//! # async fn demo() -> Result<(), lock_runtime::LockError> {
//! use std::time::Duration;
//! use lock_runtime::{LockClient, RedLock};
//!
//! // One server: an outage makes locks unavailable, never double-granted.
//! let single = LockClient::connect("redis://10.0.0.1:6379").await?;
//!
//! // Redis Cluster (feature `cluster`), from any seed nodes.
//! # #[cfg(feature = "cluster")]
//! let cluster = LockClient::cluster_builder(["redis://10.0.1.1:7000", "redis://10.0.1.2:7000"])
//!     .build()
//!     .await?;
//!
//! // The master behind Sentinel (feature `sentinel`); grants must reach a replica first.
//! # #[cfg(feature = "sentinel")]
//! let sentinel = LockClient::sentinel_builder(["redis://10.0.2.1:26379"], "mymaster")
//!     .replica_ack(1, Duration::from_millis(100))
//!     .build()
//!     .await?;
//!
//! // RedLock over three independent masters: survives one of them down.
//! let mut nodes = Vec::new();
//! for url in ["redis://10.0.3.1", "redis://10.0.3.2", "redis://10.0.3.3"] {
//!     nodes.push(LockClient::connect(url).await?);
//! }
//! let guard = RedLock::new(nodes, "report:daily")?.acquire().await?;
//! println!("held by a quorum for {:?} more", guard.remaining_validity());
//! # Ok(()) }
//! ```
//!
//! | Deployment | A master failure can cause | Fencing token |
//! |---|---|---|
//! | one server | unavailability | strictly increasing |
//! | cluster / Sentinel | a double grant if the replica missed the grant | increasing, also across a failover while the servers' clocks agree |
//! | cluster / Sentinel + [`replica_ack`](LockClientBuilder::replica_ack) | unavailability while replicas are missing | as above |
//! | [`RedLock`] | a double grant only if nodes lose data within a lease (or clocks jump) | none across nodes |
//!
//! No lease-based lock can stop a paused holder from acting after its lease ran out: where a
//! double grant would corrupt data, pass the [fencing token](LockGuard::fencing_token) to the
//! storage and have it reject older tokens.
//!
//! # Sharing locks with Java services (Redisson)
//!
//! A client built with [`Layout::Redisson`] keeps its mutexes where Redisson's `RLock` and
//! `RFencedLock` keep theirs, so a Rust service and a Java service with Redisson (3.22+ or 4.x)
//! lock the same names: each excludes the other, each one's unlock wakes the other's waiters,
//! and fencing tokens keep rising across both (the Java side with `getFencedLock`). The rest
//! of the family is Redisson's in the same way, with Redisson's rules (see
//! [`Layout::Redisson`]): [fair locks](LockClient::fair_lock) are `RFairLock` (one FIFO queue
//! across both languages), [read/write locks](LockClient::rw_lock) `RReadWriteLock`, and
//! [semaphores](LockClient::semaphore) `RPermitExpirableSemaphore`, or `RSemaphore` with
//! [`Semaphore::without_leases`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), lock_runtime::LockError> {
//! use lock_runtime::{Layout, LockClient};
//!
//! let locks = LockClient::builder("redis://127.0.0.1:6379")
//!     .layout(Layout::Redisson)
//!     .build()
//!     .await?;
//! // Java: redisson.getFencedLock("stock:42").lockAndGetToken()
//! let guard = locks.lock("stock:42").acquire().await?;
//! # drop(guard); Ok(()) }
//! ```
//!
//! # Testing without Redis
//!
//! With the feature `memory`, `MemoryLocks` is a stand-in for a Redis server in the tests of
//! code that takes locks: each of its clients is the real [`LockClient`] (acquire loop,
//! reentrancy, wake-up, watchdog, leases, `lost()`, fencing tokens, `force_unlock`, `info`),
//! whose locks live in the test process, with leases on tokio's clock: every member of the
//! family, by the rules of the Lua scripts.
//!
//! ```ignore
//! // [dev-dependencies] lock-runtime = { version = "…", features = ["memory"] }
//! use std::time::Duration;
//! use lock_runtime::{Fault, MemoryLocks};
//!
//! #[tokio::test(start_paused = true)]
//! async fn busy_stock_is_reported() {
//!     let memory = MemoryLocks::new();
//!     let locks = memory.client();
//!     memory.fail_next_acquire("stock:42", Fault::Busy(Duration::from_secs(5)));
//!     let err = locks.lock("stock:42").try_acquire(Duration::ZERO).await.unwrap_err();
//!     assert_eq!(err.retry_after(), Some(Duration::from_secs(5)));
//!     memory.lose("stock:42"); // or: take a held lock away; its guard's lost() fires
//! }
//! ```
//!
//! The `MemoryLocks` type documents every hook (`fail_next_acquire`, `lose`, `holder`, …).
//!
//! # Redis ACLs
//!
//! A Redis 7.0 user for the default prefix needs these commands, keys and channels (commands
//! the scripts call count too); the `managed` tests run every operation as exactly this user,
//! on every server of the compatibility table (TOPOLOGIES.md), and check that the server's ACL
//! log stays empty:
//!
//! ```text
//! ACL SETUSER locker reset on >secret ~lock:* &lock:* -@all +fcall +function|load
//!     +evalsha +script|load +subscribe +unsubscribe +scan +del +exists +get +set +type
//!     +pexpire +pttl +time +publish +pubsub|numsub +hdel +hexists +hgetall +hlen +hscan
//!     +hset +zadd +zcard +zcount +zrange +zrangebyscore +zrem +zremrangebyscore +zscore
//! ```
//!
//! (one line in `redis-cli`). **Redis 7.2 and later, and Valkey** (7.2 to 9.1), need
//! `+client|setinfo` as well: redis-rs names itself on every connection (`CLIENT SETINFO`),
//! which these servers otherwise refuse and log once per connection (Redis 7.0 does not know
//! the subcommand, and its `ACL SETUSER` refuses the rule). **Valkey 9.0 and later** also take
//! `+delifeq`: a release that no waiter marked is then one `DELIFEQ` instead of a script call
//! (without it, the first release is refused, logged once in the ACL log, and every release
//! runs the script from then on). With another [`prefix`](LockClientBuilder::prefix) use
//! `~<prefix>:*` and `&<prefix>:*`; a database other than 0 needs `+select`,
//! [`replica_ack`](LockClientBuilder::replica_ack) `+wait`, and a cluster the sharded forms
//! `+ssubscribe +sunsubscribe +spublish +pubsub|shardnumsub` and `+cluster|slots`. Connect as
//! the user with `redis://locker:secret@host:6379`, or give
//! [`LockClient::builder_from_client`] the application's `redis::Client`.
//!
//! Without `+fcall +function|load` the client runs its scripts with `EVALSHA` (and says so
//! once, in a warning): it works, at more cost to the server per call.
//!
//! Without `+publish` (or `+spublish` on a cluster) releases, force-unlocks and capacity
//! changes are still made and reported done, but wake nobody: waiters in other processes take
//! their turn at their own retry timers (the lease end they read) instead of at once. Redis
//! logs each refused wake-up (`lock script: no wake-up on <channel>`, and in its ACL log).
//!
//! A missing permission is a [`LockError::NoPermission`] that names what was refused: a
//! command the client sends (`the `evalsha` command`), a command one of the scripts calls
//! (`the `pexpire` command (called by a lock script)`: Redis 7.2 and Valkey name it; Redis 7.0
//! does not name it from inside a script, but says on which line of which script it stopped,
//! and the client knows its scripts), or the lock's keys or channels. `EVALSHA` (and `WAIT`
//! with `replica_ack`) is checked when the client is built: a user without it gets the error
//! from [`build`](LockClientBuilder::build), not at the first lock.
//!
//! With [`Layout::Redisson`] the keys are the lock names themselves, their `{N}:*` keys (read
//! holds' timeouts, leased permits) and Redisson's `redisson_lock__channel:*`,
//! `redisson_lock_token:*`, `redisson_lock_queue:*`, `redisson_lock_timeout:*`,
//! `redisson_rwlock:*` and `redisson_sc:*`: give the user those patterns instead.
//!
//! # Which crate do I need
//!
//! | you want | crate |
//! |---|---|
//! | a distributed lock, semaphore, read/write or fair lock from code | [`lock-runtime`](https://docs.rs/lock-runtime) |
//! | `#[distributed_lock]` on an `async fn` | [`lock-macros`](https://docs.rs/lock-macros), through `lock-runtime`'s default `macros` feature |
//! | a lock (or *N* permits) per request in axum, tonic or any tower stack | [`lock-tower`](https://docs.rs/lock-tower) |
//! | the store to refuse a stale holder's write (PostgreSQL, SQLite, Redis) | [`lock-fence`](https://docs.rs/lock-fence) |
//! | to list, inspect or force-unlock locks from a shell | [`lockctl`](https://crates.io/crates/lockctl) (`cargo install lockctl`) |
//!
//! # Caveats
//!
//! - A lock on one Redis primary is as safe as that primary: a failover to a replica that had
//!   not yet received the lock loses it. Use the fencing token wherever correctness matters.
//! - [`LockGuard::lost`] is the only promise about a held lock; check it (or use
//!   [`LockGuard::run`]) around long critical sections.
//! - A re-entrant acquisition inherits the outermost acquisition's options (lease, watchdog).
//! - Reentrancy is by scope: a guard held in a local variable does not make a nested
//!   `acquire` of the same lock re-enter unless the nested code runs inside
//!   [`guard.scope(…)`](LockGuard::scope) or [`guard.run(…)`](LockGuard::run) (the
//!   `#[distributed_lock]` macro always does this). Outside a scope it is a new owner and waits.
//! - The background tasks (demultiplexer, watchdog, releaser) run on the Tokio runtime the
//!   client was built on; keep that runtime alive as long as the client is used.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquire;
mod backend;
mod client;
mod demux;
mod error;
#[cfg(test)]
mod fake;
mod guard;
mod handoff;
mod hold;
mod inspect;
mod keys;
mod lock;
#[cfg(feature = "memory")]
mod memory;
pub mod metrics;
mod multi;
mod options;
mod redlock;
mod releaser;
mod retry;
mod rwlock;
mod scope;
mod script;
mod semaphore;
mod server;
mod signal;
mod stats;
mod sync;
mod topology;
mod watchdog;

pub use backend::{MAX_REQUEST_ARGUMENTS, MIN_REQUEST_ARGUMENTS};
pub use client::{
    DEFAULT_FAILOVER_GRACE, DEFAULT_PREFIX, DEFAULT_REDISSON_WATCHDOG_TIMEOUT,
    DEFAULT_WATCHDOG_TIMEOUT, LockClient, LockClientBuilder,
};
pub use error::{LockError, LossReason};
pub use guard::{LockGuard, TokenHandle};
pub use inspect::{
    ForceUnlock, HoldMode, Holder, LockInfo, LockKind, LockScan, MAX_LISTED_HOLDERS, Waiters,
};
pub use keys::Layout;
pub use keys::MAX_NAME_LEN;
pub use lock::Lock;
#[cfg(feature = "memory")]
pub use memory::{Fault, MemoryHolder, MemoryLocks};
pub use multi::{MultiLock, MultiLockGuard};
pub use options::{LockOptions, MAX_LEASE};
pub use redlock::{RedLock, RedLockGuard};
pub use rwlock::RwLock;
pub use semaphore::Semaphore;
pub use server::ServerInfo;
pub use stats::ClientStats;

/// Runs the annotated `async fn` while holding a distributed lock.
///
/// See the [`lock-macros`](https://docs.rs/lock-macros) documentation for the options.
#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
#[doc(inline)]
pub use lock_macros::distributed_lock;

mod macro_support;

/// What `#[distributed_lock]` expansions call. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::macro_support::*;
}
