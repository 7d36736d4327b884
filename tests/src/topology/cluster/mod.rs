//! A Redis Cluster of real processes: its nodes, their creation and their addresses, and the
//! partitionable form with proxies in front of every node. `probe.rs` checks that the cluster
//! settled, `slots.rs` maps keys and slots to nodes, `failover.rs` kills masters and waits for
//! their replicas, `migrate.rs` moves slots.

mod failover;
mod migrate;
mod probe;
mod slots;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Stdio};

use super::*;
use crate::{Peers, RedisServer, Resp, TcpProxy};

use failover::KilledMaster;
use probe::{cluster_nodes, cluster_slots};
use slots::SlotRange;

pub use slots::{CLUSTER_SLOTS, key_slot};

/// `cluster-node-timeout` of every [`RedisCluster`] node, in milliseconds: a killed master is
/// replaced by its replica a few of these after its death.
pub const CLUSTER_NODE_TIMEOUT_MS: u64 = 1500;

/// The `redis-server` arguments of a cluster node, then `extra`: `cluster-node-timeout`
/// [`CLUSTER_NODE_TIMEOUT_MS`], its own free bus port, replicas that always stand for election
/// and never migrate, full syncs at once.
fn node_args(extra: &[&str]) -> Vec<String> {
    // The default bus port (port + 10000) overflows for ephemeral ports above 55535: give
    // every node an explicit free one (a new one on every try, as for its own port: either
    // can be taken between the probe and the bind).
    let timeout = CLUSTER_NODE_TIMEOUT_MS.to_string();
    let mut args = vec![
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        &timeout,
        "--cluster-port",
        RedisServer::FREE_PORT,
        "--cluster-replica-validity-factor",
        "0",
        "--cluster-allow-replica-migration",
        "no",
        "--repl-diskless-sync-delay",
        "0",
    ];
    args.extend_from_slice(extra);
    args.into_iter().map(str::to_owned).collect()
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// A Redis Cluster of `masters × (1 + replicas_per_master)` [`RedisServer`]s, all on loopback,
/// each in its own dir with its own `nodes.conf`; stopped when dropped.
///
/// Nodes are addressed by index into [`nodes`](RedisCluster::nodes); the index of a node stays
/// the same when it changes role.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// `CLUSTER MYID` of each node, index-aligned with `nodes`.
    ids: Vec<String>,
    killed: HashMap<usize, KilledMaster>,
    /// The proxies in front of each node, index-aligned with `nodes`, when the cluster was
    /// started by [`start_partitionable`](RedisCluster::start_partitionable); empty otherwise.
    proxies: Vec<NodeProxies>,
}

/// The two proxies in front of one node of a partitionable cluster, and the loopback source
/// address of the node's own outgoing links.
#[derive(Debug)]
struct NodeProxies {
    /// In front of the client port; the port the node announces (`cluster-announce-port`),
    /// so clients, `MOVED` and the replicas' replication links all come through it.
    client: TcpProxy,
    /// In front of the cluster bus port; the bus port the node announces
    /// (`cluster-announce-bus-port`), so every peer's bus link to it comes through it.
    bus: TcpProxy,
    /// The node's `bind-source-addr`: its bus links and its replication link (as a replica)
    /// leave from this address, so a proxy can tell them from clients (`127.0.0.1`).
    source: IpAddr,
}

