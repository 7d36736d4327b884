//! Where lock commands go: one Redis server, a Redis Cluster, or the master Sentinel names,
//! and the Redis backend that runs the lock operations there.
//!
//! - `mod.rs`: [`Topology`] (which deployment), [`Settings`] and [`connect`], and [`Conn`], a
//!   cheap-to-clone connection that implements redis' `ConnectionLike` (so the scripts run
//!   unchanged everywhere) and the demultiplexer's [`Channels`];
//! - `operations.rs`: [`RedisBackend`], the lock operations as script calls, with per-topology
//!   batching of renewals and background releases; `call.rs`: sending one script call or a
//!   pipeline of them, reloading a script the server lost; `group_commit.rs`: with replica
//!   acknowledgement, the writes that queue while one is in flight go out together, then one
//!   `WAIT`;
//! - `cluster.rs`: connecting to a cluster, sharded subscriptions (`SSUBSCRIBE`, one command per
//!   slot), renewals batched per node, releases per lock; `slots.rs`: hash slots and the
//!   slot→node map;
//! - `sentinel.rs`: finding the master through Sentinel and following it after a failover;
//! - `replica_ack.rs`: `WAIT` after each write, on any of them.
//!
//! What differs per topology stays in this folder:
//!
//! - **pub/sub**: `SUBSCRIBE`/`PUBLISH` on one server; sharded `SSUBSCRIBE`/`SPUBLISH` on a
//!   cluster, where the unlock channel lives in the lock's own slot, so a release reaches only
//!   that shard instead of being broadcast to every node;
//! - **batching**: a pipeline may span many locks on one server; on a cluster one script call
//!   must stay in one slot and one pipeline on one node;
//! - **failover**: the cluster connection follows `MOVED`/`ASK` and topology changes itself;
//!   the Sentinel connection asks the sentinels for the new master when the old one fails.

mod call;
#[cfg(feature = "cluster")]
mod cluster;
mod group_commit;
mod operations;
pub(crate) mod replica_ack;
#[cfg(feature = "sentinel")]
mod sentinel;
mod slots;

/// How often a Sentinel client asks the sentinels about the master anyway (1 s).
pub(crate) const DEFAULT_SENTINEL_RECHECK: Duration = Duration::from_secs(1);

pub(crate) use self::operations::RedisBackend;
#[cfg(test)]
pub(crate) use self::slots::slot;

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::LockError;
use crate::backend::{BoxFuture, Channels, GroupDone};
use crate::demux::Demux;
use crate::script::{Epoch, Publishing};

/// Which deployment a client talks to.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Topology {
    /// One server (or a proxy in front of one): the URL.
    Single(String),
    /// A Redis Cluster: seed node URLs.
    #[cfg(feature = "cluster")]
    Cluster(Vec<String>),
    /// A master found through Sentinel.
    #[cfg(feature = "sentinel")]
    Sentinel {
        /// Sentinel URLs.
        sentinels: Vec<String>,
        /// The monitored master's name.
        master: String,
        /// Credentials for the data nodes (the sentinels' own are in their URLs).
        auth: Option<(Option<String>, String)>,
        /// TLS to the data nodes (the sentinels' own is their URLs' scheme).
        tls: bool,
    },
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Topology::Single(url) => f.debug_tuple("Single").field(&redact(url)).finish(),
            #[cfg(feature = "cluster")]
            Topology::Cluster(nodes) => f
                .debug_tuple("Cluster")
                .field(&nodes.iter().map(|n| redact(n)).collect::<Vec<_>>())
                .finish(),
            #[cfg(feature = "sentinel")]
            Topology::Sentinel {
                sentinels, master, ..
            } => f
                .debug_struct("Sentinel")
                .field(
                    "sentinels",
                    &sentinels.iter().map(|n| redact(n)).collect::<Vec<_>>(),
                )
                .field("master", master)
                .finish_non_exhaustive(),
        }
    }
}

/// A URL without its credentials, for logs and `Debug`.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://…@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

impl Topology {
    /// A name of the deployment that every process reaching it by the same addresses derives
    /// alike: `host:port/db` for one server, `cluster:` and the sorted seed nodes, `sentinel:`,
    /// the master name, `@` and the sorted sentinels. Credentials, the scheme, a default port or
    /// database and the order of the nodes make no difference.
    pub(crate) fn deployment_id(&self) -> String {
        match self {
            Topology::Single(url) => node_id(url, true),
            #[cfg(feature = "cluster")]
            Topology::Cluster(nodes) => format!("cluster:{}", sorted_node_ids(nodes)),
            #[cfg(feature = "sentinel")]
            Topology::Sentinel {
                sentinels, master, ..
            } => format!("sentinel:{master}@{}", sorted_node_ids(sentinels)),
        }
    }

