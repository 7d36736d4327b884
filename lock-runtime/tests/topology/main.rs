//! Deployments of more than one server: Redis Cluster (feature `cluster`), Sentinel (feature
//! `sentinel`), writes acknowledged by a replica, and RedLock over five standalone servers.
//! Each module was a test binary of its own; each starts its own servers.

#[path = "../common/mod.rs"]
mod common;

mod cluster;
mod redlock;
mod replica_ack;
mod sentinel;
