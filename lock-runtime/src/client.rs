//! `LockClient`: connections, configuration and the three background tasks.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, ProtocolVersion};
use tokio::task::AbortHandle;

use crate::demux::Demux;
use crate::names::validate_prefix;
use crate::releaser::Releaser;
use crate::stats::{ClientStats, Counters};
use crate::watchdog::Watchdog;
use crate::{Lock, LockError};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "lock";
/// The default watchdog timeout: the lease of a lock taken without an explicit lease.
pub const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);

static DEFAULT_CLIENT: RwLock<Option<LockClient>> = RwLock::new(None);

/// A handle to the lock service on one Redis server.
///
/// Cheap to clone (an `Arc`); clones share two connections (one for lock commands, one
/// dedicated to pub/sub so that a flood of messages cannot delay a lock command) and three
/// background tasks: the pub/sub demultiplexer, the watchdog and the background releaser. The
/// tasks never keep the client alive; they stop once the last clone and the last guard are gone.
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
    /// The connection for lock commands.
    pub(crate) conn: ConnectionManager,
    pub(crate) demux: Demux,
    pub(crate) watchdog: Watchdog,
    pub(crate) releaser: Releaser,
    pub(crate) counters: Arc<Counters>,
    next_acquisition: AtomicU64,
    tasks: Mutex<Vec<AbortHandle>>,
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) prefix: String,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) fence_retention: Duration,
}

impl Inner {
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
        LockClientBuilder {
            url: url.to_owned(),
            prefix: DEFAULT_PREFIX.to_owned(),
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(2),
            fence_retention: Duration::from_secs(7 * 24 * 3600),
            #[cfg(feature = "tls")]
            tls_root_certificate: None,
        }
    }

    /// A lock by name. Nothing is sent to Redis until you use it; an invalid name (empty,
    /// longer than [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes, or with control characters) is
    /// reported by the first operation as [`LockError::InvalidName`].
    pub fn lock(&self, name: impl AsRef<str>) -> Lock {
        Lock::new(self.clone(), name.as_ref())
    }

    /// This client's random id, the first part of every owner id it writes to Redis.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.inner.config.prefix
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
        let mut slot = DEFAULT_CLIENT.write().unwrap_or_else(|e| e.into_inner());
        *slot = Some(self.clone());
    }

    /// The process-wide default client, or [`LockError::NoDefaultClient`].
    pub fn default_client() -> Result<LockClient, LockError> {
        DEFAULT_CLIENT
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(LockError::NoDefaultClient)
    }

    /// Removes the process-wide default client, returning it.
    pub fn uninstall_default() -> Option<LockClient> {
        DEFAULT_CLIENT
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take()
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

/// Configures a [`LockClient`]; made by [`LockClient::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until you call `build`"]
pub struct LockClientBuilder {
    url: String,
    prefix: String,
    watchdog_timeout: Duration,
    connect_timeout: Duration,
    response_timeout: Duration,
    fence_retention: Duration,
    #[cfg(feature = "tls")]
    tls_root_certificate: Option<Vec<u8>>,
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

    fn open(&self, info: redis::ConnectionInfo) -> Result<Client, LockError> {
        #[cfg(feature = "tls")]
        if let Some(pem) = &self.tls_root_certificate {
            let certs = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.clone()),
            };
            return Client::build_with_tls(info, certs)
                .map_err(|e| LockError::InvalidConfig(format!("bad TLS settings: {e}")));
        }
        Client::open(info).map_err(|e| LockError::InvalidConfig(format!("bad redis URL: {e}")))
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

    /// Connects both connections and starts the background tasks.
    pub async fn build(self) -> Result<LockClient, LockError> {
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
        ] {
            if d.is_zero() {
                return Err(LockError::InvalidConfig(format!(
                    "{what} must be greater than zero"
                )));
            }
        }

        // redis' rustls support leaves the crypto provider to the application; pick ring unless
        // the application installed one already.
        #[cfg(feature = "tls")]
        let _ = rustls::crypto::ring::default_provider().install_default();

        let info = redis::IntoConnectionInfo::into_connection_info(self.url.as_str())
            .map_err(|e| LockError::InvalidConfig(format!("bad redis URL: {e}")))?;
        let client = self.open(info.clone())?;
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let pubsub_client = self.open(info.set_redis_settings(resp3))?;

        let base = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(3)
            .set_max_delay(Duration::from_millis(500));
        let demux = Demux::new();
        // Deliberately *without* automatic resubscription: redis 1.8 mixes up replies after a
        // reconnect when it resubscribes itself (research/redis-rs-pubsub.md §3). The demux
        // owns resubscription.
        let pubsub_config = base.clone().set_push_sender(demux.router());

        let connect = async {
            tokio::try_join!(
                ConnectionManager::new_with_config(client, base),
                ConnectionManager::new_with_config(pubsub_client, pubsub_config),
            )
        };
        let (conn, pubsub) = match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(Ok(conns)) => conns,
            Ok(Err(e)) => return Err(LockError::backend("connect", e)),
            Err(_) => {
                return Err(LockError::Timeout {
                    op: "connect",
                    timeout: self.connect_timeout,
                });
            }
        };

        let config = Config {
            prefix: self.prefix,
            watchdog_timeout: self.watchdog_timeout,
            response_timeout: self.response_timeout,
            fence_retention: self.fence_retention,
        };
        let mut tasks = Vec::new();
        tasks.push(demux.start(pubsub));
        let counters = Arc::new(Counters::default());
        let releaser = Releaser::start(conn.clone(), counters.clone());
        let inner = Arc::new(Inner {
            id: uuid::Uuid::new_v4().simple().to_string().into(),
            watchdog: Watchdog::new(&config),
            config,
            conn,
            demux,
            releaser,
            counters,
            next_acquisition: AtomicU64::new(1),
            tasks: Mutex::new(Vec::new()),
        });
        tasks.push(Watchdog::spawn(&inner));
        *inner.tasks.lock().unwrap_or_else(|e| e.into_inner()) = tasks;
        tracing::debug!(client = %inner.id, "lock client connected");
        Ok(LockClient { inner })
    }
}