impl RedisCluster {
    /// Starts the nodes with `cluster-node-timeout` [`CLUSTER_NODE_TIMEOUT_MS`], creates the
    /// cluster with `redis-cli --cluster create … --cluster-replicas <replicas_per_master>`
    /// (slots spread evenly over the masters) and waits until every node reports
    /// `cluster_state:ok`, all nodes know each other and agree on the slot map and on who
    /// replicates whom, and every replica's link to its master is up.
    ///
    /// Replicas always stand for election when their master dies
    /// (`cluster-replica-validity-factor 0`) and never migrate to another master; a full sync
    /// starts at once (`repl-diskless-sync-delay 0`).
    ///
    /// # Panics
    /// If `masters < 3` (Redis Cluster needs three), if a process cannot be started, if
    /// `redis-cli` fails, or if the cluster is not ready within 30 s.
    pub fn start(masters: usize, replicas_per_master: usize) -> RedisCluster {
        assert!(
            masters >= 3,
            "a Redis Cluster needs at least 3 masters, asked for {masters}"
        );
        let count = masters * (1 + replicas_per_master);
        let nodes: Vec<RedisServer> = (0..count)
            .map(|_| RedisServer::start_with(&as_strs(&node_args(&[]))))
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        RedisCluster::create(nodes, Vec::new(), &addrs, masters, replicas_per_master)
    }

    /// Like [`start`](RedisCluster::start), with every node behind two [`TcpProxy`]s that a
    /// test can partition: one in front of its client port, one in front of its cluster bus
    /// port. Each node announces the proxies' ports (`cluster-announce-ip 127.0.0.1`,
    /// `cluster-announce-port`, `cluster-announce-bus-port`), so `CLUSTER SLOTS`, `MOVED`,
    /// its peers' bus links and its replicas' replication links all go through them; and
    /// its own outgoing links (bus, replication) leave from a loopback address of its own
    /// (`bind-source-addr 127.0.0.<20 + index>`), so a proxy tells them from clients, which
    /// come from `127.0.0.1`. Checked by experiment (redis 7.0): every bus link and every
    /// replication link arrives at the proxies from the node's own source address, and
    /// `CLUSTER SLOTS` names the client proxies.
    ///
    /// Needs a multi-threaded tokio runtime (the proxies run on it; the waits block in
    /// place). Faults: [`isolate_node`](RedisCluster::isolate_node),
    /// [`client_proxy`](RedisCluster::client_proxy), [`heal`](RedisCluster::heal).
    ///
    /// # Panics
    /// As [`start`](RedisCluster::start); also if a proxy cannot listen.
    pub async fn start_partitionable(masters: usize, replicas_per_master: usize) -> RedisCluster {
        let count = masters * (1 + replicas_per_master);
        let mut nodes = Vec::new();
        let mut proxies = Vec::new();
        for i in 0..count {
            let source = IpAddr::from([127, 0, 0, 20 + u8::try_from(i).expect("few nodes")]);
            // The announced ports are bound first (the node must know them when it starts, and
            // a port only probed free could be taken by another process before the proxy
            // listens); the proxies forward from them once the node's own ports are known.
            let loopback = |port| SocketAddr::from(([127, 0, 0, 1], port));
            let bind = || async {
                tokio::net::TcpListener::bind(loopback(0))
                    .await
                    .unwrap_or_else(|e| panic!("a proxy's port: {e}"))
            };
            let (client_listener, bus_listener) = (bind().await, bind().await);
            let port_of = |l: &tokio::net::TcpListener| l.local_addr().expect("bound").port();
            let (client_port, bus_port) = (port_of(&client_listener), port_of(&bus_listener));
            let (client_arg, bus_arg, source_arg) = (
                client_port.to_string(),
                bus_port.to_string(),
                source.to_string(),
            );
            let node = tokio::task::block_in_place(|| {
                RedisServer::start_with(&as_strs(&node_args(&[
                    "--cluster-announce-ip",
                    "127.0.0.1",
                    "--cluster-announce-port",
                    &client_arg,
                    "--cluster-announce-bus-port",
                    &bus_arg,
                    "--bind-source-addr",
                    &source_arg,
                ])))
            });
            let real_bus: u16 = tokio::task::block_in_place(|| {
                node.cmd(&["CONFIG", "GET", "cluster-port"])
                    .items()
                    .get(1)
                    .and_then(Resp::text)
                    .and_then(|p| p.parse().ok())
                    .expect("CONFIG GET cluster-port")
            });
            let client = TcpProxy::start_with(client_listener, loopback(node.port()))
                .unwrap_or_else(|e| panic!("client proxy on port {client_port}: {e}"));
            let bus = TcpProxy::start_with(bus_listener, loopback(real_bus))
                .unwrap_or_else(|e| panic!("bus proxy on port {bus_port}: {e}"));
            nodes.push(node);
            proxies.push(NodeProxies {
                client,
                bus,
                source,
            });
        }
        let addrs: Vec<String> = proxies
            .iter()
            .map(|p| p.client.url().trim_start_matches("redis://").to_string())
            .collect();
        tokio::task::block_in_place(|| {
            RedisCluster::create(nodes, proxies, &addrs, masters, replicas_per_master)
        })
    }

