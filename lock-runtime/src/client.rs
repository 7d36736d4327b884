//! `LockClient`: configuration, the backend, and the background tasks (demux, watchdog,
//! releaser; Sentinel adds its own).

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use tokio::task::AbortHandle;

use crate::backend::{Backend, Channels};
use crate::demux::Demux;
use crate::handoff::HandOffs;
use crate::keys::Family;
use crate::keys::Layout;
use crate::keys::{LockNames, validate_prefix};
use crate::options::MAX_LEASE;
use crate::releaser::Releaser;
use crate::stats::{ClientStats, Counters};
use crate::sync;
use crate::topology::replica_ack::ReplicaAck;
use crate::topology::{self, Conn, RedisBackend, Settings, Topology};
use crate::watchdog::Watchdog;
use crate::{Lock, LockError};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "lock";
/// The default watchdog timeout: the lease of a lock taken without an explicit lease.
pub const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an acquisition rides out an unavailable cluster or Sentinel deployment by default.
pub const DEFAULT_FAILOVER_GRACE: Duration = Duration::from_secs(10);

static DEFAULT_CLIENT: RwLock<Option<LockClient>> = RwLock::new(None);

/// A handle to the lock service on one Redis server, a Redis Cluster (feature `cluster`) or a
/// Sentinel-managed master (feature `sentinel`).
///
/// Cheap to clone (an `Arc`); clones share two connections (one for lock commands, one
/// dedicated to pub/sub so that a flood of messages cannot delay a lock command) and the
/// background tasks: the pub/sub demultiplexer, the watchdog and the background releaser, plus,
/// behind Sentinel, one that watches for a new master. The tasks never keep the client alive;
/// they stop once the last clone and the last guard are gone.
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_runtime::LockError> {
/// use std::time::Duration;
/// use lock_runtime::LockClient;
///
/// let locks = LockClient::builder("redis://127.0.0.1:6379")
///     .prefix("shop")
///     .watchdog_timeout(Duration::from_secs(10))
///     .build()
///     .await?;
/// let guard = locks.lock("stock:42").acquire().await?;
/// // … critical section …
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The random id that prefixes every owner id of this client.
    pub(crate) id: Arc<str>,
    pub(crate) config: Config,
    /// Where the lock operations go.
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) demux: Demux,
    pub(crate) watchdog: Watchdog,
    pub(crate) releaser: Releaser,
    /// This client's tasks waiting for a lock, to hand a released lock to.
    pub(crate) handoffs: Arc<HandOffs>,
    pub(crate) counters: Arc<Counters>,
    /// The keys of the names in use, shared by every handle on the same name.
    names: NameCache,
    next_acquisition: AtomicU64,
    tasks: Mutex<Vec<AbortHandle>>,
}

/// The keys of the lock names that some handle, guard or waiter still uses, so that the
/// handles on one name share one copy instead of building their own. A thousand tasks waiting
/// for one lock each make a handle; its keys (four strings) were a sixth of a waiter's memory.
///
/// Entries are weak: a name nobody uses any more is dropped with its last handle, and its
/// entry is swept out once dead entries could make up half of the map.
struct NameCache {
    hasher: RandomState,
    map: Mutex<NameMap>,
}

struct NameMap {
    /// By the hash of the name. Two names with one hash take turns in the entry (the one found
    /// is checked), so a collision costs a rebuild, never a wrong lock.
    entries: HashMap<u64, Weak<LockNames>>,
    /// The size at which dead entries are swept out next.
    sweep_at: usize,
}

impl NameCache {
    /// Entries kept before the first sweep.
    const MIN_SWEEP: usize = 64;

    fn new() -> NameCache {
        NameCache {
            hasher: RandomState::new(),
            map: Mutex::new(NameMap {
                entries: HashMap::new(),
                sweep_at: Self::MIN_SWEEP,
            }),
        }
    }

