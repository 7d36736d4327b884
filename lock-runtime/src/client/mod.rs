//! `LockClient`: configuration, the backend, and the background tasks (demux, watchdog,
//! releaser; Sentinel adds its own).
//!
//! - `mod.rs`: [`LockClient`], the API: its constructors and the handles it makes;
//! - `builder.rs`: [`LockClientBuilder`], its settings, their validation (`into_parts`) and
//!   starting a client on a backend;
//! - `inner.rs`: the state every clone, handle and background task shares (`Inner`, `Config`,
//!   the cache of lock names), which is all the watchdog sees of the client.

mod builder;
pub(crate) mod inner;

use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

pub use self::builder::LockClientBuilder;
use self::inner::Inner;
use crate::LockError;
use crate::stats::ClientStats;
use crate::sync;
use crate::topology::Topology;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "lock";
/// The default watchdog timeout: the lease of a lock taken without an explicit lease.
pub const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an acquisition rides out an unavailable cluster or Sentinel deployment by default.
pub const DEFAULT_FAILOVER_GRACE: Duration = Duration::from_secs(10);
/// The Java services' `lockWatchdogTimeout` a [`Layout::Redisson`](crate::Layout::Redisson)
/// client's read holds are safe against by default (see
/// [`redisson_watchdog_timeout`](LockClientBuilder::redisson_watchdog_timeout)): a third of
/// Redisson's own default of 30 s.
pub const DEFAULT_REDISSON_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(10);

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
        LockClientBuilder::from_connection_info(info)
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

impl LockClient {
    /// This client's random id, the first part of every owner id it writes to Redis.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The server this client's locks live on, as it named itself when the client was built
    /// (`HELLO`): Valkey by name and its own version, not the `redis_version:7.2.4` Valkey
    /// reports to old clients. `None` for `MemoryLocks` clients and for a
    /// server (or proxy) that answers neither `HELLO` nor `INFO`. On a cluster, the node that
    /// answered.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// let locks = lock_runtime::LockClient::connect("redis://127.0.0.1:6379").await?;
    /// let server = locks.server().map(|s| s.to_string()); // Some("Valkey 9.1.2")
    /// # let _ = server; Ok(()) }
    /// ```
    pub fn server(&self) -> Option<&crate::ServerInfo> {
        self.inner.server.as_ref()
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
