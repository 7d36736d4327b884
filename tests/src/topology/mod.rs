//! Scale-out topologies of real processes on loopback: a Redis Cluster ([`RedisCluster`]), a
//! master with one replica ([`ReplicatedPair`]), a Sentinel-monitored pair
//! ([`SentinelGroup`]), and Sentinel with two replicas and every link behind a proxy, for
//! partitions ([`PartitionedSentinel`]).
//!
//! Every process is a [`RedisServer`] (or, for sentinels, a [`Sentinel`]) with its own temp dir,
//! killed when its owner is dropped, also while a test unwinds from a panic. Every wait is
//! bounded and panics with the state it last saw.
//!
//! Sentinels run as `redis-server <sentinel.conf> --sentinel` (no separate `redis-sentinel`
//! binary is needed); the cluster is created with `redis-cli --cluster create`. The binaries are
//! `redis-server` and `redis-cli` from `PATH`, or `$REDIS_SERVER_BIN` and `$REDIS_CLI_BIN`.
//!
//! One file per deployment: [`cluster`](RedisCluster), [`replicated`](ReplicatedPair),
//! [`sentinel`](SentinelGroup) and [`partitioned`](PartitionedSentinel); this file holds what they share (bounded waits, one-command
//! probes, `INFO` parsing).

mod clock_skew;
mod cluster;
mod partitioned;
mod replicated;
mod sentinel;

pub use cluster::{CLUSTER_NODE_TIMEOUT_MS, CLUSTER_SLOTS, RedisCluster, key_slot};
pub use partitioned::{CLIENT_SOURCE, PARTITIONED_MASTER_NAME, PartitionedSentinel, Peer};
pub use replicated::ReplicatedPair;
pub use sentinel::{
    SENTINEL_DOWN_AFTER_MS, SENTINEL_FAILOVER_TIMEOUT_MS, SENTINEL_MASTER_NAME, Sentinel,
    SentinelGroup,
};

use std::collections::HashMap;
use std::io::{self, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::{RedisServer, Resp, encode, read_reply};

/// How long a topology may take to come up (or settle again after a restart).
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a failover may take, from the kill to a settled topology. A sentinel whose timer
/// was held up for more than 2 s (a starved process on a loaded machine) enters TILT mode and
/// takes no part in a failover for 30 s: a failover that meets that is late by those 30 s,
/// plus an election tried again (`failover-timeout` later), not broken. Seen in CI: every
/// sentinel still naming the old master 45 s into the first fault, while compilers ran.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(90);

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
/// The value of `field` in an `INFO`-style reply.
fn info_field_of(reply: Resp, field: &str) -> Option<String> {
    parse_info(reply.text().unwrap_or_default()).remove(field)
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
