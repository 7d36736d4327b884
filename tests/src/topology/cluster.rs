//! A Redis Cluster of real processes: creation, kills and failovers, slot migration.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Stdio};

use super::*;
use crate::{Peers, RedisServer, Resp, TcpProxy};

/// `cluster-node-timeout` of every [`RedisCluster`] node, in milliseconds: a killed master is
/// replaced by its replica a few of these after its death.
pub const CLUSTER_NODE_TIMEOUT_MS: u64 = 1500;

/// The number of hash slots of a Redis Cluster.
pub const CLUSTER_SLOTS: u16 = 16384;

/// The hash slot of `key`, as Redis Cluster computes it: CRC16 (XMODEM) of the key, or of its
/// hash tag (the text between the first `{` and the next `}`, when not empty), modulo 16384.
pub fn key_slot(key: &str) -> u16 {
    let key = key.as_bytes();
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let len = rest.iter().position(|&b| b == b'}')?;
            (len > 0).then(|| &rest[..len])
        })
        .unwrap_or(key);
    crc16_xmodem(hashed) % CLUSTER_SLOTS
}

fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}
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

/// One range of `CLUSTER SLOTS`: first slot, last slot, port of the master serving it.
type SlotRange = (u16, u16, u16);

/// `CLUSTER SLOTS` of one node, sorted by first slot.
fn cluster_slots(node: &RedisServer) -> Result<Vec<SlotRange>, String> {
    let reply = ask(node, &["CLUSTER", "SLOTS"])?;
    let mut ranges = Vec::new();
    for range in reply.items() {
        let parsed = match range.items() {
            [start, end, master, ..] => (|| {
                let start = u16::try_from(start.int()?).ok()?;
                let end = u16::try_from(end.int()?).ok()?;
                let port = u16::try_from(master.items().get(1)?.int()?).ok()?;
                Some((start, end, port))
            })(),
            _ => None,
        };
        ranges.push(parsed.ok_or_else(|| {
            format!(
                "port {}: unexpected CLUSTER SLOTS entry {range:?}",
                node.port()
            )
        })?);
    }
    ranges.sort_unstable();
    Ok(ranges)
}

/// One line of `CLUSTER NODES`.
#[derive(Debug)]
struct NodeLine {
    id: String,
    port: u16,
    flags: Vec<String>,
    /// The master's id, for a replica.
    master: Option<String>,
    link: String,
}