    /// The keys of `name` used as `family`: shared with the handles that use them already,
    /// else built by `build` (and not kept if invalid).
    fn get(
        &self,
        name: &str,
        family: Family,
        build: impl FnOnce() -> Result<LockNames, LockError>,
    ) -> Result<Arc<LockNames>, LockError> {
        let hash = self.hasher.hash_one(name);
        let mut map = sync::lock(&self.map);
        if let Some(names) = map.entries.get(&hash).and_then(Weak::upgrade)
            && names.name == name
            && names.family() == family
        {
            return Ok(names);
        }
        let names = Arc::new(build()?);
        map.entries.insert(hash, Arc::downgrade(&names));
        if map.entries.len() >= map.sweep_at {
            map.entries.retain(|_, names| names.strong_count() > 0);
            // Sweeping again only after as many insertions as live entries keeps it
            // amortised constant time.
            map.sweep_at = (map.entries.len() * 2).max(Self::MIN_SWEEP);
        }
        Ok(names)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) prefix: String,
    /// Where locks live: this crate's keys or Redisson's.
    pub(crate) layout: Layout,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// How long the fencing counter is kept after its last grant; zero: for ever (Redisson's
    /// layout, whose token key Java services `INCR`).
    pub(crate) fence_retention: Duration,
    /// Local hand-overs of one lock in a row (0: off; always off with replica acknowledgement
    /// and with Redisson's layout).
    pub(crate) handoff_limit: u32,
    /// Writes that queue while one is in flight go out together (opt-in; one server and
    /// Sentinel, without replica acknowledgement).
    pub(crate) group_commit: bool,
    pub(crate) topology: Topology,
    pub(crate) replica_ack: Option<ReplicaAck>,
    /// How long an acquisition keeps retrying while a failing-over deployment is unavailable.
    pub(crate) failover_grace: Duration,
    /// The deployment's identity: set on the builder, or derived from the topology. Orders and
    /// deduplicates the members of a `MultiLock` that share a key.
    pub(crate) deployment_id: String,
}

impl Config {
    /// The scripts that publish unlock messages on this topology.
    pub(crate) fn publishing(&self) -> crate::script::Publishing {
        self.topology.publishing()
    }
}

impl Inner {
    /// The keys of `name` used as `family` under this client's prefix and layout, shared with
    /// every other handle on them.
    pub(crate) fn names(&self, name: &str, family: Family) -> Result<Arc<LockNames>, LockError> {
        let config = &self.config;
        self.names.get(name, family, || {
            config.layout.names(&config.prefix, name, family)
        })
    }

    pub(crate) fn next_owner(&self) -> (u64, String) {
        let n = self.next_acquisition.fetch_add(1, Ordering::Relaxed);
        (n, format!("{}:{n}", self.id))
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The demux and the watchdog have nothing left to do; the releaser drains its queue
        // and exits once its channel closes.
        let tasks = self.tasks.get_mut().unwrap_or_else(|e| e.into_inner());
        for task in tasks.drain(..) {
            task.abort();
        }
    }
}

impl LockClient {
    /// Connects with default settings. The URL may carry a user and password
    /// (`redis://user:secret@host:6379/0`); `rediss://` needs the `tls` feature.
    ///
    /// Fails within the connect timeout (default 5 s) when Redis cannot be reached.
    pub async fn connect(url: &str) -> Result<LockClient, LockError> {
        LockClient::builder(url).build().await
    }

    /// Starts configuring a client; finish with [`LockClientBuilder::build`].
    pub fn builder(url: &str) -> LockClientBuilder {
        LockClientBuilder::new(Topology::Single(url.to_owned()))
    }

    /// Starts configuring a client for the server the application's own [`redis::Client`]
    /// connects to: the same address, credentials, database and TLS settings (client
    /// certificates and custom roots included), with the same defaults and options as
    /// [`builder`](LockClient::builder). The lock client opens its own two connections; the
    /// application's client is not used afterwards. (With feature `tls`, a
    /// `tls_root_certificate` set on the builder replaces the client's TLS settings.)
    ///
    /// The [deployment identity](LockClient::deployment_id) is derived from the address and
    /// database, as for the URL `redis://host:port/db`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use lock_runtime::LockClient;
    ///
    /// // The application's existing client.
    /// let redis = redis::Client::open("redis://locker:secret@127.0.0.1:6379/0")?;
    /// let locks = LockClient::builder_from_client(&redis).prefix("shop").build().await?;
    /// assert_eq!(locks.deployment_id(), "127.0.0.1:6379/0");
    /// # Ok(()) }
    /// ```
    pub fn builder_from_client(client: &redis::Client) -> LockClientBuilder {
        LockClient::builder_from_connection_info(client.get_connection_info().clone())
    }

