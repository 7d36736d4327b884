//! Sentinel with every link behind a proxy: 1 master, 2 replicas, 3 sentinels, where each class
//! of link (client ↔ node, replica ↔ master, sentinel ↔ node) can be cut or stalled, one way or
//! both ways, on its own.
//!
//! Every data node sits behind a [`TcpProxy`], and that proxy's address is the only one anybody
//! uses: the replicas replicate from the master's proxy and announce their own proxy
//! (`replica-announce-ip/port`), the sentinels monitor the master's proxy (and find the
//! replicas' through it), the clients get the proxies' addresses from the sentinels. Each class
//! of peer connects from its own loopback address, so a proxy tells them apart by source:
//!
//! | peer | source address | how |
//! |---|---|---|
//! | lock clients, the test | `127.0.0.1` | the default |
//! | data node `i` (as a replica) | `127.0.1.<i + 1>` | `bind-source-addr` |
//! | sentinel `j` | `127.0.2.<j + 1>` | `bind-source-addr` (with `sentinel announce-ip 127.0.0.1`) |
//!
//! Measured on Redis 7.0 before building on it (and checked again by every
//! [`start`](PartitionedSentinel::start), which reads the sources the master's proxy saw): a
//! replica's replication link and a sentinel's links to the nodes come from their
//! `bind-source-addr`; a sentinel's first `bind` address is *not* used as the source of its
//! outgoing links (they come from `127.0.0.1` without `bind-source-addr`). A sentinel announces
//! the local address of its link to the master unless `sentinel announce-ip` says otherwise;
//! here it listens on `127.0.0.1` only, so it announces that. Sentinels reach each other
//! directly (their links are not cut here).

use std::net::{IpAddr, Ipv4Addr};

use super::sentinel::{Sentinel, tilts};
use super::*;
use crate::{RedisServer, TcpProxy};

/// The source address of the lock clients (and of the test's own commands through a proxy).
pub const CLIENT_SOURCE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));

/// The name the sentinels of a [`PartitionedSentinel`] monitor the master under.
pub const PARTITIONED_MASTER_NAME: &str = "cutmaster";

/// A class of peer of a data node, as its proxy tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// The lock clients (`127.0.0.1`).
    Clients,
    /// Data node `i` replicating from this one (`127.0.1.<i + 1>`).
    Node(usize),
    /// Every other data node.
    Replicas,
    /// Every sentinel (`127.0.2.<j + 1>`).
    Sentinels,
}

/// A data node and the proxy in front of it.
#[derive(Debug)]
struct Node {
    server: RedisServer,
    proxy: TcpProxy,
}

/// 1 master, 2 replicas and 3 sentinels (quorum 2), every data node behind a [`TcpProxy`]; see
/// the module docs. Timings are [`SentinelGroup`](super::SentinelGroup)'s.
#[derive(Debug)]
pub struct PartitionedSentinel {
    // Sentinels first: dropped before the servers, so they never react to the teardown.
    sentinels: Vec<Sentinel>,
    nodes: Vec<Node>,
}

const NODES: usize = 3;
const SENTINELS: usize = 3;

fn node_source(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 1, i as u8 + 1))
}

fn sentinel_source(j: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 2, j as u8 + 1))
}

impl PartitionedSentinel {
    /// Starts the nodes, their proxies and the sentinels, and waits until every sentinel knows
    /// the master (not down), both replicas and the other sentinels, and the master's proxy has
    /// seen both replicas and every sentinel connect from their own source address. Needs a
    /// multi-threaded Tokio runtime (the proxies run on it while this blocks).
    ///
    /// # Panics
    /// If a process cannot be started or the topology is not up within 30 s.
    pub async fn start() -> PartitionedSentinel {
        PartitionedSentinel::start_with(&[]).await
    }

    /// Like [`start`](PartitionedSentinel::start), with extra `redis-server` arguments for every
    /// data node (kept across restarts), e.g. `--min-replicas-to-write 1`.
    ///
    /// # Panics
    /// As [`start`](PartitionedSentinel::start).
    pub async fn start_with(args: &[&str]) -> PartitionedSentinel {
        let mut nodes = Vec::new();
        for i in 0..NODES {
            let source = node_source(i).to_string();
            let server = RedisServer::start_with(
                &[
                    &[
                        "--repl-diskless-sync-delay",
                        "0",
                        "--bind-source-addr",
                        &source,
                    ][..],
                    args,
                ]
                .concat(),
            );
            let proxy = TcpProxy::start(([127, 0, 0, 1], server.port()).into())
                .await
                .expect("proxy");
            nodes.push(Node { server, proxy });
        }
        let group = PartitionedSentinel {
            sentinels: Vec::new(),
            nodes,
        };
        for i in 0..NODES {
            group.announce(i);
        }
        let master_proxy = group.nodes[0].proxy.port().to_string();
        for node in &group.nodes[1..] {
            expect_ok(&node.server, &["REPLICAOF", "127.0.0.1", &master_proxy]);
        }
        let mut group = group;
        group.sentinels = (0..SENTINELS)
            .map(|j| {
                Sentinel::start_with(
                    PARTITIONED_MASTER_NAME,
                    group.nodes[0].proxy.port(),
                    SENTINELS / 2 + 1,
                    &format!(
                        "bind-source-addr {}\nsentinel announce-ip 127.0.0.1\n",
                        sentinel_source(j)
                    ),
                )
            })
            .collect();
        tokio::task::block_in_place(|| group.wait_until_known());
        group
    }

