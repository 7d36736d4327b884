//! Replica acknowledgement: `WAIT n timeout` after the writes that matter.
//!
//! Redis replicates asynchronously: a master that fails right after granting a lock may take the
//! grant with it, and the promoted replica hands the lock to someone else. With
//! [`LockClientBuilder::replica_ack`](crate::LockClientBuilder::replica_ack) every acquire,
//! renewal and release is followed, in the same pipeline on the same connection, by
//! `WAIT n timeout`, which returns how many replicas have the write.
//!
//! - **acquire**: fewer than `n` → the lock is released again at once and the acquire fails with
//!   [`LockError::ReplicaAck`](crate::LockError::ReplicaAck); nothing is held, no key is left.
//! - **renew**: fewer than `n` → the renewal does not count; the watchdog retries and declares
//!   the lock lost if no acknowledged renewal lands before the lease would run out.
//! - **release**: fewer than `n` → [`LockGuard::release`](crate::LockGuard::release) reports
//!   [`LockError::UnacknowledgedRelease`](crate::LockError::UnacknowledgedRelease), which is not
//!   a failed release (it is done on the master; a failover could bring the grant back until its
//!   lease ends, held by no one).
//!
//! `WAIT` narrows the window; it does not make replication synchronous (a replica may
//! acknowledge and still lose the write, and Redis does not roll a master back): see the crate
//! docs on topologies, and use fencing tokens where a double hold must not cause harm.

use std::time::Duration;

use redis::{ErrorKind, Pipeline, RedisError, Value};

use crate::backend::Acked;
use crate::error::Shortfall;

/// Require `replicas` acknowledgements within `timeout` after each lock write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaAck {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

impl ReplicaAck {
    /// Appends `WAIT replicas timeout` to a pipeline.
    pub(crate) fn append_wait(&self, pipe: &mut Pipeline) {
        pipe.add_command(self.wait_cmd());
    }

    /// `WAIT replicas timeout`.
    pub(crate) fn wait_cmd(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(self.replicas)
            .arg(self.timeout.as_millis().max(1) as u64);
        cmd
    }

    /// How many replicas a `WAIT` reply counts (0 for anything unexpected).
    pub(crate) fn acknowledged(reply: &Value) -> u32 {
        match reply {
            Value::Int(n) => u32::try_from(*n).unwrap_or(0),
            _ => 0,
        }
    }

    /// A write's `reply`, with how its acknowledgement fell short when `ack` is required
    /// (`acked`: the count of the `WAIT` that followed it; `None` without one).
    pub(crate) fn judged<T>(ack: Option<ReplicaAck>, reply: T, acked: Option<u32>) -> Acked<T> {
        let shortfall = ack.zip(acked).and_then(|(ack, n)| ack.shortfall(n));
        Acked { reply, shortfall }
    }

    /// How the `acknowledged` count falls short, if it does.
    pub(crate) fn shortfall(&self, acknowledged: u32) -> Option<Shortfall> {
        (acknowledged < self.replicas).then_some(Shortfall {
            required: self.replicas,
            acknowledged,
            timeout: self.timeout,
        })
    }

    /// An error unless the `WAIT` reply counts enough replicas (a cluster node's batch).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn check(&self, reply: Value) -> redis::RedisResult<u32> {
        let acked = ReplicaAck::acknowledged(&reply);
        if acked >= self.replicas {
            Ok(acked)
        } else {
            Err(RedisError::from((
                ErrorKind::Client,
                "not enough replicas acknowledged",
                format!("{acked} of {}", self.replicas),
            )))
        }
    }
}

/// One lock's renewal outcome: "gone" needs no acknowledgement; "renewed" counts only once
/// replicas have it (`None`: not confirmed, retry).
pub(crate) fn renewal(renewed: bool, acknowledged: bool) -> Option<bool> {
    if renewed {
        acknowledged.then_some(true)
    } else {
        Some(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_acknowledgements() {
        let ack = ReplicaAck {
            replicas: 2,
            timeout: Duration::from_millis(50),
        };
        assert_eq!(ack.check(Value::Int(2)).unwrap(), 2);
        assert!(ack.check(Value::Int(1)).is_err());
        assert!(ack.check(Value::Nil).is_err());
        let mut pipe = redis::pipe();
        ack.append_wait(&mut pipe);
        assert_eq!(pipe.cmd_iter().count(), 1);
    }
}