    /// Whether the deployment fails over by itself, so a brief unavailability is worth riding
    /// out instead of reporting it at once.
    pub(crate) fn fails_over(&self) -> bool {
        !matches!(self, Topology::Single(_))
    }

    /// How long the demultiplexer lets the pub/sub connection repair itself after a loss
    /// before resubscribing: on a cluster, a few times what redis takes to reconnect to a node
    /// (about a millisecond on a local network), so the resubscription goes to the node itself
    /// rather than elsewhere (see `Demux::new`).
    pub(crate) fn resubscribe_settle(&self) -> Duration {
        match self {
            #[cfg(feature = "cluster")]
            Topology::Cluster(_) => Duration::from_millis(50),
            _ => Duration::ZERO,
        }
    }

    /// The scripts to publish unlock messages with.
    pub(crate) fn publishing(&self) -> Publishing {
        match self {
            #[cfg(feature = "cluster")]
            Topology::Cluster(_) => Publishing::SHARDED,
            _ => Publishing::CLASSIC,
        }
    }
}

/// `host:port` of a node URL (IPv6 hosts in brackets, DNS names in lower case, the socket path
/// for a Unix socket), with `/db` when `with_db`. A URL that does not parse (the connection
/// fails on it anyway) is kept as given, without its credentials.
fn node_id(url: &str, with_db: bool) -> String {
    let Ok(info) = redis::IntoConnectionInfo::into_connection_info(url) else {
        return redact(url);
    };
    let addr = match info.addr() {
        redis::ConnectionAddr::Tcp(host, port)
        | redis::ConnectionAddr::TcpTls { host, port, .. } => {
            let host = host.to_lowercase();
            if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            }
        }
        other => other.to_string(),
    };
    if with_db {
        format!("{addr}/{}", info.redis_settings().db())
    } else {
        addr
    }
}

/// The node ids of `urls` (without database), sorted, duplicates removed, joined by commas.
#[cfg(any(feature = "cluster", feature = "sentinel"))]
fn sorted_node_ids(urls: &[String]) -> String {
    let mut ids: Vec<String> = urls.iter().map(|url| node_id(url, false)).collect();
    ids.sort();
    ids.dedup();
    ids.join(",")
}

/// A connection to wherever the lock keys live.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
    #[cfg(feature = "sentinel")]
    Sentinel(sentinel::FailoverConn),
    /// A scripted stand-in for unit tests.
    #[cfg(test)]
    Fake(crate::fake::FakeRedis),
}

impl Conn {
    /// A connection to ask the server what it is (`server::check`), straight to the node: a
    /// Sentinel client's master is asked even while it is unconfirmed (a question that grants
    /// nothing; its requests wait for the sentinels as before).
    pub(crate) fn probe(&self) -> Conn {
        match self {
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(c) => Conn::Single(c.current()),
            other => other.clone(),
        }
    }

    /// Before a call that carries the master's failover epoch is built (tokens of this
    /// crate's layout are ordered by it first: "Fencing epochs" in `script/prelude.lua`): the
    /// master of the moment once confirmed, as a request would wait for it, and its epoch.
    /// `None` on one server (no epoch). On a cluster, with `issues_token`, [`Epoch::Node`]: the
    /// node that runs the call reads its own. Behind Sentinel the master's epoch, `None` while
    /// the sentinels have not confirmed it; with `issues_token` (the call issues a token
    /// ordered by the epoch) it is waited for up to the response timeout after a switch, else
    /// the call fails unsent (a refused connection, a failover symptom). Send the call on
    /// [`Conn::pinned`] to it: if the client switched masters in between, the call fails
    /// unsent (a refused connection, which callers retry with a new call), so no epoch ever
    /// reaches another master than its own.
    pub(crate) async fn pin(&self, issues_token: bool) -> redis::RedisResult<Option<Pin>> {
        match self {
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(c) => {
                let (generation, epoch) = c.pin(issues_token).await?;
                Ok(Some(Pin {
                    generation: Some(generation),
                    epoch: epoch.map(Epoch::Of),
                }))
            }
            #[cfg(feature = "cluster")]
            Conn::Cluster(_) => Ok(issues_token.then_some(Pin {
                generation: None,
                epoch: Some(Epoch::Node),
            })),
            _ => {
                let _ = issues_token;
                Ok(None)
            }
        }
    }

