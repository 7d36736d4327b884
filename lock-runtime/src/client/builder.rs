//! [`LockClientBuilder`]: the settings of a client, their validation, and starting a client
//! (its background tasks) on a Redis or in-memory backend.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::inner::{Config, Inner, NameCache};
use super::{
    DEFAULT_FAILOVER_GRACE, DEFAULT_PREFIX, DEFAULT_REDISSON_WATCHDOG_TIMEOUT,
    DEFAULT_WATCHDOG_TIMEOUT, LockClient,
};
use crate::LockError;
use crate::backend::{Backend, Channels, MAX_REQUEST_ARGUMENTS, MIN_REQUEST_ARGUMENTS};
use crate::demux::Demux;
use crate::handoff::HandOffs;
use crate::keys::Layout;
use crate::keys::validate_prefix;
use crate::options::MAX_LEASE;
use crate::releaser::Releaser;
use crate::stats::Counters;
use crate::sync;
use crate::topology::replica_ack::ReplicaAck;
use crate::topology::{self, Conn, RedisBackend, Settings, Topology};
use crate::watchdog::Watchdog;

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
    sentinel_recheck: Duration,
    prefix: String,
    watchdog_timeout: Duration,
    redisson_watchdog_timeout: Duration,
    connect_timeout: Duration,
    response_timeout: Duration,
    fence_retention: Duration,
    handoff_limit: u32,
    max_request_arguments: usize,
    fenced: bool,
    layout: Layout,
    deployment_id: Option<String>,
    #[cfg(feature = "tls")]
    tls_root_certificate: Option<Vec<u8>>,
    /// Locks in memory instead of Redis ([`MemoryLocks::builder`](crate::MemoryLocks::builder)).
    #[cfg(any(test, feature = "memory"))]
    memory: Option<crate::backend::memory::MemoryBackend>,
}

impl LockClientBuilder {
    pub(super) fn new(topology: Topology) -> LockClientBuilder {
        LockClientBuilder {
            topology,
            connection_info: None,
            misplaced: None,
            replica_ack: None,
            failover_grace: DEFAULT_FAILOVER_GRACE,
            sentinel_recheck: topology::DEFAULT_SENTINEL_RECHECK,
            prefix: DEFAULT_PREFIX.to_owned(),
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            redisson_watchdog_timeout: DEFAULT_REDISSON_WATCHDOG_TIMEOUT,
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(2),
            fence_retention: Duration::from_secs(7 * 24 * 3600),
            handoff_limit: crate::handoff::DEFAULT_LIMIT,
            max_request_arguments: MAX_REQUEST_ARGUMENTS,
            fenced: false,
            layout: Layout::Native,
            deployment_id: None,
            #[cfg(feature = "tls")]
            tls_root_certificate: None,
            #[cfg(any(test, feature = "memory"))]
            memory: None,
        }
    }

    /// One server given as redis' connection info: connect with it, and name the deployment by
    /// its address and database.
    pub(super) fn from_connection_info(info: redis::ConnectionInfo) -> LockClientBuilder {
        let mut builder = LockClientBuilder::new(Topology::Single(identity_url(&info)));
        builder.connection_info = Some(info);
        builder
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

    /// With [`Layout::Redisson`]: the shortest `lockWatchdogTimeout` of the Java services that
    /// share read/write locks with this client (default 10 s,
    /// [`DEFAULT_REDISSON_WATCHDOG_TIMEOUT`](crate::DEFAULT_REDISSON_WATCHDOG_TIMEOUT)). At
    /// least 30 ms.
    ///
    /// A Java reader's renewal sets the TTL of the hash every reader of the lock shares to
    /// *its* watchdog timeout, which may be shorter than what is left of a Rust reader's lease
    /// (and Redisson 3.x re-arms every reader's timeout key to it, ours included). Should that
    /// Java reader then die (or, on 3.x, unlock), the hash would expire under the Rust reader.
    /// So the watchdog renews Rust read holds of Redisson's read/write lock every third of the
    /// shorter of this and the [watchdog timeout](LockClientBuilder::watchdog_timeout), and
    /// counts a renewal as confirming only that long: a Rust read hold is told it is lost
    /// before the hash can expire under it, and as long as Redis answers it never does. The
    /// default covers Redisson's default (30 s) and Java fleets that lowered it to a third;
    /// set the Java value when it is lower. The cost is a renewal round trip every 3.3 s (with
    /// the default) while a client holds a Redisson read lock, and a read hold whose renewals
    /// go unanswered for 9 s is reported lost. Other primitives, and read holds with an
    /// explicit lease, are not affected (an explicit lease longer than this on a Redisson read
    /// hold is not protected against a Java reader's renewal: keep it below).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    /// use lock_runtime::{Layout, LockClient};
    ///
    /// // The Java services run Redisson with `config.setLockWatchdogTimeout(5000)`.
    /// let locks = LockClient::builder("redis://127.0.0.1/")
    ///     .layout(Layout::Redisson)
    ///     .redisson_watchdog_timeout(Duration::from_secs(5))
    ///     .build()
    ///     .await?;
    /// # let _ = locks; Ok(()) }
    /// ```
    pub fn redisson_watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.redisson_watchdog_timeout = timeout;
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

    /// How long an unused fencing counter is kept (default 7 days). Its retention is refreshed
    /// as tokens are issued: at least once per tenth of it while the lock is in use, so a
    /// counter lives at least nine tenths of the retention after its last token (and a whole
    /// retention after each token while it is ahead of the server clock). Tokens keep
    /// increasing even after it expires, because a fresh counter starts at the server clock in
    /// microseconds (behind Sentinel, at the floor of the master's failover epoch, which
    /// follows the same clock).
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
        self
    }

