//! Whether the cluster has settled: what every running node reports (`CLUSTER INFO`,
//! `CLUSTER SLOTS`, `CLUSTER NODES`, `ROLE`) checked for one agreed, healthy view.

use super::*;

/// `CLUSTER SLOTS` of one node, sorted by first slot.
pub(super) fn cluster_slots(node: &RedisServer) -> Result<Vec<SlotRange>, String> {
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
pub(super) struct NodeLine {
    pub(super) id: String,
    pub(super) port: u16,
    pub(super) flags: Vec<String>,
    /// The master's id, for a replica.
    pub(super) master: Option<String>,
    pub(super) link: String,
}

impl NodeLine {
    pub(super) fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

/// `CLUSTER NODES` of one node.
pub(super) fn cluster_nodes(node: &RedisServer) -> Result<Vec<NodeLine>, String> {
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

impl RedisCluster {
    /// Checks what every running node reports: `cluster_state:ok`; the same complete slot map,
    /// served only by running masters; no running node flagged failed or unconnected, and each
    /// in the role it reports for itself; and, on replicas, an up link to the master. With `all_known`, every node must know all nodes.
    /// Returns the agreed slot map.
    pub(super) fn probe_stable(&self, all_known: bool) -> Result<Vec<SlotRange>, String> {
        let running_ids: HashMap<&str, usize> =
            self.running().map(|i| (self.ids[i].as_str(), i)).collect();
        let mut reference: Option<(usize, Vec<SlotRange>)> = None;
        let mut views = Vec::new();
        for i in self.running() {
            let node = &self.nodes[i];
            let slots = self.probe_slots(i)?;
            match &reference {
                None => reference = Some((i, slots)),
                Some((first, map)) if *map != slots => {
                    return Err(format!(
                        "nodes {first} and {i} disagree on the slot map: {map:?} vs {slots:?}"
                    ));
                }
                Some(_) => {}
            }
            let lines = self.probe_peers(i, all_known, &running_ids)?;
            if role(node)? == "slave" {
                replica_link_up(node)?;
            }
            views.push((i, lines));
        }
        roles_agree(&views)?;
        let (_, map) = reference.ok_or("no cluster node is running")?;
        self.masters_serve(&map)?;
        Ok(map)
    }

    /// Node `i`'s `cluster_state` is ok, and its slot map is complete and served only by
    /// running nodes; returns that map.
    fn probe_slots(&self, i: usize) -> Result<Vec<SlotRange>, String> {
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
        Ok(slots)
    }

    /// Node `i` sees no running node failed or unconnected (and, with `all_known`, knows every
    /// node); returns its `CLUSTER NODES` lines.
    fn probe_peers(
        &self,
        i: usize,
        all_known: bool,
        running_ids: &HashMap<&str, usize>,
    ) -> Result<Vec<NodeLine>, String> {
        let lines = cluster_nodes(&self.nodes[i])?;
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
            if line.flags.iter().any(|f| bad.contains(&f.as_str())) || line.link != "connected" {
                return Err(format!(
                    "node {i} sees port {} as {:?}, link {}",
                    line.port, line.flags, line.link
                ));
            }
        }
        Ok(lines)
    }

    /// Every port that serves slots in `map` says it is a master.
    fn masters_serve(&self, map: &[SlotRange]) -> Result<(), String> {
        for &(_, _, port) in map {
            let owner = &self.nodes[self.index_of_port(port).expect("checked above")];
            let owner_role = role(owner)?;
            if owner_role != "master" {
                return Err(format!(
                    "port {port} serves slots but says role {owner_role}"
                ));
            }
        }
        Ok(())
    }

    /// Indices of the running nodes.
    pub(super) fn running(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].is_running())
    }

    /// `ROLE` of every running node.
    pub(super) fn roles(&self) -> Result<Vec<String>, String> {
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
}

/// Gossip spreads role changes: every node must see every running node in the role (and with
/// the master) that node reports for itself.
fn roles_agree(views: &[(usize, Vec<NodeLine>)]) -> Result<(), String> {
    let own: HashMap<&str, (bool, Option<&str>)> = views
        .iter()
        .flat_map(|(_, lines)| lines.iter().filter(|l| l.has_flag("myself")))
        .map(|l| (l.id.as_str(), (l.has_flag("master"), l.master.as_deref())))
        .collect();
    for (i, lines) in views {
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
    Ok(())
}