    /// Tells node `i` to announce its proxy as its address (again after a restart).
    fn announce(&self, i: usize) {
        let node = &self.nodes[i];
        expect_ok(
            &node.server,
            &["CONFIG", "SET", "replica-announce-ip", "127.0.0.1"],
        );
        expect_ok(
            &node.server,
            &[
                "CONFIG",
                "SET",
                "replica-announce-port",
                &node.proxy.port().to_string(),
            ],
        );
    }

    fn wait_until_known(&self) {
        let others = (SENTINELS - 1).to_string();
        wait_for(
            "sentinels know the master, both replicas and each other",
            READY_TIMEOUT,
            || {
                for (j, s) in self.sentinels.iter().enumerate() {
                    let state = s
                        .master_state(PARTITIONED_MASTER_NAME)
                        .map_err(|e| format!("sentinel {j}: {e}"))?;
                    let get = |k: &str| state.get(k).map(String::as_str).unwrap_or("?");
                    if get("flags") != "master"
                        || get("num-slaves") != "2"
                        || get("num-other-sentinels") != others
                    {
                        return Err(format!(
                            "sentinel {j}: flags {}, num-slaves {}, num-other-sentinels {}",
                            get("flags"),
                            get("num-slaves"),
                            get("num-other-sentinels")
                        ));
                    }
                }
                if !self.is_whole(0) {
                    return Err("the master has not both replicas online".into());
                }
                let seen = self.nodes[0].proxy.sources();
                let missing: Vec<IpAddr> = (1..NODES)
                    .map(node_source)
                    .chain((0..SENTINELS).map(sentinel_source))
                    .filter(|s| !seen.contains(s))
                    .collect();
                if !missing.is_empty() {
                    return Err(format!(
                        "the master's proxy saw no connection from {missing:?} (saw {seen:?})"
                    ));
                }
                Ok(())
            },
        );
    }

    /// The name the sentinels monitor the master under ([`PARTITIONED_MASTER_NAME`]).
    pub fn master_name(&self) -> &str {
        PARTITIONED_MASTER_NAME
    }

    /// `redis://127.0.0.1:<port>` of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(|s| s.url()).collect()
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &[Sentinel] {
        &self.sentinels
    }