    /// Creates the cluster of `nodes` (reached at `addrs`) and waits until it is ready.
    fn create(
        nodes: Vec<RedisServer>,
        proxies: Vec<NodeProxies>,
        addrs: &[String],
        masters: usize,
        replicas_per_master: usize,
    ) -> RedisCluster {
        let cli = std::env::var("REDIS_CLI_BIN").unwrap_or_else(|_| "redis-cli".into());
        let output = Command::new(&cli)
            .args(["--cluster", "create"])
            .args(addrs)
            .args(["--cluster-replicas", &replicas_per_master.to_string()])
            .arg("--cluster-yes")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| {
                panic!("could not run {cli} (install redis-tools or set REDIS_CLI_BIN): {e}")
            });
        let stdout = String::from_utf8_lossy(&output.stdout);
        // The slots assigned and the configuration sent. Whether all 16,384 are covered is
        // judged below, on every node, once gossip has spread: redis-cli's own last check reads
        // one node's view as soon as the nodes' epochs agree, and behind the bus proxies that
        // view once still lacked two masters ("Not all 16384 slots are covered", exit status 0).
        assert!(
            output.status.success() && stdout.contains("Nodes configuration updated"),
            "`{cli} --cluster create {}` failed ({}):\n{stdout}\n{}",
            addrs.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );

