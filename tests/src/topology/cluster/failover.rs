//! Masters killed, and their replicas taking over: automatic failovers and manual ones.

use super::*;

/// What was known about a cluster master when [`RedisCluster::kill_node`] killed it.
#[derive(Debug, Clone)]
pub(super) struct KilledMaster {
    pub(super) slots: Vec<(u16, u16)>,
    pub(super) replicas: Vec<usize>,
}

impl RedisCluster {
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
    pub(super) fn slots_of(&self, index: usize) -> Vec<(u16, u16)> {
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

    pub(super) fn probe_takeover(&self, slot: u16, old: usize) -> Result<usize, String> {
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
