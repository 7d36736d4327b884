//! The state a client's clones, handles and background tasks share: [`Inner`] (the backend,
//! the demultiplexer, the watchdog, the releaser, the counters), its [`Config`], and the
//! cache of the lock names in use.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::AbortHandle;

use crate::LockError;
use crate::backend::Backend;
use crate::demux::Demux;
use crate::handoff::HandOffs;
use crate::keys::Family;
use crate::keys::Layout;
use crate::keys::LockNames;
use crate::releaser::Releaser;
use crate::stats::Counters;
use crate::sync;
use crate::topology::Topology;
use crate::topology::replica_ack::ReplicaAck;
use crate::watchdog::Watchdog;

pub(crate) struct Inner {
    /// The random id that prefixes every owner id of this client.
    pub(crate) id: Arc<str>,
    pub(crate) config: Config,
    /// Where the lock operations go.
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) demux: Demux,
    pub(crate) watchdog: Watchdog,
    pub(crate) releaser: Releaser,
    /// This client's tasks waiting for a lock, to hand a released lock to.
    pub(crate) handoffs: Arc<HandOffs>,
    pub(crate) counters: Arc<Counters>,
    /// The server, as it named itself when the client was built (`None` in memory, or when it
    /// would not say).
    pub(crate) server: Option<crate::ServerInfo>,
    /// The keys of the names in use, shared by every handle on the same name.
    pub(super) names: NameCache,
    pub(super) next_acquisition: AtomicU64,
    pub(super) tasks: Mutex<Vec<AbortHandle>>,
}

/// The keys of the lock names this client uses, so that the handles on one name share one copy
/// instead of building their own. A thousand tasks waiting for one lock each make a handle; its
/// keys (four strings) were a sixth of a waiter's memory. And a name locked again after its
/// last handle went (`locks.lock(name)` per request, the common way) reuses its keys instead of
/// formatting them again: five allocations of every lock and unlock.
///
/// Entries are shared: a name nobody uses any more stays until dead entries could make up half
/// of the map, and is swept out then (so the map stays within twice the names in use, plus
/// [`NameCache::MIN_SWEEP`]).
pub(super) struct NameCache {
    hasher: RandomState,
    map: Mutex<NameMap>,
}

struct NameMap {
    /// By the hash of the name. Two names with one hash take turns in the entry (the one found
    /// is checked), so a collision costs a rebuild, never a wrong lock.
    entries: HashMap<u64, Arc<LockNames>>,
    /// The size at which dead entries are swept out next.
    sweep_at: usize,
}

impl NameCache {
    /// Entries kept before the first sweep.
    const MIN_SWEEP: usize = 64;

    pub(super) fn new() -> NameCache {
        NameCache {
            hasher: RandomState::new(),
            map: Mutex::new(NameMap {
                entries: HashMap::new(),
                sweep_at: Self::MIN_SWEEP,
            }),
        }
    }

    /// The keys of `name` used as `family`: shared with the handles that use them already (or
    /// kept from earlier use), else built by `build` (and not kept if invalid); and whether the
    /// name is in use in this client as the other of a mutex and a fair lock (see
    /// [`skip_queue`]).
    fn get(
        &self,
        name: &str,
        family: Family,
        build: impl FnOnce() -> Result<LockNames, LockError>,
    ) -> Result<(Arc<LockNames>, bool), LockError> {
        let hash = self.hasher.hash_one(name);
        let mut map = sync::lock(&self.map);
        let mut skips_queue = false;
        if let Some(names) = map.entries.get(&hash)
            && names.name == name
        {
            if names.family() == family {
                return Ok((names.clone(), false));
            }
            // Used as another family: by a live handle, guard or waiter (not only the map)?
            skips_queue = in_use(names) && skip_queue(family, names.family());
        }
        let names = Arc::new(build()?);
        if skips_queue {
            // The entry keeps the family the name was first used as, for as long as a handle,
            // guard or waiter of it lives: the handles of the other one stay refused.
            return Ok((names, true));
        }
        map.entries.insert(hash, names.clone());
        if map.entries.len() >= map.sweep_at {
            map.entries.retain(|_, names| in_use(names));
            // Sweeping again only after as many insertions as live entries keeps it
            // amortised constant time.
            map.sweep_at = (map.entries.len() * 2).max(Self::MIN_SWEEP);
        }
        Ok((names, false))
    }
}

/// Whether a handle, guard or waiter holds these keys (besides the cache).
fn in_use(names: &Arc<LockNames>) -> bool {
    Arc::strong_count(names) > 1
}