    /// Whether every lock of this client is taken with its fencing token (default `false`:
    /// tokens on demand).
    ///
    /// By default a mutex is taken without a token: its grant costs Redis what the cheapest
    /// locks cost (no counter to bump), a hot lock passes between the tasks of this process in
    /// memory, and [`LockGuard::fencing_token`](crate::LockGuard::fencing_token) asks Redis for
    /// a token when the caller first wants one (one round trip, issued only while the guard
    /// holds the lock). With `fenced_by_default(true)` every acquisition issues its token in
    /// its own round trip, as [`Lock::fenced`](crate::Lock::fenced) does for one handle: the
    /// right choice for a service that fences every write it makes under the lock.
    ///
    /// The other kinds of lock (fair, read/write, semaphores) always issue their token with
    /// the grant, and so does every lock with [`Layout::Redisson`] (its grants write
    /// Redisson's token key as they always did).
    pub fn fenced_by_default(mut self, fenced: bool) -> Self {
        self.fenced = fenced;
        self
    }

    /// How many times in a row a lock may be handed straight from one task of this client to
    /// another while another process waits for it (default 64; 0 turns local hand-off off).
    ///
    /// When a task releases a mutex that other tasks of the same client are waiting for, the
    /// lock goes to the longest-waiting of them without falling free in between:
    /// - **in memory**, when that task wants no token with its grant (a mutex's default:
    ///   tokens on demand): no round trip at all; the hold in Redis stays as it is (its owner
    ///   id, its lease, renewed by the watchdog) and the task takes it over, asking for its own
    ///   token when it needs one;
    /// - **through Redis** otherwise (a [`fenced`](crate::Lock::fenced) waiter, the other
    ///   primitives): the release grants it in its own round trip, with a fresh fencing token
    ///   and that task's own lease, instead of three steps (release, unlock message, the
    ///   waiter's acquire).
    ///
    /// Both kinds count towards the limit. After `limit` such hand-overs in a row, or 2 ms after the first of them
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

