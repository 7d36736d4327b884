//! Redisson's `RLock` in a JVM, in the same scenarios as the Rust locks: the `Bench` class of
//! the interop driver (`interop/redisson`, built with Maven by `lock_tests::redisson`) runs the
//! workload in the protocol of [`crate::process_peer`]. Needs `java` and `mvn`
//! (`scripts/bench.sh` installs them where missing); without them the rows are left out.

use lock_tests::redisson::{REDISSON_4, classpath, try_build};

use crate::process_peer::ProcessPeer;

/// The name of the rows.
pub(crate) const NAME: &str = "redisson (JVM)";

/// Builds (or finds) the driver with the newest Redisson 4.x; `None`, with the reason on
/// stderr, when it cannot.
pub(crate) fn find() -> Option<ProcessPeer> {
    match try_build(REDISSON_4) {
        Ok(dir) => Some(ProcessPeer::new(
            NAME,
            "java",
            vec!["-cp".into(), classpath(&dir), "lockinterop.Bench".into()],
        )),
        Err(e) => {
            eprintln!("bench: Redisson's rows are left out: {e}");
            None
        }
    }
}