    /// Starts configuring a client from redis' [`ConnectionInfo`](redis::ConnectionInfo),
    /// like [`builder_from_client`](LockClient::builder_from_client).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use lock_runtime::LockClient;
    /// use redis::{ConnectionAddr, IntoConnectionInfo};
    ///
    /// let info = ConnectionAddr::Tcp("10.0.0.1".into(), 6379).into_connection_info()?;
    /// let db2 = info.redis_settings().clone().set_db(2);
    /// let info = info.set_redis_settings(db2);
    /// let locks = LockClient::builder_from_connection_info(info).build().await?;
    /// assert_eq!(locks.deployment_id(), "10.0.0.1:6379/2");
    /// # Ok(()) }
    /// ```
    pub fn builder_from_connection_info(info: redis::ConnectionInfo) -> LockClientBuilder {
        let mut builder = LockClientBuilder::new(Topology::Single(identity_url(&info)));
        builder.connection_info = Some(info);
        builder
    }

    /// Starts configuring a client for a Redis Cluster, given one or more seed nodes
    /// (`redis://host:port`); the rest of the cluster is discovered from them.
    ///
    /// Each lock lives in one slot (its keys share a hash tag); unlock messages use sharded
    /// pub/sub (`SPUBLISH`/`SSUBSCRIBE`, Redis 7) on the lock's shard; the watchdog renews in
    /// one pipeline per node; `MOVED`/`ASK` redirects and failovers are followed.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::LockClient;
    ///
    /// let locks = LockClient::cluster_builder(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
    ///     .build()
    ///     .await?;
    /// let guard = locks.lock("stock:42").acquire().await?;
    /// # drop(guard); Ok(()) }
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn cluster_builder<S: Into<String>>(
        nodes: impl IntoIterator<Item = S>,
    ) -> LockClientBuilder {
        LockClientBuilder::new(Topology::Cluster(
            nodes.into_iter().map(Into::into).collect(),
        ))
    }

    /// Starts configuring a client for the master that the given sentinels
    /// (`redis://host:26379`) monitor under `master_name`. When they fail over, the client
    /// switches to the new master and resubscribes its waiters. Credentials of the data nodes
    /// go in [`LockClientBuilder::master_credentials`]; the sentinels' own in their URLs. TLS to
    /// the sentinels is their URLs' `rediss://`; TLS to the data nodes is
    /// [`LockClientBuilder::master_tls`] (feature `tls`).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    /// use lock_runtime::LockClient;
    ///
    /// let locks = LockClient::sentinel_builder(
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///     "mymaster",
    /// )
    /// // Grants must have reached the replica before they count.
    /// .replica_ack(1, Duration::from_millis(100))
    /// .build()
    /// .await?;
    /// # drop(locks); Ok(()) }
    /// ```
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn sentinel_builder<S: Into<String>>(
        sentinels: impl IntoIterator<Item = S>,
        master_name: impl Into<String>,
    ) -> LockClientBuilder {
        LockClientBuilder::new(Topology::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            master: master_name.into(),
            auth: None,
            tls: false,
        })
    }
}

/// A URL without credentials naming the server `info` connects to, for the deployment identity
/// and for `Debug`; the connection itself is made from `info`.
fn identity_url(info: &redis::ConnectionInfo) -> String {
    let db = info.redis_settings().db();
    let bracketed = |host: &str| {
        if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        }
    };
    match info.addr() {
        redis::ConnectionAddr::Tcp(host, port) => {
            format!("redis://{}:{port}/{db}", bracketed(host))
        }
        redis::ConnectionAddr::TcpTls { host, port, .. } => {
            format!("rediss://{}:{port}/{db}", bracketed(host))
        }
        redis::ConnectionAddr::Unix(path) => format!("redis+unix://{}?db={db}", path.display()),
        other => other.to_string(),
    }
}

impl LockClientBuilder {
    fn new(topology: Topology) -> LockClientBuilder {
        LockClientBuilder {
            topology,
            connection_info: None,
            misplaced: None,
            replica_ack: None,
            failover_grace: DEFAULT_FAILOVER_GRACE,
            prefix: DEFAULT_PREFIX.to_owned(),
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(2),
            fence_retention: Duration::from_secs(7 * 24 * 3600),
            handoff_limit: crate::handoff::DEFAULT_LIMIT,
            group_commit: false,
            layout: Layout::Native,
            deployment_id: None,
            #[cfg(feature = "tls")]
            tls_root_certificate: None,
            #[cfg(any(test, feature = "memory"))]
            memory: None,
        }
    }
}