        let ids = nodes
            .iter()
            .map(|n| {
                n.cmd(&["CLUSTER", "MYID"])
                    .text()
                    .unwrap_or_else(|| panic!("CLUSTER MYID on port {} gave no id", n.port()))
                    .to_string()
            })
            .collect();
        let cluster = RedisCluster {
            nodes,
            ids,
            killed: HashMap::new(),
            proxies,
        };
        wait_for(
            &format!("cluster of {masters} masters × {replicas_per_master} replicas ready"),
            READY_TIMEOUT,
            || {
                cluster.probe_stable(true)?;
                let roles = cluster.roles()?;
                let replicas = roles.iter().filter(|r| r.as_str() == "slave").count();
                if replicas != masters * replicas_per_master {
                    return Err(format!("{replicas} replicas, roles {roles:?}"));
                }
                Ok(())
            },
        );
        cluster
    }

    /// Every node, running or not, by index.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `index`.
    pub fn node(&self, index: usize) -> &RedisServer {
        &self.nodes[index]
    }

    /// Node `index`, mutable (to `stop`, `kill`, `restart`, …).
    pub fn node_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.nodes[index]
    }

    /// The cluster node id (`CLUSTER MYID`) of node `index`.
    pub fn node_id(&self, index: usize) -> &str {
        &self.ids[index]
    }

    /// The index of the node on `port`.
    /// The port is the node's own or, in a partitionable cluster, the one it announces (its
    /// client proxy's).
    pub fn index_of_port(&self, port: u16) -> Option<usize> {
        (self.nodes.iter().position(|n| n.port() == port))
            .or_else(|| (self.proxies.iter()).position(|p| p.client.port() == port))
    }

    /// `redis://127.0.0.1:<port>` of every node, by index.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }

    /// The URLs clients use, by index: each node's client proxy in a partitionable cluster
    /// ([`start_partitionable`](RedisCluster::start_partitionable)), else
    /// [`urls`](RedisCluster::urls).
    pub fn client_urls(&self) -> Vec<String> {
        if self.proxies.is_empty() {
            return self.urls();
        }
        self.proxies.iter().map(|p| p.client.url()).collect()
    }

    /// The proxy in front of node `index`'s client port (partitionable clusters only).
    ///
    /// # Panics
    /// If the cluster was not started by
    /// [`start_partitionable`](RedisCluster::start_partitionable).
    pub fn client_proxy(&self, index: usize) -> &TcpProxy {
        &self.proxies_of(index).client
    }

    fn proxies_of(&self, index: usize) -> &NodeProxies {
        self.proxies
            .get(index)
            .expect("not a partitionable cluster (see RedisCluster::start_partitionable)")
    }

    /// Cuts node `index` off from every other node, both ways: its cluster bus links and the
    /// replication links to and from it go silent (and new ones never get through), while
    /// clients (from `127.0.0.1`) still reach it. The minority side of a partition: its peers
    /// fail it over after `cluster-node-timeout`, and it stops taking writes once it sees that
    /// it cannot reach a majority of masters. [`heal`](RedisCluster::heal) ends it.
    ///
    /// # Panics
    /// If the cluster was not started by
    /// [`start_partitionable`](RedisCluster::start_partitionable).
    pub fn isolate_node(&self, index: usize) {
        let mine = self.proxies_of(index);
        let others: Vec<IpAddr> = (self.proxies.iter().enumerate())
            .filter(|&(i, _)| i != index)
            .map(|(_, p)| p.source)
            .collect();
        mine.client.isolate(Peers::from_ips(others.clone()));
        mine.bus.isolate(Peers::from_ips(others));
        for (i, p) in self.proxies.iter().enumerate() {
            if i != index {
                p.client.isolate(Peers::from_ips([mine.source]));
                p.bus.isolate(Peers::from_ips([mine.source]));
            }
        }
    }

    /// Ends every partition: [`isolate_node`](RedisCluster::isolate_node)'s, and any made on
    /// a [`client_proxy`](RedisCluster::client_proxy).
    pub fn heal(&self) {
        for p in &self.proxies {
            p.client.heal();
            p.bus.heal();
        }
    }

    /// The URL of the first running node, for clients that discover the rest.
    ///
    /// # Panics
    /// If no node runs.
    pub fn seed_url(&self) -> String {
        self.running()
            .next()
            .map(|i| self.nodes[i].url())
            .expect("no cluster node is running")
    }

    fn indices_with_role(&self, wanted: &str) -> Vec<usize> {
        self.running()
            .filter(|&i| {
                role(&self.nodes[i]).unwrap_or_else(|e| panic!("ROLE of node {i} failed: {e}"))
                    == wanted
            })
            .collect()
    }

    /// Indices of the running nodes that say `role:master` now.
    pub fn master_indices(&self) -> Vec<usize> {
        self.indices_with_role("master")
    }

    /// Indices of the running nodes that say they are replicas now.
    pub fn replica_indices(&self) -> Vec<usize> {
        self.indices_with_role("slave")
    }

    /// The running nodes that say `role:master` now.
    pub fn masters(&self) -> Vec<&RedisServer> {
        self.master_indices()
            .into_iter()
            .map(|i| &self.nodes[i])
            .collect()
    }

    /// The running nodes that say they are replicas now.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        self.replica_indices()
            .into_iter()
            .map(|i| &self.nodes[i])
            .collect()
    }

    /// Indices of the nodes replicating node `master`, per the cluster's view (`CLUSTER NODES`
    /// of a running node).
    pub fn replicas_of(&self, master: usize) -> Vec<usize> {
        let asked = self.any_running();
        let lines = cluster_nodes(&self.nodes[asked])
            .unwrap_or_else(|e| panic!("CLUSTER NODES on node {asked} failed: {e}"));
        lines
            .iter()
            .filter(|l| l.master.as_deref() == Some(self.ids[master].as_str()))
            .filter_map(|l| self.ids.iter().position(|id| *id == l.id))
            .collect()
    }

    fn any_running(&self) -> usize {
        self.running().next().expect("no cluster node is running")
    }
}