    /// How many data nodes there are (3).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Never: there are always 3 data nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Data node `i` (reached directly, not through its proxy).
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i].server
    }

    /// The proxy in front of data node `i`.
    pub fn proxy(&self, i: usize) -> &TcpProxy {
        &self.nodes[i].proxy
    }

    /// The index of the data node whose proxy listens on `port`.
    pub fn node_at(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.proxy.port() == port)
    }

    /// The node the first running sentinel that answers names as master.
    ///
    /// # Panics
    /// If no sentinel answers with a known proxy.
    pub fn current_master(&self) -> usize {
        let mut errors = Vec::new();
        for s in self.sentinels.iter().filter(|s| s.is_running()) {
            match s.master_port(PARTITIONED_MASTER_NAME) {
                Ok(port) => match self.node_at(port) {
                    Some(i) => return i,
                    None => errors.push(format!("unknown port {port}")),
                },
                Err(e) => errors.push(format!("port {}: {e}", s.port())),
            }
        }
        panic!("no sentinel told the master's address: {errors:?}");
    }

    /// The source addresses of `peer`.
    pub fn sources(&self, peer: Peer) -> Vec<IpAddr> {
        match peer {
            Peer::Clients => vec![CLIENT_SOURCE],
            Peer::Node(i) => vec![node_source(i)],
            Peer::Replicas => (0..NODES).map(node_source).collect(),
            Peer::Sentinels => (0..SENTINELS).map(sentinel_source).collect(),
        }
    }

    /// Black-holes, at node `node`'s proxy, what `peers` send it (`to_node`) and what it answers
    /// them (`from_node`); both off lets them pass again (what was held goes through).
    pub fn stall(&self, node: usize, peers: &[Peer], to_node: bool, from_node: bool) {
        for &peer in peers {
            for source in self.sources(peer) {
                self.nodes[node]
                    .proxy
                    .set_black_hole_from(source, to_node, from_node);
            }
        }
    }

    /// Lifts every stall at node `node`'s proxy and closes the connections of `peers` there (as
    /// a partition that outlived TCP's patience ends: the peers reconnect).
    pub fn heal(&self, node: usize, peers: &[Peer]) {
        for &peer in peers {
            for source in self.sources(peer) {
                let proxy = &self.nodes[node].proxy;
                proxy.cut_from(source);
                proxy.set_black_hole_from(source, false, false);
            }
        }
    }

    /// Kills node `i` with `SIGKILL`.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].server.kill();
    }

    /// Starts node `i` again, empty, at its address, announcing its proxy again.
    pub fn restart(&mut self, i: usize) {
        self.nodes[i].server.restart();
        self.announce(i);
    }

    /// Starts node `i` again, empty, at its address, with its wall clock `skew_us`
    /// microseconds off this machine's (negative: behind; [`RedisServer::restart_with_clock`]),
    /// announcing its proxy again. [`restart`](PartitionedSentinel::restart) gives it the
    /// machine's clock back. It comes back a master of nothing: make it a replica with
    /// [`reattach`](PartitionedSentinel::reattach).
    pub fn restart_with_clock(&mut self, i: usize, skew_us: i64) {
        self.nodes[i].server.restart_with_clock(skew_us);
        self.announce(i);
    }

    /// Whether node `i` is a master with both other nodes online as its replicas.
    pub fn is_whole(&self, i: usize) -> bool {
        info(&self.nodes[i].server, "replication").is_ok_and(|info| {
            info.get("role").map(String::as_str) == Some("master")
                && (0..2).all(|k| {
                    info.get(&format!("slave{k}"))
                        .is_some_and(|s| s.contains("state=online"))
                })
        })
    }

    /// How many replicas node `i` reports online (0 if it is not a master or does not answer).
    pub fn online_replicas(&self, i: usize) -> usize {
        info(&self.nodes[i].server, "replication").map_or(0, |info| {
            if info.get("role").map(String::as_str) != Some("master") {
                return 0;
            }
            (0..NODES)
                .filter(|k| {
                    info.get(&format!("slave{k}"))
                        .is_some_and(|s| s.contains("state=online"))
                })
                .count()
        })
    }

    /// Makes node `i` a replica of node `master` (through its proxy), as an operator's
    /// `REPLICAOF` would; what the sentinels do themselves with a returning old master, about
    /// 8 s after they see it (they wait four hello periods before converting it). Errors are
    /// returned, not raised (the node may still be unreachable).
    pub fn reattach(&self, i: usize, master: usize) -> Result<(), String> {
        ask(
            &self.nodes[i].server,
            &[
                "REPLICAOF",
                "127.0.0.1",
                &self.nodes[master].proxy.port().to_string(),
            ],
        )
        .map(drop)
    }

    /// Sets node `i`'s `replica-priority` (0: the sentinels never promote it).
    pub fn set_replica_priority(&self, i: usize, priority: u32) {
        expect_ok(
            &self.nodes[i].server,
            &["CONFIG", "SET", "replica-priority", &priority.to_string()],
        );
    }

    /// `SENTINEL FAILOVER` (a failover without agreement, as an operator starts it) on the
    /// first sentinel that accepts it.
    pub fn manual_failover(&self) -> Result<(), String> {
        let mut errors = Vec::new();
        for s in self.sentinels.iter().filter(|s| s.is_running()) {
            match s.try_cmd(&["SENTINEL", "FAILOVER", PARTITIONED_MASTER_NAME]) {
                Ok(crate::Resp::Simple(_)) => return Ok(()),
                Ok(other) => errors.push(format!("port {}: {other:?}", s.port())),
                Err(e) => errors.push(format!("port {}: {e}", s.port())),
            }
        }
        Err(errors.join("; "))
    }

    /// Waits (at most 90 s, blocking) until every running sentinel names the same master, other
    /// than node `old`, and that node says `role:master`; returns its index.
    ///
    /// # Panics
    /// If that does not happen in time.
    pub fn wait_for_failover(&self, old: usize) -> usize {
        wait_for(
            &format!("sentinel failover away from node {old}"),
            FAILOVER_TIMEOUT,
            || {
                let mut named = Vec::new();
                for s in self.sentinels.iter().filter(|s| s.is_running()) {
                    let port = s
                        .master_port(PARTITIONED_MASTER_NAME)
                        .map_err(|e| format!("sentinel on port {}: {e}", s.port()))?;
                    named.push(
                        self.node_at(port)
                            .ok_or_else(|| format!("sentinels name unknown port {port}"))?,
                    );
                }
                let &new = named.first().ok_or("no sentinel is running")?;
                if new == old || named.iter().any(|&n| n != new) {
                    return Err(format!(
                        "sentinels name nodes {named:?}{}",
                        tilts(&self.sentinels)
                    ));
                }
                let now = role(&self.nodes[new].server)?;
                if now != "master" {
                    return Err(format!("node {new} is named master but says role {now}"));
                }
                Ok(new)
            },
        )
    }

    /// One line per node: its role, link and replicas (for messages when a round goes wrong).
    pub fn describe(&self) -> String {
        (0..NODES)
            .map(|i| {
                let info = info(&self.nodes[i].server, "replication").unwrap_or_default();
                let mut keys: Vec<_> = info
                    .iter()
                    .filter(|(k, _)| {
                        k.starts_with("role")
                            || k.starts_with("master_link")
                            || k.starts_with("master_port")
                            || k.starts_with("slave")
                    })
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                keys.sort();
                format!(
                    "node {i} (proxy {}): {}",
                    self.nodes[i].proxy.port(),
                    keys.join(" ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}