impl NodeLine {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

/// `CLUSTER NODES` of one node.
fn cluster_nodes(node: &RedisServer) -> Result<Vec<NodeLine>, String> {
    let reply = ask(node, &["CLUSTER", "NODES"])?;
    let text = reply.text().unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let parsed = (|| {
                let addr = fields.get(1)?.split(['@', ',']).next()?;
                Some(NodeLine {
                    id: fields.first()?.to_string(),
                    port: addr.rsplit_once(':')?.1.parse().ok()?,
                    flags: fields.get(2)?.split(',').map(str::to_string).collect(),
                    master: Some(fields.get(3)?.to_string()).filter(|m| m != "-"),
                    link: fields.get(7)?.to_string(),
                })
            })();
            parsed.ok_or_else(|| {
                format!(
                    "port {}: unexpected CLUSTER NODES line {line:?}",
                    node.port()
                )
            })
        })
        .collect()
}
/// What was known about a cluster master when [`RedisCluster::kill_node`] killed it.
#[derive(Debug, Clone)]
struct KilledMaster {
    slots: Vec<(u16, u16)>,
    replicas: Vec<usize>,
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
            // The announced ports are chosen first (the node must know them when it starts);
            // the proxies listen on them once the node's own ports are known.
            let (client_port, bus_port) = (crate::free_port(), crate::free_port());
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
            let loopback = |port| SocketAddr::from(([127, 0, 0, 1], port));
            let client = TcpProxy::start_on(loopback(client_port), loopback(node.port()))
                .await
                .unwrap_or_else(|e| panic!("client proxy on port {client_port}: {e}"));
            let bus = TcpProxy::start_on(loopback(bus_port), loopback(real_bus))
                .await
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
        assert!(
            output.status.success() && stdout.contains("All 16384 slots covered"),
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

    /// Checks what every running node reports: `cluster_state:ok`; the same complete slot map,
    /// served only by running masters; no running node flagged failed or unconnected, and each
    /// in the role it reports for itself; and, on replicas, an up link to the master. With `all_known`, every node must know all nodes.
    /// Returns the agreed slot map.
    fn probe_stable(&self, all_known: bool) -> Result<Vec<SlotRange>, String> {
        let running_ids: HashMap<&str, usize> =
            self.running().map(|i| (self.ids[i].as_str(), i)).collect();
        let mut reference: Option<(usize, Vec<SlotRange>)> = None;
        let mut views = Vec::new();
        for i in self.running() {
            let node = &self.nodes[i];
            let state = info_field_of(ask(node, &["CLUSTER", "INFO"])?, "cluster_state");
            if state.as_deref() != Some("ok") {
                return Err(format!(
                    "node {i} (port {}): cluster_state {state:?}",
                    node.port()
                ));
            }

            let slots = cluster_slots(node)?;
            let mut next = 0u32;
            for &(start, end, port) in &slots {
                if u32::from(start) != next {
                    return Err(format!("node {i}: slots from {next} not served: {slots:?}"));
                }
                next = u32::from(end) + 1;
                match self.index_of_port(port) {
                    Some(owner) if self.nodes[owner].is_running() => {}
                    _ => {
                        return Err(format!(
                            "node {i} routes slots {start}-{end} to port {port}, which is not running"
                        ));
                    }
                }
            }
            if next != u32::from(CLUSTER_SLOTS) {
                return Err(format!("node {i}: slots from {next} not served: {slots:?}"));
            }
            match &reference {
                None => reference = Some((i, slots)),
                Some((first, map)) if *map != slots => {
                    return Err(format!(
                        "nodes {first} and {i} disagree on the slot map: {map:?} vs {slots:?}"
                    ));
                }
                Some(_) => {}
            }

            let lines = cluster_nodes(node)?;
            if all_known && lines.len() != self.nodes.len() {
                return Err(format!(
                    "node {i} knows {} of {} nodes",
                    lines.len(),
                    self.nodes.len()
                ));
            }
            for line in &lines {
                if !running_ids.contains_key(line.id.as_str()) {
                    continue;
                }
                let bad = ["fail", "fail?", "handshake", "noaddr"];
                if line.flags.iter().any(|f| bad.contains(&f.as_str())) || line.link != "connected"
                {
                    return Err(format!(
                        "node {i} sees port {} as {:?}, link {}",
                        line.port, line.flags, line.link
                    ));
                }
            }

            if role(node)? == "slave" {
                replica_link_up(node)?;
            }
            views.push((i, lines));
        }
        // Gossip spreads role changes: every node must see every running node in the role (and
        // with the master) that node reports for itself.
        let own: HashMap<&str, (bool, Option<&str>)> = views
            .iter()
            .flat_map(|(_, lines)| lines.iter().filter(|l| l.has_flag("myself")))
            .map(|l| (l.id.as_str(), (l.has_flag("master"), l.master.as_deref())))
            .collect();
        for (i, lines) in &views {
            for line in lines {
                let seen = (line.has_flag("master"), line.master.as_deref());
                match own.get(line.id.as_str()) {
                    Some(&truth) if truth != seen => {
                        return Err(format!(
                            "node {i} sees port {} as (master: {}, replica of {:?}), it says {truth:?}",
                            line.port, seen.0, seen.1
                        ));
                    }
                    _ => {}
                }
            }
        }
        let (_, map) = reference.ok_or("no cluster node is running")?;
        for &(_, _, port) in &map {
            let owner = &self.nodes[self.index_of_port(port).expect("checked above")];
            let owner_role = role(owner)?;
            if owner_role != "master" {
                return Err(format!(
                    "port {port} serves slots but says role {owner_role}"
                ));
            }
        }
        Ok(map)
    }

    /// Indices of the running nodes.
    fn running(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].is_running())
    }

    /// `ROLE` of every running node.
    fn roles(&self) -> Result<Vec<String>, String> {
        self.running().map(|i| role(&self.nodes[i])).collect()
    }

    /// Waits (at most 30 s) until the cluster has settled: every running node reports
    /// `cluster_state:ok` and the same complete slot map served by running masters, sees every
    /// running node as healthy and in the role that node reports for itself, and every running
    /// replica's link is up. Use it after
    /// restarting a node.
    ///
    /// # Panics
    /// If the cluster does not settle in time.
    pub fn wait_until_stable(&self) {
        wait_for("cluster stable", READY_TIMEOUT, || {
            self.probe_stable(false).map(drop)
        });
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

    /// The slot map (first slot, last slot, master port), as a running node sees it.
    fn slot_map(&self) -> Vec<SlotRange> {
        let asked = self.any_running();
        cluster_slots(&self.nodes[asked])
            .unwrap_or_else(|e| panic!("CLUSTER SLOTS on node {asked} failed: {e}"))
    }

    /// The index of the master serving `slot`, as a running node sees it.
    ///
    /// # Panics
    /// If no node serves the slot, or the slot map names an unknown port.
    pub fn master_index_for_slot(&self, slot: u16) -> usize {
        let map = self.slot_map();
        let port = map
            .iter()
            .find(|&&(start, end, _)| (start..=end).contains(&slot))
            .map(|&(_, _, port)| port)
            .unwrap_or_else(|| panic!("no master serves slot {slot}: {map:?}"));
        self.index_of_port(port)
            .unwrap_or_else(|| panic!("slot {slot} is served by unknown port {port}"))
    }

    /// The index of the master serving `key`'s slot ([`key_slot`]).
    pub fn master_index_for_key(&self, key: &str) -> usize {
        self.master_index_for_slot(key_slot(key))
    }

    /// The master serving `key`'s slot ([`key_slot`]).
    pub fn master_for_key(&self, key: &str) -> &RedisServer {
        &self.nodes[self.master_index_for_key(key)]
    }

    /// All keys matching `pattern` on the current masters (by `SCAN`).
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        self.masters()
            .into_iter()
            .flat_map(|m| m.keys(pattern))
            .collect()
    }

    /// Kills node `index` with `SIGKILL`. For a master, remembers its slots and replicas for
    /// [`wait_for_failover`](RedisCluster::wait_for_failover).
    pub fn kill_node(&mut self, index: usize) {
        if self.nodes[index].is_running() && self.master_indices().contains(&index) {
            let slots = self.slots_of(index);
            let replicas = self.replicas_of(index);
            self.killed.insert(index, KilledMaster { slots, replicas });
        }
        self.nodes[index].kill();
    }

    /// The slot ranges the slot map routes to node `index` (by its own port or its proxy's).
    fn slots_of(&self, index: usize) -> Vec<(u16, u16)> {
        self.slot_map()
            .into_iter()
            .filter(|&(_, _, p)| self.index_of_port(p) == Some(index))
            .map(|(start, end, _)| (start, end))
            .collect()
    }

    /// Kills the master serving `key` with `SIGKILL` and returns its index.
    pub fn kill_master_of(&mut self, key: &str) -> usize {
        let index = self.master_index_for_key(key);
        self.kill_node(index);
        index
    }

    /// Waits (at most 45 s) until a replica of the master `killed` (by
    /// [`kill_node`](RedisCluster::kill_node) or [`kill_master_of`](RedisCluster::kill_master_of))
    /// has taken over its slots, says `role:master`, and the cluster has settled (as
    /// [`wait_until_stable`](RedisCluster::wait_until_stable)); returns the new master's index.
    ///
    /// # Panics
    /// If that does not happen in time, if `killed` served no slots, or if the slots went to a
    /// node that was not its replica.
    pub fn wait_for_failover(&self, killed: usize) -> usize {
        let record = match self.killed.get(&killed) {
            Some(record) => record.clone(),
            // Killed another way: the survivors still route its slots to it until the failover.
            None => KilledMaster {
                slots: self.slots_of(killed),
                replicas: self.replicas_of(killed),
            },
        };
        assert!(
            !record.slots.is_empty(),
            "node {killed} served no slots when it was killed: nothing to fail over"
        );
        assert!(
            !self.nodes[killed].is_running(),
            "node {killed} still runs: kill it before waiting for its failover"
        );
        let promoted = wait_for(
            &format!(
                "failover of node {killed} (port {}) to one of its replicas {:?}",
                self.nodes[killed].port(),
                record.replicas
            ),
            FAILOVER_TIMEOUT,
            || {
                // Every running node agrees on this map, and its owners are running masters.
                let map = self.probe_stable(false)?;
                let slot = record.slots[0].0;
                let (_, _, port) = map
                    .iter()
                    .find(|&&(start, end, _)| (start..=end).contains(&slot))
                    .copied()
                    .ok_or_else(|| format!("slot {slot} unserved"))?;
                Ok(self
                    .index_of_port(port)
                    .expect("probe_stable checked the port"))
            },
        );
        assert!(
            record.replicas.contains(&promoted),
            "node {killed}'s slots went to node {promoted}, not to one of its replicas {:?}",
            record.replicas
        );
        for &(start, _) in &record.slots {
            assert_eq!(
                self.master_index_for_slot(start),
                promoted,
                "node {killed}'s slots were split after failover"
            );
        }
        promoted
    }

    /// Waits (at most 45 s) until a running node other than `old` says `role:master` and
    /// routes `slot` to itself in its own `CLUSTER SLOTS`: the takeover of a master that is
    /// frozen or cut off (and still runs, so [`wait_for_failover`](Self::wait_for_failover)
    /// does not apply). `old` is never asked (a frozen node would not answer). Returns the new
    /// master's index.
    ///
    /// # Panics
    /// If no node takes the slot over in time.
    pub fn wait_for_takeover(&self, slot: u16, old: usize) -> usize {
        wait_for(
            &format!("takeover of slot {slot} from node {old}"),
            FAILOVER_TIMEOUT,
            || self.probe_takeover(slot, old),
        )
    }

    /// One look for [`wait_for_takeover`](Self::wait_for_takeover): the node other than `old`
    /// that says `role:master` and routes `slot` to itself, if there is one now.
    pub fn taken_over(&self, slot: u16, old: usize) -> Option<usize> {
        self.probe_takeover(slot, old).ok()
    }

    fn probe_takeover(&self, slot: u16, old: usize) -> Result<usize, String> {
        let mut seen = Vec::new();
        for i in self.running().filter(|&i| i != old) {
            let node = &self.nodes[i];
            let Ok(now) = role(node) else { continue };
            if now != "master" {
                continue;
            }
            let Ok(map) = cluster_slots(node) else {
                continue;
            };
            let owner = (map.iter())
                .find(|&&(start, end, _)| (start..=end).contains(&slot))
                .and_then(|&(_, _, port)| self.index_of_port(port));
            if owner == Some(i) {
                return Ok(i);
            }
            seen.push(format!("node {i} routes it to {owner:?}"));
        }
        Err(seen.join("; "))
    }

    /// Moves `slot` (and its keys) from its current master to master `to`, the way
    /// `redis-cli --cluster reshard` does: [`begin_slot_migration`](Self::begin_slot_migration)
    /// then [`finish_slot_migration`](Self::finish_slot_migration). Afterwards everyone answers
    /// `MOVED` for the slot.
    ///
    /// # Panics
    /// If `to` is not a master, already owns the slot, or a step is refused.
    pub fn migrate_slot(&self, slot: u16, to: usize) {
        let from = self.begin_slot_migration(slot, to);
        self.finish_slot_migration(slot, from, to);
    }

    /// First half of a slot migration: `SETSLOT IMPORTING` on `to`, `SETSLOT MIGRATING` on the
    /// current owner, and `MIGRATE` of every key now in the slot. The slot still belongs to the
    /// source, which answers `ASK` for keys it no longer has (new keys included). Returns the
    /// source's index.
    ///
    /// # Panics
    /// If `to` already owns the slot or a step is refused.
    pub fn begin_slot_migration(&self, slot: u16, to: usize) -> usize {
        let from = self.master_index_for_slot(slot);
        assert_ne!(from, to, "node {to} already serves slot {slot}");
        let (src, dst) = (&self.nodes[from], &self.nodes[to]);
        let slot_arg = slot.to_string();
        expect_ok(
            dst,
            &[
                "CLUSTER",
                "SETSLOT",
                &slot_arg,
                "IMPORTING",
                &self.ids[from],
            ],
        );
        expect_ok(
            src,
            &["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &self.ids[to]],
        );
        move_keys(src, dst, slot);
        from
    }

    /// Second half of a slot migration: moves keys written to the source meanwhile, then
    /// `SETSLOT NODE` on every master; waits (at most 30 s) until the cluster agrees that `to`
    /// owns the slot.
    ///
    /// # Panics
    /// If a step is refused or the cluster does not settle.
    pub fn finish_slot_migration(&self, slot: u16, from: usize, to: usize) {
        let slot_arg = slot.to_string();
        let (src, dst) = (&self.nodes[from], &self.nodes[to]);
        move_keys(src, dst, slot);
        for &m in &self.master_indices() {
            expect_ok(
                &self.nodes[m],
                &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &self.ids[to]],
            );
        }
        wait_for(
            &format!("slot {slot} served by node {to}"),
            READY_TIMEOUT,
            || {
                let owner = self.master_index_for_slot(slot);
                if owner == to {
                    Ok(())
                } else {
                    Err(format!("still served by node {owner}"))
                }
            },
        );
        self.wait_until_stable();
    }

    /// Graceful failover: `CLUSTER FAILOVER` on replica `replica`, which takes over its master's
    /// slots once it has caught up; waits (at most 30 s) until it says `role:master` and the
    /// cluster has settled (its old master now replicating from it).
    ///
    /// # Panics
    /// If `replica` is not a replica, the command is refused, or the failover does not finish.
    pub fn failover_manual(&self, replica: usize) {
        let node = &self.nodes[replica];
        let now = role(node).unwrap_or_else(|e| panic!("ROLE of node {replica} failed: {e}"));
        assert_eq!(now, "slave", "node {replica} is not a replica");
        let reply = node.cmd(&["CLUSTER", "FAILOVER"]);
        assert_eq!(
            reply,
            Resp::Simple("OK".into()),
            "CLUSTER FAILOVER on node {replica} was refused"
        );
        wait_for(
            &format!("manual failover to node {replica}"),
            READY_TIMEOUT,
            || {
                let now = role(node)?;
                if now != "master" {
                    return Err(format!("node {replica} still says role {now}"));
                }
                self.probe_stable(false).map(drop)
            },
        );
    }
}

/// `MIGRATE`s every key of `slot` from `src` to `dst`, 100 at a time.
fn move_keys(src: &RedisServer, dst: &RedisServer, slot: u16) {
    let slot_arg = slot.to_string();
    let port = dst.port().to_string();
    loop {
        let keys: Vec<String> = src
            .cmd(&["CLUSTER", "GETKEYSINSLOT", &slot_arg, "100"])
            .items()
            .iter()
            .filter_map(|k| k.text().map(str::to_owned))
            .collect();
        if keys.is_empty() {
            return;
        }
        let mut args = vec![
            "MIGRATE",
            "127.0.0.1",
            port.as_str(),
            "",
            "0",
            "5000",
            "KEYS",
        ];
        args.extend(keys.iter().map(String::as_str));
        expect_ok(src, &args);
    }
}
