//! Slot migration between masters: at once, or begun and finished in two steps.

use super::*;

impl RedisCluster {
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
}

/// `MIGRATE`s every key of `slot` from `src` to `dst`, 100 at a time.
pub(super) fn move_keys(src: &RedisServer, dst: &RedisServer, slot: u16) {
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