impl LockClient {
    /// A lock by name. Nothing is sent to Redis until you use it; an invalid name (empty,
    /// longer than [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes, or with control characters) is
    /// reported by the first operation as [`LockError::InvalidName`].
    pub fn lock(&self, name: impl AsRef<str>) -> Lock {
        Lock::new(self.clone(), name.as_ref())
    }

    /// A fair lock by name: granted in the order the waiters first asked for it, across every
    /// process (first come, first served), with everything [`lock`](LockClient::lock) has.
    ///
    /// Waiters queue in Redis. A release wakes only the waiter whose turn it is, wherever it
    /// waits. The queue heals itself: a waiter that gives up or is cancelled leaves it at once;
    /// one that died (killed, its process frozen) is dropped within five seconds, the time its
    /// place lasts unless the waiter refreshes it, which a live waiter does while it waits.
    ///
    /// The lock is the mutex's hash: a plain [`lock`](LockClient::lock) of the same name
    /// excludes it too, but does not queue (it may take the lock ahead of the queue).
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// // First come, first served when the drop opens.
    /// let guard = locks.fair_lock("drop:sneaker-42").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fair_lock(&self, name: impl AsRef<str>) -> Lock {
        Lock::of(
            self.clone(),
            name.as_ref(),
            crate::keys::Family::Fair,
            crate::keys::Mode::Exclusive,
        )
    }

    /// A read/write lock by name: many readers or one writer; see [`RwLock`](crate::RwLock).
    pub fn rw_lock(&self, name: impl AsRef<str>) -> crate::RwLock {
        crate::RwLock::new(self, name.as_ref())
    }

    /// A counting semaphore by name with `capacity` permits (unless a capacity is stored in
    /// Redis); see [`Semaphore`](crate::Semaphore).
    pub fn semaphore(&self, name: impl AsRef<str>, capacity: u32) -> crate::Semaphore {
        crate::Semaphore::new(self, name.as_ref(), capacity)
    }

    /// This client's random id, the first part of every owner id it writes to Redis.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.inner.config.prefix
    }

    /// The identity of the Redis deployment this client talks to: the one given to
    /// [`LockClientBuilder::deployment_id`], or else one derived from the addresses
    /// (`host:port/db` for one server, `cluster:` and the sorted seed nodes, `sentinel:`, the
    /// master name, `@` and the sorted sentinels; never credentials).
    pub fn deployment_id(&self) -> &str {
        &self.inner.config.deployment_id
    }

    /// The watchdog timeout: the lease of locks taken without an explicit lease.
    pub fn watchdog_timeout(&self) -> Duration {
        self.inner.config.watchdog_timeout
    }

    /// How many locks the watchdog is tracking right now (held with the watchdog or with an
    /// explicit lease).
    pub fn held_locks(&self) -> usize {
        self.inner.watchdog.len()
    }

    /// How many unlock channels the pub/sub connection is subscribed to right now, as far as
    /// this client knows.
    pub fn subscribed_channels(&self) -> usize {
        self.inner.demux.subscribed_len()
    }

    /// Counters of what this client has done (acquisitions, renewal round trips, losses, …).
    pub fn stats(&self) -> ClientStats {
        self.inner.counters.snapshot()
    }

    /// Makes this client the process-wide default, used by `#[distributed_lock]` without a
    /// `client = …` argument. Replaces a previously installed default.
    pub fn install_default(&self) {
        let mut slot = sync::write(&DEFAULT_CLIENT);
        *slot = Some(self.clone());
    }

    /// The process-wide default client, or [`LockError::NoDefaultClient`].
    pub fn default_client() -> Result<LockClient, LockError> {
        sync::read(&DEFAULT_CLIENT)
            .clone()
            .ok_or(LockError::NoDefaultClient)
    }

    /// Removes the process-wide default client, returning it.
    pub fn uninstall_default() -> Option<LockClient> {
        sync::write(&DEFAULT_CLIENT).take()
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("id", &self.inner.id)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// Configures a [`LockClient`]; made by [`LockClient::builder`] (or
/// [`builder_from_client`](LockClient::builder_from_client), or a cluster or Sentinel builder).
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until you call `build`"]
pub struct LockClientBuilder {
    topology: Topology,
    /// One server given as redis' connection info (`topology` then holds a URL derived from it,
    /// without credentials): connect with this, so that every setting of it carries over.
    connection_info: Option<redis::ConnectionInfo>,
    /// A setting that does not apply to this topology.
    misplaced: Option<&'static str>,
    replica_ack: Option<ReplicaAck>,
    failover_grace: Duration,
    prefix: String,
    watchdog_timeout: Duration,
    connect_timeout: Duration,
    response_timeout: Duration,
    fence_retention: Duration,
    handoff_limit: u32,
    group_commit: bool,
    layout: Layout,
    deployment_id: Option<String>,
    #[cfg(feature = "tls")]
    tls_root_certificate: Option<Vec<u8>>,
    /// Locks in memory instead of Redis ([`MemoryLocks::builder`](crate::MemoryLocks::builder)).
    #[cfg(any(test, feature = "memory"))]
    memory: Option<crate::backend::memory::MemoryBackend>,
}

impl LockClientBuilder {
    /// Trust this PEM root certificate (a private CA) for `rediss://` instead of the system's
    /// trust store.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_certificate = Some(pem.into());
        self
    }

    /// The prefix of every Redis key and channel this client uses (default `"lock"`). Must be
    /// printable and must not contain `{` or `}`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The lease of locks taken without an explicit lease (default 30 s); the watchdog renews
    /// it every third of this while the guard lives. At least 30 ms.
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.watchdog_timeout = timeout;
        self
    }

    /// How long to try to connect before failing (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long to wait for any single Redis reply (default 2 s). A timed-out acquire is
    /// reconciled (retried with the same owner id), never reported as "not acquired".
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long an unused fencing counter is kept (default 7 days, refreshed on every
    /// acquisition). Tokens keep increasing even after it expires, because a fresh counter
    /// starts at the server clock in microseconds.
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
        self
    }

    /// How many times in a row a lock may be handed straight from one task of this client to
    /// another while another process waits for it (default 64; 0 turns local hand-off off).
    ///
    /// When a task releases a lock that other tasks of the same client are waiting for, the
    /// release grants it to the longest-waiting of them in the same round trip (a fresh fencing
    /// token, that task's own lease): one round trip per hand-over instead of three steps
    /// (release, unlock message, the waiter's acquire), and the lock never falls free in
    /// between. After `limit` such hand-overs in a row, or 2 ms after the first of them
    /// (whichever comes first: with long critical sections the time ends a turn, with short
    /// ones the limit), a release that finds another process waiting ends this client's turn: the lock falls free and wakes a waiter in every
    /// process, and the waiting clients take turns in a fixed cycle, the one whose last turn is
    /// longest ago first, so a process waits for at most one turn of every other; with nobody
    /// else waiting the hand-offs go on. A higher limit gives more throughput on a lock that
    /// several processes want, a lower one shorter waits for the other processes. Replica
    /// acknowledgement ([`replica_ack`](LockClientBuilder::replica_ack)) turns it off.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// let locks = lock_runtime::LockClient::builder("redis://127.0.0.1/")
    ///     .handoff_limit(32)
    ///     .build()
    ///     .await?;
    /// # let _ = locks; Ok(()) }
    /// ```
    pub fn handoff_limit(mut self, limit: u32) -> Self {
        self.handoff_limit = limit;
        self
    }

    /// Whether lock writes that queue while one is in flight go out together (default off).
    ///
    /// On, at most one request of this client's acquires and releases is in flight; what queues
    /// meanwhile goes out together when it returns, its mutex operations merged into one script
    /// call that runs them in order. Starting a script call costs Redis about as much as the
    /// commands in one of ours, so under load this cuts the server's CPU per lock: by a quarter
    /// with 64 tasks locking distinct keys in this crate's benchmark (25 µs per lock/unlock
    /// pair instead of 31–37). It costs the client: more CPU per lock, and one request in
    /// flight instead of many, so that benchmark's single client, sharing two cores with
    /// Redis, made 18–20 k pairs/s with it against 24–29 k without. Turn it on when Redis is
    /// the bottleneck (many application instances sharing one server at high lock rates),
    /// not the client. A write that finds nothing in flight goes out at once either way.
    ///
    /// Off, every write is its own request, pipelined on the shared connection. On a cluster
    /// and with [`replica_ack`](LockClientBuilder::replica_ack) writes always go out one by one.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// let locks = lock_runtime::LockClient::builder("redis://127.0.0.1/")
    ///     .group_commit(true)
    ///     .build()
    ///     .await?;
    /// # let _ = locks; Ok(()) }
    /// ```
    pub fn group_commit(mut self, on: bool) -> Self {
        self.group_commit = on;
        self
    }

    /// Where this client's locks live on Redis (default [`Layout::Native`]):
    /// [`Layout::Redisson`] shares mutexes with Java services that use Redisson.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{Layout, LockClient};
    ///
    /// let locks = LockClient::builder("redis://127.0.0.1/")
    ///     .layout(Layout::Redisson)
    ///     .build()
    ///     .await?;
    /// # let _ = locks; Ok(()) }
    /// ```
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Names the Redis deployment this client talks to (see [`LockClient::deployment_id`]).
    ///
    /// A [`MultiLock`](crate::MultiLock) uses the name twice: to order the same key on two
    /// deployments alike in every process, and to take a key that two of its clients reach on
    /// one deployment only once. Without this setting the name is derived from the URL(s),
    /// which serves as long as every process uses the same addresses. Set it when they do not
    /// (a host name here, an IP address or a proxy there, other seed nodes of one cluster): the
    /// same string for a deployment in every process, and different strings for different
    /// deployments: a multi-lock takes the same key on two deployments of one name only once.
    /// It is not sent to Redis.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::LockClient;
    ///
    /// let accounts = LockClient::builder("redis://accounts-redis.internal:6379")
    ///     .deployment_id("accounts")
    ///     .build()
    ///     .await?;
    /// assert_eq!(accounts.deployment_id(), "accounts");
    /// # Ok(()) }
    /// ```
    pub fn deployment_id(mut self, id: impl Into<String>) -> Self {
        self.deployment_id = Some(id.into());
        self
    }

    /// Require `replicas` replicas to acknowledge every acquire, renewal and release within
    /// `timeout` (`WAIT replicas timeout`, sent in the same pipeline as the write).
    ///
    /// - An acquisition that is not acknowledged in time is rolled back (nothing is held, no key
    ///   is left) and fails with [`LockError::ReplicaAck`] (an "unavailable" error).
    /// - A renewal that is not acknowledged does not count: the watchdog retries, and declares
    ///   the lock lost if no acknowledged renewal lands before the lease would run out.
    /// - [`LockGuard::release`](crate::LockGuard::release) reports an unacknowledged release as
    ///   [`LockError::ReplicaAck`]; the lock is released on the master either way.
    ///
    /// `timeout` must be at most half the [response timeout](LockClientBuilder::response_timeout).
    /// Costs: one more reply per write, and `WAIT` holds up the requests queued behind it on the
    /// shared connection for up to `timeout` when a replica lags. It narrows the window in which
    /// a failover can lose a grant; it does not make Redis replication synchronous (see the crate
    /// docs on topologies). `replicas = 0` turns it off.
    pub fn replica_ack(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_ack = (replicas > 0).then_some(ReplicaAck { replicas, timeout });
        self
    }

    /// With a cluster or Sentinel: how long an acquisition keeps retrying while Redis is
    /// unavailable (a failover in progress) before it reports the error (default 10 s, never
    /// longer than the acquisition's own wait). Ignored for a single server, where an outage is
    /// reported at once.
    pub fn failover_grace(mut self, grace: Duration) -> Self {
        self.failover_grace = grace;
        self
    }

    /// Credentials of the Redis data nodes behind Sentinel (the sentinels' own go in their
    /// URLs).
    ///
    /// Only for a builder made by [`LockClient::sentinel_builder`]; on any other,
    /// [`build`](LockClientBuilder::build) fails with [`LockError::InvalidConfig`].
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn master_credentials(mut self, username: Option<&str>, password: &str) -> Self {
        match &mut self.topology {
            Topology::Sentinel { auth, .. } => {
                *auth = Some((username.map(str::to_owned), password.to_owned()));
            }
            _ => {
                self.misplaced = Some("master_credentials needs a client made by sentinel_builder")
            }
        }
        self
    }

    /// TLS to the Redis data nodes behind Sentinel, verified against the system's trust store
    /// or the [`tls_root_certificate`](LockClientBuilder::tls_root_certificate) (TLS to the
    /// sentinels themselves is the `rediss://` of their URLs). The sentinels must report the
    /// master's TLS port: monitor it there (`tls-replication yes` in the sentinels' config).
    ///
    /// Only for a builder made by [`LockClient::sentinel_builder`]; on any other,
    /// [`build`](LockClientBuilder::build) fails with [`LockError::InvalidConfig`].
    ///
    /// ```no_run
    /// # async fn demo(ca_pem: Vec<u8>) -> Result<(), lock_runtime::LockError> {
    /// let locks = lock_runtime::LockClient::sentinel_builder(["redis://10.0.0.1:26379"], "mymaster")
    ///     .master_tls()
    ///     .tls_root_certificate(ca_pem)
    ///     .build()
    ///     .await?;
    /// # drop(locks); Ok(()) }
    /// ```
    #[cfg(all(feature = "sentinel", feature = "tls"))]
    #[cfg_attr(docsrs, doc(cfg(all(feature = "sentinel", feature = "tls"))))]
    pub fn master_tls(mut self) -> Self {
        match &mut self.topology {
            Topology::Sentinel { tls, .. } => *tls = true,
            _ => self.misplaced = Some("master_tls needs a client made by sentinel_builder"),
        }
        self
    }

    /// Connects both connections and starts the background tasks.
    pub async fn build(mut self) -> Result<LockClient, LockError> {
        #[cfg(feature = "memory")]
        if let Some(memory) = self.memory.take() {
            return self.build_memory(memory);
        }
        let info = self.connection_info.take();
        let (config, settings) = self.into_parts()?;
        let demux = Demux::new();
        let renew_now = Arc::new(tokio::sync::Notify::new());
        let (conn, pubsub) = match info {
            Some(info) => {
                // RESP2 for commands (a URL's default) even if the application's client speaks
                // RESP3; `managers` switches the pub/sub connection to RESP3 itself.
                let resp2 = info
                    .redis_settings()
                    .clone()
                    .set_protocol(redis::ProtocolVersion::RESP2);
                let (conn, pubsub) = settings
                    .managers(info.set_redis_settings(resp2), &demux)
                    .await?;
                (Conn::Single(conn), Conn::Single(pubsub))
            }
            None => topology::connect(&config.topology, &settings, &demux, &renew_now).await?,
        };
        let backend = redis_backend(&config, conn);
        Ok(LockClient::start(
            config,
            backend,
            Box::new(pubsub),
            demux,
            renew_now,
        ))
    }

    /// A client whose connections are a scripted stand-in for Redis (unit tests under paused
    /// time).
    #[cfg(test)]
    pub(crate) fn build_fake(self, fake: crate::fake::FakeRedis) -> Result<LockClient, LockError> {
        let (config, _) = self.into_parts()?;
        let demux = Demux::new();
        let backend = redis_backend(&config, Conn::Fake(fake.clone()));
        let pubsub = Conn::Fake(fake);
        Ok(LockClient::start(
            config,
            backend,
            Box::new(pubsub),
            demux,
            Arc::new(tokio::sync::Notify::new()),
        ))
    }

    /// A client whose locks live in `memory`, shared with every other client built on it (see
    /// [`MemoryLocks`](crate::MemoryLocks)).
    #[cfg(any(test, feature = "memory"))]
    pub(crate) fn build_memory(
        mut self,
        memory: crate::backend::memory::MemoryBackend,
    ) -> Result<LockClient, LockError> {
        self.memory = None;
        let (config, _) = self.into_parts()?;
        let demux = Demux::new();
        let renew_now = Arc::new(tokio::sync::Notify::new());
        let channels = memory.connect(demux.router(), &renew_now);
        Ok(LockClient::start(
            config,
            Arc::new(memory),
            Box::new(channels),
            demux,
            renew_now,
        ))
    }

    /// Makes [`build`](LockClientBuilder::build) start a client on `memory` instead of
    /// connecting to Redis (what [`MemoryLocks::builder`](crate::MemoryLocks::builder) does).
    #[cfg(feature = "memory")]
    pub(crate) fn in_memory(mut self, memory: crate::backend::memory::MemoryBackend) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Validates the settings.
    fn into_parts(self) -> Result<(Config, Settings), LockError> {
        if let Some(what) = self.misplaced {
            return Err(LockError::InvalidConfig(what.into()));
        }
        validate_prefix(&self.prefix)?;
        if self.watchdog_timeout < Duration::from_millis(30) {
            return Err(LockError::InvalidConfig(format!(
                "watchdog timeout must be at least 30 ms, got {:?}",
                self.watchdog_timeout
            )));
        }
        for (what, d) in [
            ("connect timeout", self.connect_timeout),
            ("response timeout", self.response_timeout),
            ("fence retention", self.fence_retention),
            ("watchdog timeout", self.watchdog_timeout),
        ] {
            if d.is_zero() || d > MAX_LEASE {
                return Err(LockError::InvalidConfig(format!(
                    "{what} must be greater than zero and at most {MAX_LEASE:?}, got {d:?}"
                )));
            }
        }
        if self.failover_grace > MAX_LEASE {
            return Err(LockError::InvalidConfig(format!(
                "failover grace must be at most {MAX_LEASE:?}, got {:?}",
                self.failover_grace
            )));
        }

        // redis' rustls support leaves the crypto provider to the application; pick ring unless
        // the application installed one already.
        #[cfg(feature = "tls")]
        let _ = rustls::crypto::ring::default_provider().install_default();

        if let Some(ack) = self.replica_ack {
            if ack.timeout.is_zero() {
                return Err(LockError::InvalidConfig(
                    "replica acknowledgement timeout must be greater than zero (WAIT 0 waits forever)"
                        .into(),
                ));
            }
            if ack.timeout * 2 > self.response_timeout {
                return Err(LockError::InvalidConfig(format!(
                    "replica acknowledgement timeout ({:?}) must be at most half the response timeout ({:?}), \
                     or a missing acknowledgement would look like an unanswered request",
                    ack.timeout, self.response_timeout
                )));
            }
        }

        let settings = Settings {
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            #[cfg(feature = "tls")]
            tls_root_certificate: self.tls_root_certificate,
        };
        let config = Config {
            // Before `topology` is moved in.
            deployment_id: self
                .deployment_id
                .unwrap_or_else(|| self.topology.deployment_id()),
            prefix: self.prefix,
            layout: self.layout,
            watchdog_timeout: self.watchdog_timeout,
            response_timeout: self.response_timeout,
            fence_retention: self.layout.fence_retention(self.fence_retention),
            // With acknowledged grants every release goes through Redis (and its `WAIT`).
            handoff_limit: if self.replica_ack.is_none() && self.layout.hands_off_locally() {
                self.handoff_limit
            } else {
                0
            },
            group_commit: self.group_commit,
            topology: self.topology,
            replica_ack: self.replica_ack,
            failover_grace: self.failover_grace,
        };
        Ok((config, settings))
    }
}

