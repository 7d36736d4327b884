//! The state a client's clones, handles and background tasks share: [`Inner`] (the backend,
//! the demultiplexer, the watchdog, the releaser, the counters), its [`Config`], and the
//! cache of the lock names in use.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
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
    /// The keys of the names in use, shared by every handle on the same name.
    pub(super) names: NameCache,
    pub(super) next_acquisition: AtomicU64,
    pub(super) tasks: Mutex<Vec<AbortHandle>>,
}

/// The keys of the lock names that some handle, guard or waiter still uses, so that the
/// handles on one name share one copy instead of building their own. A thousand tasks waiting
/// for one lock each make a handle; its keys (four strings) were a sixth of a waiter's memory.
///
/// Entries are weak: a name nobody uses any more is dropped with its last handle, and its
/// entry is swept out once dead entries could make up half of the map.
pub(super) struct NameCache {
    hasher: RandomState,
    map: Mutex<NameMap>,
}

struct NameMap {
    /// By the hash of the name. Two names with one hash take turns in the entry (the one found
    /// is checked), so a collision costs a rebuild, never a wrong lock.
    entries: HashMap<u64, Weak<LockNames>>,
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

    /// The keys of `name` used as `family`: shared with the handles that use them already,
    /// else built by `build` (and not kept if invalid); and whether the name is in use in this
    /// client as the other of a mutex and a fair lock (see [`skip_queue`]).
    fn get(
        &self,
        name: &str,
        family: Family,
        build: impl FnOnce() -> Result<LockNames, LockError>,
    ) -> Result<(Arc<LockNames>, bool), LockError> {
        let hash = self.hasher.hash_one(name);
        let mut map = sync::lock(&self.map);
        let mut skips_queue = false;
        if let Some(names) = map.entries.get(&hash).and_then(Weak::upgrade)
            && names.name == name
        {
            if names.family() == family {
                return Ok((names, false));
            }
            skips_queue = skip_queue(family, names.family());
        }
        let names = Arc::new(build()?);
        if skips_queue {
            // The entry keeps the family the name was first used as, for as long as a handle,
            // guard or waiter of it lives: the handles of the other one stay refused.
            return Ok((names, true));
        }
        map.entries.insert(hash, Arc::downgrade(&names));
        if map.entries.len() >= map.sweep_at {
            map.entries.retain(|_, names| names.strong_count() > 0);
            // Sweeping again only after as many insertions as live entries keeps it
            // amortised constant time.
            map.sweep_at = (map.entries.len() * 2).max(Self::MIN_SWEEP);
        }
        Ok((names, false))
    }
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
    /// Writes that queue while one is in flight go out together (opt-in; one server and
    /// Sentinel, without replica acknowledgement).
    pub(crate) group_commit: bool,
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
