//! One child process on a loopback port with a temp dir of its own: what a [`RedisServer`] and
//! a [`Sentinel`](crate::topology::Sentinel) are made of.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(doc)]
use crate::RedisServer;

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// A process listening on `127.0.0.1:<port>`, killed (and its dir removed) when dropped, also
/// while a test unwinds from a panic.
#[derive(Debug)]
pub struct ChildProcess {
    pub(crate) port: u16,
    pub(crate) dir: PathBuf,
    pub(crate) child: Option<Child>,
}

impl ChildProcess {
    /// A new, empty temp dir for one process.
    pub(crate) fn temp_dir(what: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "lock-tests-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("create a temp dir for {what}: {e}"));
        dir
    }

    /// Not started yet: [`child`](ChildProcess::child) is set once it answers.
    pub(crate) fn new(port: u16, dir: PathBuf) -> ChildProcess {
        ChildProcess {
            port,
            dir,
            child: None,
        }
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process runs (started and not stopped or killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The process's own directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Kills the process with `SIGKILL`: no goodbye to its clients.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            // A frozen process ignores SIGTERM but not SIGKILL; thaw it anyway for tidiness.
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(pid.to_string())
                .status();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