/// Whether handles of one name used as `a` and as `b` would let plain acquisitions take a fair
/// lock ahead of its queue: a mutex and a fair lock share one hash, and only the fair lock
/// queues.
fn skip_queue(a: Family, b: Family) -> bool {
    matches!(
        (a, b),
        (Family::Mutex, Family::Fair) | (Family::Fair, Family::Mutex)
    )
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) prefix: String,
    /// Where locks live: this crate's keys or Redisson's.
    pub(crate) layout: Layout,
    pub(crate) watchdog_timeout: Duration,
    /// The shortest `lockWatchdogTimeout` of the Java services sharing Redisson read/write
    /// locks: how long a renewal of a Redisson read hold is sure to last.
    pub(crate) redisson_watchdog_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// How long the fencing counter is kept after its last grant; zero: for ever (Redisson's
    /// layout, whose token key Java services `INCR`).
    pub(crate) fence_retention: Duration,
    /// Local hand-overs of one lock in a row (0: off; always off with replica acknowledgement
    /// and with Redisson's layout).
    pub(crate) handoff_limit: u32,
    /// The most arguments one request may carry (see `LockClientBuilder::max_request_arguments`).
    pub(crate) max_request_arguments: usize,
    /// Every mutex is taken with its fencing token (else tokens on demand).
    pub(crate) fenced: bool,
    pub(crate) topology: Topology,
    pub(crate) replica_ack: Option<ReplicaAck>,
    /// How long an acquisition keeps retrying while a failing-over deployment is unavailable.
    pub(crate) failover_grace: Duration,
    /// The deployment's identity: set on the builder, or derived from the topology. Orders and
    /// deduplicates the members of a `MultiLock` that share a key.
    pub(crate) deployment_id: String,
}

impl Config {
    /// The scripts that publish unlock messages on this topology.
    pub(crate) fn publishing(&self) -> crate::script::Publishing {
        self.topology.publishing()
    }
}

impl Inner {
    /// The keys of `name` used as `family` under this client's prefix and layout, shared with
    /// every other handle on them; and whether a live handle of this client uses the name as a
    /// mutex while `family` is a fair lock or the other way round (acquisitions would skip the
    /// fair lock's queue: the new handle refuses to acquire).
    pub(crate) fn names(
        &self,
        name: &str,
        family: Family,
    ) -> Result<(Arc<LockNames>, bool), LockError> {
        let config = &self.config;
        self.names.get(name, family, || {
            config.layout.names(&config.prefix, name, family)
        })
    }

    pub(crate) fn next_owner(&self) -> (u64, String) {
        let n = self.next_acquisition.fetch_add(1, Ordering::Relaxed);
        // Sized up front (`format!` would grow it as it writes).
        let mut owner = String::with_capacity(self.id.len() + 21);
        owner.push_str(&self.id);
        owner.push(':');
        let _ = std::fmt::Write::write_fmt(&mut owner, format_args!("{n}"));
        (n, owner)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(name: &str, family: Family) -> Result<LockNames, LockError> {
        Ok(LockNames::new("t", name)?.with_family(family))
    }

    #[test]
    fn a_name_locked_again_after_its_last_handle_went_reuses_its_keys() {
        let cache = NameCache::new();
        let (first, _) = cache
            .get("a", Family::Mutex, || names("a", Family::Mutex))
            .unwrap();
        let kept = Arc::downgrade(&first);
        drop(first);
        let (again, skips) = cache
            .get("a", Family::Mutex, || panic!("built again"))
            .unwrap();
        assert!(!skips);
        assert!(Arc::ptr_eq(&again, &kept.upgrade().unwrap()));
    }

    #[test]
    fn names_nobody_uses_are_swept_out() {
        let cache = NameCache::new();
        let live: Vec<_> = (0..10)
            .map(|i| {
                let name = format!("live{i}");
                cache
                    .get(&name, Family::Mutex, || names(&name, Family::Mutex))
                    .unwrap()
                    .0
            })
            .collect();
        for i in 0..1000 {
            let name = format!("gone{i}");
            drop(
                cache
                    .get(&name, Family::Mutex, || names(&name, Family::Mutex))
                    .unwrap(),
            );
        }
        let map = sync::lock(&cache.map);
        assert!(
            map.entries.len() <= NameCache::MIN_SWEEP,
            "{}",
            map.entries.len()
        );
        for names in &live {
            let kept = map
                .entries
                .get(&cache.hasher.hash_one(&names.name))
                .unwrap();
            assert!(Arc::ptr_eq(kept, names), "a live name was swept out");
        }
    }

    #[test]
    fn only_a_live_handle_of_the_other_family_makes_a_mutex_skip_the_queue() {
        let cache = NameCache::new();
        let (fair, _) = cache
            .get("q", Family::Fair, || names("q", Family::Fair))
            .unwrap();
        let (_, skips) = cache
            .get("q", Family::Mutex, || names("q", Family::Mutex))
            .unwrap();
        assert!(skips, "a fair lock of the name is in use");
        drop(fair);
        let (mutex, skips) = cache
            .get("q", Family::Mutex, || names("q", Family::Mutex))
            .unwrap();
        assert!(!skips, "the fair lock's handles are gone");
        assert_eq!(mutex.family(), Family::Mutex);
    }
}