/// The Redis backend on a connected command connection.
fn redis_backend(config: &Config, conn: Conn) -> Arc<dyn Backend> {
    Arc::new(RedisBackend::new(
        conn,
        config.publishing(),
        config.replica_ack,
        config.topology.fails_over(),
        config.group_commit,
    ))
}

impl LockClient {
    /// Starts the background tasks on a backend.
    fn start(
        config: Config,
        backend: Arc<dyn Backend>,
        pubsub: Box<dyn Channels>,
        demux: Demux,
        renew_now: Arc<tokio::sync::Notify>,
    ) -> LockClient {
        let mut tasks = Vec::new();
        tasks.push(demux.start(pubsub));
        let counters = Arc::new(Counters::default());
        let handoffs = Arc::new(HandOffs::new(config.handoff_limit));
        let releaser = Releaser::start(
            backend.clone(),
            handoffs.clone(),
            (config.response_timeout, config.fence_retention),
            counters.clone(),
        );
        let inner = Arc::new(Inner {
            id: config.layout.new_client_id().into(),
            watchdog: Watchdog::new(&config, renew_now),
            config,
            backend,
            demux,
            releaser,
            handoffs,
            counters,
            names: NameCache::new(),
            next_acquisition: AtomicU64::new(1),
            tasks: Mutex::new(Vec::new()),
        });
        tasks.push(Watchdog::spawn(&inner));
        *sync::lock(&inner.tasks) = tasks;
        tracing::debug!(client = %inner.id, "lock client connected");
        LockClient { inner }
    }
}
