//! A data node whose wall clock is shifted: a `redis-server` started with a small preloaded
//! library (`clock_skew.c` beside this file, built once per test process with `cc`)
//! that shifts `CLOCK_REALTIME`, `gettimeofday` and `time` by a fixed number of microseconds.
//! Redis's `TIME` (so the fencing counter's clock floor) and its key expiry follow that clock;
//! its timers (monotonic) do not. Debian's `libfaketime` would be the usual tool, but it cannot
//! start Debian's `redis-server` (see the C file's comment).

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::RedisServer;

const SOURCE: &str = include_str!("clock_skew.c");

/// The shim, built on first use into this process's temp dir.
///
/// # Panics
/// If `cc` cannot build it.
fn shim() -> &'static PathBuf {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| {
        let dir = crate::process::ChildProcess::temp_dir("clock-skew shim");
        let source = dir.join("clock_skew.c");
        let library = dir.join("libclockskew.so");
        std::fs::write(&source, SOURCE).expect("write the clock-skew shim's source");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let status = Command::new(&cc)
            .args(["-O2", "-shared", "-fPIC", "-o"])
            .arg(&library)
            .arg(&source)
            .status()
            .unwrap_or_else(|e| panic!("run {cc} to build the clock-skew shim: {e}"));
        assert!(status.success(), "{cc} could not build the clock-skew shim");
        library
    })
}

impl RedisServer {
    /// Stops the server and starts it again on the same port and with the same arguments,
    /// empty, with its wall clock `skew_us` microseconds off this machine's (negative: behind).
    /// [`restart`](RedisServer::restart) starts it again with the machine's clock.
    ///
    /// # Panics
    /// If the shim cannot be built or the server does not start within 10 s.
    pub fn restart_with_clock(&mut self, skew_us: i64) {
        let shim = shim();
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn_with_clock(shim, skew_us) {
                Ok(()) => return,
                // The port may linger for a moment after the old process died.
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("could not restart redis-server with a skewed clock: {e}"),
            }
        }
    }

    /// [`spawn`](RedisServer::spawn)'s command, with the shim preloaded.
    fn spawn_with_clock(&mut self, shim: &Path, skew_us: i64) -> io::Result<()> {
        let skew = skew_us.to_string();
        self.spawn_with_env(&[
            ("LD_PRELOAD", shim.as_os_str()),
            ("SKEW_US", std::ffi::OsStr::new(&skew)),
        ])
    }

    /// This server's wall clock minus the machine's, in microseconds (`TIME`; within the
    /// round trip).
    pub fn clock_offset_us(&self) -> i64 {
        let now_us = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as i64)
        };
        let before = now_us();
        let reply = self.cmd(&["TIME"]);
        let after = now_us();
        let items = reply.items();
        let field = |i: usize| {
            (items.get(i))
                .and_then(|t| t.text())
                .and_then(|t| t.parse::<i64>().ok())
                .unwrap_or(0)
        };
        field(0) * 1_000_000 + field(1) - (before + after) / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_restarted_with_a_skewed_clock_reports_that_clock_and_expires_by_it() {
        let mut server = RedisServer::start();
        assert!(server.clock_offset_us().abs() < 1_000_000);
        server.restart_with_clock(-7_000_000);
        let offset = server.clock_offset_us();
        assert!((-7_500_000..-6_500_000).contains(&offset), "{offset}");
        // Key expiry follows it: an absolute expiry 3 s from the machine's now is 10 s away by
        // the server's clock.
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis()
            + 3_000;
        server.cmd(&["SET", "k", "v", "PXAT", &at.to_string()]);
        let ttl: i64 = server.cmd(&["PTTL", "k"]).int().expect("a TTL");
        assert!((9_000..=10_000).contains(&ttl), "{ttl}");
        server.restart();
        assert!(server.clock_offset_us().abs() < 1_000_000);
    }
}
