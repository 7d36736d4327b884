//! go-redsync/redsync v4's `Mutex` (one pool: go-redis v9), in the same scenarios as the Rust
//! locks: a Go program of its own (`bench/peers/redsync`, a module with its own `go.mod` and
//! `go.sum`, built by `scripts/bench.sh` with `go build` into `target/peers/redsync/`) runs the
//! workload in the protocol of [`crate::process_peer`]. Without Go the binary is not built and
//! the rows say so.
//!
//! Its lock is `SET NX` with the lease (10 s, as for every lock here) and its unlock a
//! compare-and-delete script (`EVALSHA`). Its retries are its defaults: 32 tries per `Lock()`, a
//! random 50 to 250 ms apart, and a try that finds the lock taken also sends the
//! compare-and-delete (in case its own `SET` had landed). The driver calls `Lock()` again when
//! it gives up after its 32 tries, and counts those.

use crate::process_peer::ProcessPeer;

/// The name of the rows.
pub(crate) const NAME: &str = "redsync";

/// Where `scripts/bench.sh` builds the driver.
const BIN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../target/peers/redsync/peer-redsync"
);

/// The driver, and the versions it was built with (`redsync v4.…, go-redis v9.…, go1.…`);
/// `None`, with the reason on stderr, when it is not built.
pub(crate) fn find() -> Option<(ProcessPeer, String)> {
    let version = std::process::Command::new(BIN)
        .arg("version")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned());
    match version {
        Some(version) => Some((ProcessPeer::new(NAME, BIN, Vec::new()), version)),
        None => {
            eprintln!(
                "bench: redsync's rows say \"not built\": no driver at {BIN} (scripts/bench.sh builds it with Go)"
            );
            None
        }
    }
}
