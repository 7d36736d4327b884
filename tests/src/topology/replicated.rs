//! A master with one replica.

use super::*;
use crate::RedisServer;

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
