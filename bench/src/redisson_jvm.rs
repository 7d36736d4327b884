//! Redisson's `RLock` and its `RFencedLock` in a JVM, in the same scenarios as the Rust locks:
//! the `Bench` class of the interop driver (`interop/redisson`, built with Maven by
//! `lock_tests::redisson`) runs the workload in the protocol of [`crate::process_peer`], with
//! `RLock` by default and with `RFencedLock` (every grant through `lockAndGetToken`, a fencing
//! token each time) under `-Dlockinterop.bench.lock=fenced`. Needs `java` and `mvn`
//! (`scripts/bench.sh` installs them where missing); without them the rows are left out.

use lock_tests::redisson::{REDISSON_4, classpath, try_build};

use crate::process_peer::ProcessPeer;

/// The name of `RLock`'s rows.
pub(crate) const NAME: &str = "redisson (JVM)";
/// The name of `RFencedLock`'s rows: the peer of our fenced grant ([`crate::impls::FENCED`]).
pub(crate) const FENCED_NAME: &str = "redisson RFencedLock (JVM)";

/// Builds (or finds) the driver with the newest Redisson 4.x: `RLock`'s peer, then
/// `RFencedLock`'s; none, with the reason on stderr, when it cannot.
pub(crate) fn find() -> Vec<ProcessPeer> {
    match try_build(REDISSON_4) {
        Ok(dir) => [(NAME, "lock"), (FENCED_NAME, "fenced")]
            .into_iter()
            .map(|(name, lock)| {
                ProcessPeer::new(
                    name,
                    "java",
                    vec![
                        format!("-Dlockinterop.bench.lock={lock}"),
                        "-cp".into(),
                        classpath(&dir),
                        "lockinterop.Bench".into(),
                    ],
                )
            })
            .collect(),
        Err(e) => {
            eprintln!("bench: Redisson's rows are left out: {e}");
            Vec::new()
        }
    }
}