    /// The most arguments (the command's name included) any request this client sends may
    /// carry (default [`MAX_REQUEST_ARGUMENTS`], 3,999: ElastiCache Serverless's limit). Set it
    /// for a server or proxy with a lower limit: (un)subscriptions and watchdog renewals
    /// are then split into more, smaller commands in the same round
    /// trips; no other request grows with the number of locks. At least
    /// [`MIN_REQUEST_ARGUMENTS`] (64), else [`build`](LockClientBuilder::build) fails with
    /// [`LockError::InvalidConfig`].
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// let locks = lock_runtime::LockClient::builder("redis://127.0.0.1/")
    ///     .max_request_arguments(1_000)
    ///     .build()
    ///     .await?;
    /// # let _ = locks; Ok(()) }
    /// ```
    pub fn max_request_arguments(mut self, max: usize) -> Self {
        self.max_request_arguments = max;
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
    ///   [`LockError::UnacknowledgedRelease`], which is not a failure: the lock is released on
    ///   the master and the caller can ignore it ([`LockError::is_released`]).
    ///
    /// `timeout` must be at most half the [response timeout](LockClientBuilder::response_timeout).
    /// Costs: a `WAIT`, which holds up the requests queued behind it on the shared connection
    /// until the replicas answer (up to `timeout` when one lags). So that a `WAIT` does not
    /// hold up the next write, the writes that queue meanwhile go out together when it
    /// returns, followed by one `WAIT` for all of them. It narrows the window in which
    /// a failover can lose a grant; it does not make Redis replication synchronous (see the crate
    /// docs on topologies). `replicas = 0` turns it off.
    ///
    /// Recommended in production alongside it, on every master: `min-replicas-to-write 1` and
    /// `min-replicas-max-lag 1`. A master cut off from its replicas but still reached by
    /// clients (a split brain) then refuses every write, for every client, about lag + 1 s
    /// after the cut (measured: 1.95–1.97 s; without it, it kept granting until the partition
    /// healed). Choose the lease, the [response timeout](LockClientBuilder::response_timeout)
    /// and `timeout` together: `timeout ≤ response / 2` (checked by
    /// [`build`](LockClientBuilder::build)), `response ≤ lease / 4` (at least two renewal
    /// attempts before the loss is declared); TOPOLOGIES.md has the table and the
    /// measurements.
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

    /// How often a Sentinel client asks the sentinels about the master even when nothing
    /// failed (default 1 s; at least 10 ms): one `SENTINEL MASTER` on a kept connection to one
    /// sentinel.
    ///
    /// Most failovers show up as failed requests, which make the client ask at once (at most
    /// every 200 ms) and send nothing to the master until the sentinels confirm it (same
    /// address, same run id or a restart they have seen too, no failover under way). This
    /// periodic question notices what caused no error here: a failover started while this
    /// client's requests still succeed (the old master cut off from the sentinels but not from
    /// this client: from then on nothing is sent to it), or a master restarted between two
    /// requests. A shorter interval narrows that window at the cost of one small request per
    /// interval per client on a sentinel. It does not help a client that cannot reach the
    /// sentinels either; against that (a split brain), configure `min-replicas-to-write` on
    /// the master (see [`replica_ack`](LockClientBuilder::replica_ack)).
    ///
    /// Only for a builder made by [`LockClient::sentinel_builder`]; on any other,
    /// [`build`](LockClientBuilder::build) fails with [`LockError::InvalidConfig`].
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    ///
    /// let locks = lock_runtime::LockClient::sentinel_builder(["redis://10.0.0.1:26379"], "mymaster")
    ///     .sentinel_recheck(Duration::from_millis(250))
    ///     .build()
    ///     .await?;
    /// # drop(locks); Ok(()) }
    /// ```
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn sentinel_recheck(mut self, interval: Duration) -> Self {
        match &self.topology {
            Topology::Sentinel { .. } => self.sentinel_recheck = interval,
            _ => self.misplaced = Some("sentinel_recheck needs a client made by sentinel_builder"),
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

    /// Connects both connections, asks the server what it is and whether it can run these
    /// locks, and starts the background tasks.
    ///
    /// Fails with [`LockError::IncompatibleServer`] when the server cannot (a Redis older than
    /// 7.0, no Lua scripting, no `WAIT` while [`replica_ack`](LockClientBuilder::replica_ack)
    /// is set), and with [`LockError::NoPermission`] when the user's ACL refuses `EVALSHA` (or
    /// `WAIT` with `replica_ack`): the error names what is missing and how to fix it.
    pub async fn build(mut self) -> Result<LockClient, LockError> {
        #[cfg(feature = "memory")]
        if let Some(memory) = self.memory.take() {
            return self.build_memory(memory);
        }
        let info = self.connection_info.take();
        let (config, settings) = self.into_parts()?;
        let demux = Demux::new(
            config.max_request_arguments,
            config.topology.resubscribe_settle(),
        );
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
        let mut probe = conn.probe();
        let check = crate::server::check(&mut probe, config.replica_ack.is_some());
        let server = match tokio::time::timeout(settings.connect_timeout, check).await {
            Ok(server) => server?,
            Err(_) => {
                return Err(LockError::ResponseTimeout {
                    op: "connect",
                    timeout: settings.connect_timeout,
                });
            }
        };
        let deletes_if_equal = server
            .as_ref()
            .is_some_and(crate::ServerInfo::deletes_if_equal);
        let backend = redis_backend(&config, conn, deletes_if_equal);
        Ok(LockClient::start(
            config,
            backend,
            Box::new(pubsub),
            demux,
            renew_now,
            server,
        ))
    }

    /// A client whose connections are a scripted stand-in for Redis (unit tests under paused
    /// time).
    #[cfg(test)]
    pub(crate) fn build_fake(self, fake: crate::fake::FakeRedis) -> Result<LockClient, LockError> {
        let (config, _) = self.into_parts()?;
        let demux = Demux::new(config.max_request_arguments, Duration::ZERO);
        let backend = redis_backend(&config, Conn::Fake(fake.clone()), false);
        let pubsub = Conn::Fake(fake);
        Ok(LockClient::start(
            config,
            backend,
            Box::new(pubsub),
            demux,
            Arc::new(tokio::sync::Notify::new()),
            None,
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
        let demux = Demux::new(config.max_request_arguments, Duration::ZERO);
        let renew_now = Arc::new(tokio::sync::Notify::new());
        let channels = memory.connect(demux.router(), &renew_now);
        Ok(LockClient::start(
            config,
            Arc::new(memory),
            Box::new(channels),
            demux,
            renew_now,
            None,
        ))
    }

    /// Makes [`build`](LockClientBuilder::build) start a client on `memory` instead of
    /// connecting to Redis (what [`MemoryLocks::builder`](crate::MemoryLocks::builder) does).
    #[cfg(feature = "memory")]
    pub(crate) fn in_memory(mut self, memory: crate::backend::memory::MemoryBackend) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Validates the settings; splits them into the client's and the connections'.
    fn into_parts(self) -> Result<(Config, Settings), LockError> {
        if let Some(what) = self.misplaced {
            return Err(LockError::InvalidConfig(what.into()));
        }
        validate_prefix(&self.prefix)?;
        self.check_durations()?;
        if self.max_request_arguments < MIN_REQUEST_ARGUMENTS {
            return Err(LockError::InvalidConfig(format!(
                "the argument limit per request must be at least {MIN_REQUEST_ARGUMENTS}, got {}",
                self.max_request_arguments
            )));
        }

        // redis' rustls support leaves the crypto provider to the application; pick ring unless
        // the application installed one already.
        #[cfg(feature = "tls")]
        let _ = rustls::crypto::ring::default_provider().install_default();

        self.check_replica_ack()?;
        Ok(self.split())
    }

    /// The watchdog timeout, the other timeouts, the fence retention and the failover grace
    /// are within bounds.
    fn check_durations(&self) -> Result<(), LockError> {
        for (what, d) in [
            ("watchdog timeout", self.watchdog_timeout),
            ("Redisson watchdog timeout", self.redisson_watchdog_timeout),
        ] {
            if d < Duration::from_millis(30) {
                return Err(LockError::InvalidConfig(format!(
                    "{what} must be at least 30 ms, got {d:?}"
                )));
            }
        }
        for (what, d) in [
            ("connect timeout", self.connect_timeout),
            ("response timeout", self.response_timeout),
            ("fence retention", self.fence_retention),
            ("watchdog timeout", self.watchdog_timeout),
            ("Redisson watchdog timeout", self.redisson_watchdog_timeout),
        ] {
            if d.is_zero() || d > MAX_LEASE {
                return Err(LockError::InvalidConfig(format!(
                    "{what} must be greater than zero and at most {MAX_LEASE:?}, got {d:?}"
                )));
            }
        }
        if self.sentinel_recheck < Duration::from_millis(10) || self.sentinel_recheck > MAX_LEASE {
            return Err(LockError::InvalidConfig(format!(
                "sentinel recheck interval must be at least 10 ms and at most {MAX_LEASE:?}, got {:?}",
                self.sentinel_recheck
            )));
        }
        if self.failover_grace > MAX_LEASE {
            return Err(LockError::InvalidConfig(format!(
                "failover grace must be at most {MAX_LEASE:?}, got {:?}",
                self.failover_grace
            )));
        }
        Ok(())
    }

    /// Replica acknowledgement, if asked for, waits a while, and less than half a response.
    fn check_replica_ack(&self) -> Result<(), LockError> {
        let Some(ack) = self.replica_ack else {
            return Ok(());
        };
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
        Ok(())
    }

    /// The client's configuration and the connections' settings, from the validated settings.
    fn split(self) -> (Config, Settings) {
        let settings = Settings {
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            sentinel_recheck: self.sentinel_recheck,
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
            redisson_watchdog_timeout: self.redisson_watchdog_timeout,
            response_timeout: self.response_timeout,
            fence_retention: self.layout.fence_retention(self.fence_retention),
            // With acknowledged grants every release goes through Redis (and its `WAIT`).
            handoff_limit: if self.replica_ack.is_none() && self.layout.hands_off_locally() {
                self.handoff_limit
            } else {
                0
            },
            max_request_arguments: self.max_request_arguments,
            fenced: self.fenced || self.layout.fences_every_grant(),
            topology: self.topology,
            replica_ack: self.replica_ack,
            failover_grace: self.failover_grace,
        };
        (config, settings)
    }
}

/// The Redis backend on a connected command connection.
fn redis_backend(config: &Config, conn: Conn, deletes_if_equal: bool) -> Arc<dyn Backend> {
    Arc::new(RedisBackend::new(
        conn,
        config.publishing(),
        config.replica_ack,
        config.topology.fails_over(),
        config.max_request_arguments,
        deletes_if_equal,
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
        server: Option<crate::ServerInfo>,
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
            server,
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
