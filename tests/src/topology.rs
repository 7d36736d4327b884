//! Scale-out topologies of real processes on loopback: a Redis Cluster ([`RedisCluster`]), a
//! master with one replica ([`ReplicatedPair`]) and a Sentinel-monitored pair
//! ([`SentinelGroup`]).
//!
//! Every process is a [`RedisServer`] (or, for sentinels, a [`Sentinel`]) with its own temp dir,
//! killed when its owner is dropped, also while a test unwinds from a panic. Every wait is
//! bounded and panics with the state it last saw.
//!
//! Sentinels run as `redis-server <sentinel.conf> --sentinel` (no separate `redis-sentinel`
//! binary is needed); the cluster is created with `redis-cli --cluster create`. The binaries are
//! `redis-server` and `redis-cli` from `PATH`, or `$REDIS_SERVER_BIN` and `$REDIS_CLI_BIN`.

use std::collections::HashMap;
use std::io::{self, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::{NEXT_DIR, RedisServer, Resp, await_pong, encode, free_port, read_reply, send};

/// `cluster-node-timeout` of every [`RedisCluster`] node, in milliseconds: a killed master is
/// replaced by its replica a few of these after its death.
pub const CLUSTER_NODE_TIMEOUT_MS: u64 = 1500;

/// The number of hash slots of a Redis Cluster.
pub const CLUSTER_SLOTS: u16 = 16384;

/// The name under which a [`SentinelGroup`]'s sentinels monitor the master.
pub const SENTINEL_MASTER_NAME: &str = "mymaster";

/// `sentinel down-after-milliseconds` of a [`SentinelGroup`].
pub const SENTINEL_DOWN_AFTER_MS: u64 = 1000;

/// `sentinel failover-timeout` of a [`SentinelGroup`], in milliseconds.
pub const SENTINEL_FAILOVER_TIMEOUT_MS: u64 = 5000;

/// How long a topology may take to come up (or settle again after a restart).
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a failover may take, from the kill to a settled topology.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(45);

/// Polls `probe` until it returns `Ok`, for at most `timeout`.
///
/// # Panics
/// With `what` and the last error `probe` returned, when the time is up.
fn wait_for<T>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match probe() {
            Ok(value) => return value,
            Err(last) if Instant::now() >= deadline => {
                panic!("{what}: not reached within {timeout:?}; last seen: {last}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

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

/// Sends one command, turning I/O errors and error replies into a message naming the server.
fn ask(server: &RedisServer, args: &[&str]) -> Result<Resp, String> {
    match server.try_cmd(args) {
        Ok(Resp::Error(e)) => Err(format!("port {}: {args:?} -> -{e}", server.port())),
        Ok(reply) => Ok(reply),
        Err(e) => Err(format!("port {}: {args:?} failed: {e}", server.port())),
    }
}

/// The `field:value` lines of an `INFO`-style text reply.
fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// `INFO <section>` as a map.
fn info(server: &RedisServer, section: &str) -> Result<HashMap<String, String>, String> {
    let reply = ask(server, &["INFO", section])?;
    Ok(parse_info(reply.text().unwrap_or_default()))
}

/// The first element of `ROLE`: `master`, `slave` (or `sentinel`).
fn role(server: &RedisServer) -> Result<String, String> {
    let reply = ask(server, &["ROLE"])?;
    reply
        .items()
        .first()
        .and_then(Resp::text)
        .map(str::to_string)
        .ok_or_else(|| format!("port {}: unexpected ROLE reply {reply:?}", server.port()))
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

/// Why a replica's replication link is not up yet, or `Ok` when it is.
fn replica_link_up(replica: &RedisServer) -> Result<(), String> {
    let info = info(replica, "replication")?;
    match info.get("master_link_status").map(String::as_str) {
        Some("up") => Ok(()),
        other => Err(format!(
            "replica on port {}: master_link_status {other:?}",
            replica.port()
        )),
    }
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
        let timeout = CLUSTER_NODE_TIMEOUT_MS.to_string();
        let nodes: Vec<RedisServer> = (0..count)
            .map(|_| {
                // The default bus port (port + 10000) overflows for ephemeral ports above
                // 55535: give every node an explicit free one.
                let bus_port = free_port().to_string();
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    &timeout,
                    "--cluster-port",
                    &bus_port,
                    "--cluster-replica-validity-factor",
                    "0",
                    "--cluster-allow-replica-migration",
                    "no",
                    "--repl-diskless-sync-delay",
                    "0",
                ])
            })
            .collect();

        let cli = std::env::var("REDIS_CLI_BIN").unwrap_or_else(|_| "redis-cli".into());
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let output = Command::new(&cli)
            .args(["--cluster", "create"])
            .args(&addrs)
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
    pub fn index_of_port(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.port() == port)
    }

    /// `redis://127.0.0.1:<port>` of every node, by index.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
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
            let port = self.nodes[index].port();
            let slots = self
                .slot_map()
                .into_iter()
                .filter(|&(_, _, p)| p == port)
                .map(|(start, end, _)| (start, end))
                .collect();
            let replicas = self.replicas_of(index);
            self.killed.insert(index, KilledMaster { slots, replicas });
        }
        self.nodes[index].kill();
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
            None => {
                let port = self.nodes[killed].port();
                KilledMaster {
                    slots: self
                        .slot_map()
                        .into_iter()
                        .filter(|&(_, _, p)| p == port)
                        .map(|(start, end, _)| (start, end))
                        .collect(),
                    replicas: self.replicas_of(killed),
                }
            }
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

/// The value of `field` in an `INFO`-style reply.
fn info_field_of(reply: Resp, field: &str) -> Option<String> {
    parse_info(reply.text().unwrap_or_default()).remove(field)
}

/// A master and one replica (`--replicaof`), both [`RedisServer`]s with persistence off.
///
/// Full syncs start at once (`repl-diskless-sync-delay 0`). The replica is started with
/// `--replicaof`, so [`RedisServer::restart`] brings it back as a
/// replica of the same master.
#[derive(Debug)]
pub struct ReplicatedPair {
    master: RedisServer,
    replica: RedisServer,
}

impl ReplicatedPair {
    /// Starts the master, then the replica, and waits until they are in sync
    /// ([`wait_for_sync`](ReplicatedPair::wait_for_sync)).
    ///
    /// # Panics
    /// If a server cannot be started or replication is not up within 30 s.
    pub fn start() -> ReplicatedPair {
        // No 5 s wait for more replicas before a full sync (either may be master later).
        let no_delay = ["--repl-diskless-sync-delay", "0"];
        let master = RedisServer::start_with(&no_delay);
        let port = master.port().to_string();
        let replica = RedisServer::start_with(
            &[&no_delay[..], &["--replicaof", "127.0.0.1", &port]].concat(),
        );
        let pair = ReplicatedPair { master, replica };
        pair.wait_for_sync();
        pair
    }

    /// Waits (at most 30 s) until the master reports `connected_slaves:1` with the replica
    /// online, and the replica reports `master_link_status:up`.
    ///
    /// # Panics
    /// If that does not happen in time.
    pub fn wait_for_sync(&self) {
        wait_for(
            &format!(
                "replication from port {} to port {}",
                self.master.port(),
                self.replica.port()
            ),
            READY_TIMEOUT,
            || {
                let info = info(&self.master, "replication")?;
                let connected = info.get("connected_slaves").map(String::as_str);
                let online = info.get("slave0").is_some_and(|s| {
                    s.contains(&format!("port={},state=online", self.replica.port()))
                });
                if connected != Some("1") || !online {
                    return Err(format!(
                        "master: connected_slaves {connected:?}, slave0 {:?}",
                        info.get("slave0")
                    ));
                }
                replica_link_up(&self.replica)?;
                // Online is not yet acknowledging: right after a sync the first write can go
                // unacknowledged for a while. In sync means a write *and* its WAIT succeed.
                match write_and_wait(&self.master) {
                    Ok(1) => Ok(()),
                    Ok(n) => Err(format!("WAIT counted {n} replicas")),
                    Err(e) => Err(format!("write + WAIT failed: {e}")),
                }
            },
        );
    }

    /// The server started as master.
    pub fn master(&self) -> &RedisServer {
        &self.master
    }

    /// The server started as master, mutable.
    pub fn master_mut(&mut self) -> &mut RedisServer {
        &mut self.master
    }

    /// The server started as replica.
    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// The server started as replica, mutable (to `stop`, `restart`, …).
    pub fn replica_mut(&mut self) -> &mut RedisServer {
        &mut self.replica
    }

    /// The master's URL.
    pub fn master_url(&self) -> String {
        self.master.url()
    }

    /// The replica's URL.
    pub fn replica_url(&self) -> String {
        self.replica.url()
    }
}

/// A `redis-server --sentinel` process on a free loopback port with its own dir and config
/// file; killed on drop. It answers sentinel commands (and `PING`), not data commands.
#[derive(Debug)]
pub struct Sentinel {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Sentinel {
    /// Starts a sentinel monitoring `master_name` at `127.0.0.1:<master_port>` with `quorum`
    /// and the [`SentinelGroup`] timings, and waits until it answers `PING`.
    ///
    /// # Panics
    /// If it cannot be started.
    pub fn start(master_name: &str, master_port: u16, quorum: usize) -> Sentinel {
        let dir = std::env::temp_dir().join(format!(
            "lock-tests-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create a temp dir for a sentinel");
        let mut last_err = String::new();
        // As for RedisServer: the free port may be taken before the sentinel binds it.
        for _ in 0..5 {
            let mut sentinel = Sentinel {
                port: free_port(),
                dir: dir.clone(),
                child: None,
            };
            let conf = format!(
                "port {port}\n\
                 bind 127.0.0.1\n\
                 protected-mode no\n\
                 daemonize no\n\
                 loglevel warning\n\
                 dir {dir}\n\
                 sentinel monitor {master_name} 127.0.0.1 {master_port} {quorum}\n\
                 sentinel down-after-milliseconds {master_name} {SENTINEL_DOWN_AFTER_MS}\n\
                 sentinel failover-timeout {master_name} {SENTINEL_FAILOVER_TIMEOUT_MS}\n\
                 sentinel parallel-syncs {master_name} 1\n",
                port = sentinel.port,
                dir = dir.display(),
            );
            std::fs::write(sentinel.conf_path(), conf).expect("write sentinel.conf");
            match sentinel.spawn() {
                Ok(()) => return sentinel,
                Err(e) => last_err = e.to_string(),
            }
        }
        panic!("could not start redis-server --sentinel ({last_err}); set REDIS_SERVER_BIN?");
    }

    fn conf_path(&self) -> PathBuf {
        self.dir.join("sentinel.conf")
    }

    fn spawn(&mut self) -> io::Result<()> {
        let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(bin)
            .arg(self.conf_path())
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.child = Some(await_pong(child, "sentinel", || self.try_cmd(&["PING"]))?);
        Ok(())
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process runs (started and not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the sentinel with `SIGKILL`.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends one command on a fresh connection and returns the reply.
    ///
    /// # Panics
    /// If the sentinel cannot be reached or the reply cannot be read.
    pub fn cmd(&self, args: &[&str]) -> Resp {
        self.try_cmd(args)
            .unwrap_or_else(|e| panic!("sentinel command {args:?} failed: {e}"))
    }

    /// Like [`cmd`](Sentinel::cmd), but returns I/O errors.
    pub fn try_cmd(&self, args: &[&str]) -> io::Result<Resp> {
        send(self.port, None, args)
    }

    /// `SENTINEL MASTER <name>` as a map (`num-slaves`, `num-other-sentinels`, `flags`, …).
    pub fn master_state(&self, name: &str) -> io::Result<HashMap<String, String>> {
        match self.try_cmd(&["SENTINEL", "MASTER", name])? {
            Resp::Error(e) => Err(io::Error::other(format!("SENTINEL MASTER {name}: {e}"))),
            reply => Ok(reply
                .items()
                .chunks(2)
                .filter_map(|kv| match kv {
                    [k, v] => Some((k.text()?.to_string(), v.text()?.to_string())),
                    _ => None,
                })
                .collect()),
        }
    }

    /// The master's port per `SENTINEL GET-MASTER-ADDR-BY-NAME <name>`.
    pub fn master_port(&self, name: &str) -> io::Result<u16> {
        let reply = self.try_cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", name])?;
        reply
            .items()
            .get(1)
            .and_then(Resp::text)
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| io::Error::other(format!("GET-MASTER-ADDR-BY-NAME {name}: {reply:?}")))
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A [`ReplicatedPair`] monitored by sentinels under [`SENTINEL_MASTER_NAME`], with
/// `down-after-milliseconds` [`SENTINEL_DOWN_AFTER_MS`], `failover-timeout`
/// [`SENTINEL_FAILOVER_TIMEOUT_MS`] and a majority quorum.
#[derive(Debug)]
pub struct SentinelGroup {
    // Sentinels first: dropped before the servers, so they never react to the teardown.
    sentinels: Vec<Sentinel>,
    data: ReplicatedPair,
}

impl SentinelGroup {
    /// Starts a [`ReplicatedPair`] and `sentinels` sentinels (quorum `sentinels / 2 + 1`), and
    /// waits until every sentinel knows the master (not down), its replica and all other
    /// sentinels.
    ///
    /// # Panics
    /// If `sentinels` is 0, a process cannot be started, or the sentinels have not discovered
    /// each other within 30 s.
    pub fn start(sentinels: usize) -> SentinelGroup {
        assert!(sentinels > 0, "a SentinelGroup needs at least one sentinel");
        let data = ReplicatedPair::start();
        let quorum = sentinels / 2 + 1;
        let sentinels: Vec<Sentinel> = (0..sentinels)
            .map(|_| Sentinel::start(SENTINEL_MASTER_NAME, data.master().port(), quorum))
            .collect();
        let group = SentinelGroup { sentinels, data };
        let others = (group.sentinels.len() - 1).to_string();
        wait_for(
            "sentinels know the master, its replica and each other",
            READY_TIMEOUT,
            || {
                for (i, s) in group.sentinels.iter().enumerate() {
                    let state = s
                        .master_state(SENTINEL_MASTER_NAME)
                        .map_err(|e| format!("sentinel {i}: {e}"))?;
                    let get = |k: &str| state.get(k).map(String::as_str).unwrap_or("?");
                    let slaves: usize = get("num-slaves").parse().unwrap_or(0);
                    if get("flags") != "master"
                        || slaves < 1
                        || get("num-other-sentinels") != others
                    {
                        return Err(format!(
                            "sentinel {i} (port {}): flags {}, num-slaves {}, num-other-sentinels {}",
                            s.port(),
                            get("flags"),
                            get("num-slaves"),
                            get("num-other-sentinels")
                        ));
                    }
                }
                Ok(())
            },
        );
        group
    }

    /// The name the sentinels monitor the master under ([`SENTINEL_MASTER_NAME`]).
    pub fn master_name(&self) -> &str {
        SENTINEL_MASTER_NAME
    }

    /// `redis://127.0.0.1:<port>` of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Sentinel::url).collect()
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &[Sentinel] {
        &self.sentinels
    }

    /// Sentinel `index`, mutable (to `kill` it).
    pub fn sentinel_mut(&mut self, index: usize) -> &mut Sentinel {
        &mut self.sentinels[index]
    }

    /// The master's port according to the first running sentinel that answers
    /// `SENTINEL GET-MASTER-ADDR-BY-NAME`.
    ///
    /// # Panics
    /// If no sentinel answers.
    pub fn current_master_port(&self) -> u16 {
        let mut errors = Vec::new();
        for s in self.sentinels.iter().filter(|s| s.is_running()) {
            match s.master_port(SENTINEL_MASTER_NAME) {
                Ok(port) => return port,
                Err(e) => errors.push(format!("port {}: {e}", s.port())),
            }
        }
        panic!("no sentinel told the master's address: {errors:?}");
    }

    /// The data server the sentinels currently name as master.
    pub fn current_master(&self) -> &RedisServer {
        self.server(self.current_master_port())
    }

    /// The data servers: the one started as master, then the one started as replica.
    pub fn servers(&self) -> [&RedisServer; 2] {
        [self.data.master(), self.data.replica()]
    }

    /// The data server on `port`.
    ///
    /// # Panics
    /// If neither data server has that port.
    pub fn server(&self, port: u16) -> &RedisServer {
        self.servers()
            .into_iter()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no data server on port {port}"))
    }

    /// The data server on `port`, mutable.
    ///
    /// # Panics
    /// If neither data server has that port.
    pub fn server_mut(&mut self, port: u16) -> &mut RedisServer {
        if self.data.master().port() == port {
            self.data.master_mut()
        } else if self.data.replica().port() == port {
            self.data.replica_mut()
        } else {
            panic!("no data server on port {port}")
        }
    }

    /// The data servers as started.
    pub fn pair(&self) -> &ReplicatedPair {
        &self.data
    }

    /// The data servers as started, mutable.
    pub fn pair_mut(&mut self) -> &mut ReplicatedPair {
        &mut self.data
    }

    /// Kills the current master (per the sentinels) with `SIGKILL`; returns its port.
    pub fn kill_master(&mut self) -> u16 {
        let port = self.current_master_port();
        self.server_mut(port).kill();
        port
    }

    /// Waits (at most 45 s) until every running sentinel names the same master, other than
    /// `old_port`, and that server says `role:master`; returns its port.
    ///
    /// # Panics
    /// If that does not happen in time.
    pub fn wait_for_failover(&self, old_port: u16) -> u16 {
        wait_for(
            &format!("sentinel failover away from port {old_port}"),
            FAILOVER_TIMEOUT,
            || {
                let mut ports = Vec::new();
                for s in self.sentinels.iter().filter(|s| s.is_running()) {
                    ports.push(
                        s.master_port(SENTINEL_MASTER_NAME)
                            .map_err(|e| format!("sentinel on port {}: {e}", s.port()))?,
                    );
                }
                let &new = ports.first().ok_or("no sentinel is running")?;
                if new == old_port || ports.iter().any(|&p| p != new) {
                    return Err(format!("sentinels name master ports {ports:?}"));
                }
                let server = self
                    .servers()
                    .into_iter()
                    .find(|s| s.port() == new)
                    .ok_or_else(|| format!("sentinels name unknown port {new}"))?;
                let now = role(server)?;
                if now != "master" {
                    return Err(format!("port {new} is named master but says role {now}"));
                }
                Ok(new)
            },
        )
    }
}

/// `SET` then `WAIT 1 100` on one connection (so `WAIT` counts that write); returns the count.
fn write_and_wait(master: &RedisServer) -> io::Result<i64> {
    let stream = TcpStream::connect(("127.0.0.1", master.port()))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut request = encode(&["SET", "lock-tests:sync-probe", "1"]);
    request.extend(encode(&["WAIT", "1", "100"]));
    (&stream).write_all(&request)?;
    let mut reader = BufReader::new(&stream);
    read_reply(&mut reader)?;
    match read_reply(&mut reader)? {
        Resp::Int(n) => Ok(n),
        other => Err(io::Error::other(format!("WAIT replied {other:?}"))),
    }
}

/// Sends a command that must answer `+OK` (or `+NOKEY`, or an integer).
fn expect_ok(server: &RedisServer, args: &[&str]) {
    let reply = server.cmd(args);
    assert!(
        matches!(&reply, Resp::Simple(_) | Resp::Int(_)),
        "{args:?} on port {}: {reply:?}",
        server.port()
    );
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