    /// The generation of the master this connection sends to now (behind Sentinel; `None`
    /// elsewhere), to compare with a [`Pin`]'s.
    pub(crate) fn generation(&self) -> Option<u64> {
        match self {
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(c) => Some(c.generation()),
            _ => None,
        }
    }

    /// This connection, sending only to the master of `generation` (a [`Pin`]'s) when given.
    pub(crate) fn pinned(&self, generation: Option<u64>) -> Conn {
        match (self, generation) {
            #[cfg(feature = "sentinel")]
            (Conn::Sentinel(c), Some(generation)) => Conn::Sentinel(c.pinned(generation)),
            _ => self.clone(),
        }
    }
}

/// A call built for a master the client has switched away from ([`Conn::pin`]): not sent (a
/// refused connection, which callers retry with a call built for the new master).
pub(crate) fn moved_before_sent() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        "the master changed before the request was sent",
    ))
}

/// The master a call that carries its failover epoch was built for ([`Conn::pin`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pin {
    /// Behind Sentinel, which master of the client's (it moves on at each switch): the call
    /// goes to that one only.
    pub(crate) generation: Option<u64>,
    /// Its failover epoch, if known (behind Sentinel, once the sentinels confirmed it).
    pub(crate) epoch: Option<Epoch>,
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => c.req_packed_command(cmd),
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(c) => c.req_packed_command(cmd),
            #[cfg(test)]
            Conn::Fake(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(test)]
            Conn::Fake(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => c.get_db(),
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(c) => c.get_db(),
            #[cfg(test)]
            Conn::Fake(c) => c.get_db(),
        }
    }
}

impl Conn {
    /// `subscribe` (or unsubscribe, when `false`) on whatever this connection is.
    async fn resubscribe(&mut self, channels: &[String], subscribe: bool, done: GroupDone<'_>) {
        match self {
            Conn::Single(c) => {
                let result = if subscribe {
                    c.subscribe(channels).await
                } else {
                    c.unsubscribe(channels).await
                };
                done(channels, result)
            }
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => cluster::ssubscribe(c, channels, subscribe, done).await,
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(c) => done(channels, c.subscribe(channels, subscribe).await),
            #[cfg(test)]
            Conn::Fake(c) => done(channels, c.subscribe(channels, subscribe).await),
        }
    }
}

impl Channels for Conn {
    fn subscribe<'a>(
        &'a mut self,
        channels: &'a [String],
        done: GroupDone<'a>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(self.resubscribe(channels, true, done))
    }

    fn unsubscribe<'a>(
        &'a mut self,
        channels: &'a [String],
        done: GroupDone<'a>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(self.resubscribe(channels, false, done))
    }
}

/// Connection settings shared by every topology.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// How often a Sentinel client asks the sentinels about the master anyway.
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    pub(crate) sentinel_recheck: Duration,
    #[cfg(feature = "tls")]
    pub(crate) tls_root_certificate: Option<Vec<u8>>,
}

impl Settings {
    /// Opens a redis client for one node.
    pub(crate) fn open(&self, info: redis::ConnectionInfo) -> Result<redis::Client, LockError> {
        #[cfg(feature = "tls")]
        if let Some(pem) = &self.tls_root_certificate {
            let certs = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.clone()),
            };
            return redis::Client::build_with_tls(info, certs)
                .map_err(|e| LockError::InvalidConfig(format!("bad TLS settings: {e}")));
        }
        redis::Client::open(info)
            .map_err(|e| LockError::InvalidConfig(format!("bad redis URL: {e}")))
    }

    pub(crate) fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(3)
            .set_max_delay(Duration::from_millis(500))
    }

    /// Two connection managers to one server: commands (RESP2) and pub/sub (RESP3, pushes
    /// routed by the demux). Deliberately *without* redis' automatic resubscription: redis 1.8
    /// mixes up replies after a reconnect when it resubscribes itself
    /// (subscription replies are taken for command replies). The demux owns resubscription.
    pub(crate) async fn managers(
        &self,
        info: redis::ConnectionInfo,
        demux: &Demux,
    ) -> Result<(ConnectionManager, ConnectionManager), LockError> {
        let client = self.open(info.clone())?;
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let pubsub_client = self.open(info.set_redis_settings(resp3))?;
        let base = self.manager_config();
        let pubsub_config = base.clone().set_push_sender(demux.router());
        let connect = async {
            tokio::try_join!(
                ConnectionManager::new_with_config(client, base),
                ConnectionManager::new_with_config(pubsub_client, pubsub_config),
            )
        };
        self.within_connect_timeout(connect).await
    }

    pub(crate) async fn within_connect_timeout<T>(
        &self,
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, LockError> {
        match tokio::time::timeout(self.connect_timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(LockError::backend("connect", e)),
            Err(_) => Err(LockError::ResponseTimeout {
                op: "connect",
                timeout: self.connect_timeout,
            }),
        }
    }
}

/// Connects the command and the pub/sub connection of a client.
/// `renew_now` is notified when the connections switch to a new master, so the watchdog checks
/// at once which grants survived.
pub(crate) async fn connect(
    topology: &Topology,
    settings: &Settings,
    demux: &Demux,
    #[cfg_attr(not(feature = "sentinel"), allow(unused_variables))] renew_now: &std::sync::Arc<
        tokio::sync::Notify,
    >,
) -> Result<(Conn, Conn), LockError> {
    match topology {
        Topology::Single(url) => {
            let info = redis::IntoConnectionInfo::into_connection_info(url.as_str())
                .map_err(|e| LockError::InvalidConfig(format!("bad redis URL: {e}")))?;
            let (conn, pubsub) = settings.managers(info, demux).await?;
            Ok((Conn::Single(conn), Conn::Single(pubsub)))
        }
        #[cfg(feature = "cluster")]
        Topology::Cluster(nodes) => cluster::connect(nodes, settings, demux).await,
        #[cfg(feature = "sentinel")]
        Topology::Sentinel {
            sentinels,
            master,
            auth,
            tls,
        } => {
            sentinel::connect(
                sentinels,
                master,
                (auth.as_ref(), *tls),
                settings,
                demux,
                renew_now.clone(),
            )
            .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn single(url: &str) -> String {
        Topology::Single(url.to_owned()).deployment_id()
    }

    #[test]
    fn one_server_is_named_by_host_port_and_database() {
        let id = single("redis://127.0.0.1:6379/0");
        assert_eq!(id, "127.0.0.1:6379/0");
        for same in [
            "redis://127.0.0.1",
            "redis://127.0.0.1:6379",
            "redis://127.0.0.1:6379/",
            "redis://user:secret@127.0.0.1:6379/0",
            "redis://:secret@127.0.0.1/0",
        ] {
            assert_eq!(single(same), id, "{same}");
        }
        assert_eq!(single("redis://Redis.Example:6379"), "redis.example:6379/0");
        assert_eq!(single("redis://[::1]:7000/2"), "[::1]:7000/2");
        assert_ne!(single("redis://127.0.0.1:6379/1"), id, "another database");
        assert_ne!(single("redis://127.0.0.1:6380"), id, "another port");
        assert!(!single("not a url, user:secret@host").is_empty());
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn a_cluster_is_named_by_its_sorted_seed_set() {
        let id = |nodes: &[&str]| {
            Topology::Cluster(nodes.iter().map(|n| n.to_string()).collect()).deployment_id()
        };
        let a = id(&["redis://10.0.0.2:7000", "redis://10.0.0.1:7000"]);
        assert_eq!(a, "cluster:10.0.0.1:7000,10.0.0.2:7000");
        assert_eq!(
            id(&[
                "redis://u:p@10.0.0.1:7000",
                "redis://10.0.0.2:7000",
                "redis://10.0.0.1:7000"
            ]),
            a
        );
        assert_ne!(id(&["redis://10.0.0.1:7000"]), a);
    }

    #[cfg(feature = "sentinel")]
    #[test]
    fn a_sentinel_master_is_named_by_name_and_sorted_sentinels() {
        let id = |sentinels: &[&str], master: &str| {
            Topology::Sentinel {
                sentinels: sentinels.iter().map(|n| n.to_string()).collect(),
                master: master.to_owned(),
                auth: Some((None, "secret".into())),
                tls: false,
            }
            .deployment_id()
        };
        let a = id(&["redis://s2:26379", "redis://s1:26379"], "mymaster");
        assert_eq!(a, "sentinel:mymaster@s1:26379,s2:26379");
        assert_eq!(
            id(&["redis://:pw@s1:26379", "redis://s2:26379"], "mymaster"),
            a
        );
        assert_ne!(id(&["redis://s1:26379", "redis://s2:26379"], "other"), a);
    }
}
