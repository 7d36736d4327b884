//! A Java service with real Redisson, for the interoperability tests: the driver in
//! `interop/redisson` (Maven, Redisson from Maven Central) in a JVM of its own, scripted over
//! its stdin and stdout.
//!
//! The driver is built once per machine and Redisson version, into
//! `target/interop/redisson-<version>` (one build at a time, under a file lock, so parallel test
//! binaries share it). It needs `java` and `mvn` on `PATH` (`scripts/ensure-deps.sh java`
//! installs them) and Maven Central the first time.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The newest Redisson 3.x, the default of `interop/redisson/pom.xml`.
pub const REDISSON_3: &str = "3.52.0";
/// The newest Redisson 4.x.
pub const REDISSON_4: &str = "4.7.0";
/// Both pinned versions, for tests that run against each.
pub const REDISSON_VERSIONS: [&str; 2] = [REDISSON_3, REDISSON_4];

/// How long one driver command may take before the test fails.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// One JVM running the driver with one `RedissonClient`; killed on drop. Clones share it.
#[derive(Clone, Debug)]
pub struct Redisson {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    version: String,
    child: Mutex<Child>,
    stdin: Mutex<ChildStdin>,
    replies: Mutex<Replies>,
    arrived: Condvar,
    next_tag: AtomicU64,
}

#[derive(Debug, Default)]
struct Replies {
    by_tag: HashMap<u64, String>,
    /// The driver's stdout closed (it exited or was killed).
    closed: bool,
}

/// A command sent and not answered yet: [`Ticket::wait`] for its reply.
#[derive(Debug)]
#[must_use = "wait for the reply"]
pub struct Ticket {
    shared: Arc<Shared>,
    tag: u64,
    command: String,
}

impl Ticket {
    /// The reply without its tag (`ok 123`, `busy`, `err …`), blocking for at most a minute.
    ///
    /// # Panics
    /// If the driver does not answer in time or exits.
    pub fn wait(self) -> String {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        let mut replies = self.shared.replies.lock().unwrap();
        loop {
            if let Some(reply) = replies.by_tag.remove(&self.tag) {
                return reply;
            }
            assert!(
                !replies.closed,
                "the Redisson {} driver exited before answering `{}`",
                self.shared.version, self.command
            );
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the Redisson {} driver did not answer `{}` within {REPLY_TIMEOUT:?}",
                self.shared.version,
                self.command
            );
            replies = self.shared.arrived.wait_timeout(replies, left).unwrap().0;
        }
    }

    /// [`wait`](Ticket::wait) on a blocking thread, for async tests.
    pub async fn reply(self) -> String {
        tokio::task::spawn_blocking(move || self.wait())
            .await
            .expect("driver reply thread")
    }
}

impl Redisson {
    /// Starts a driver for one server (`redis://127.0.0.1:<port>`) with Redisson `version` and
    /// a watchdog timeout of `watchdog` (Redisson's default is 30 s; renewal every third).
    ///
    /// # Panics
    /// If the driver cannot be built or started.
    pub fn start(version: &str, url: &str, watchdog: Duration) -> Redisson {
        Redisson::spawn(version, &[url.to_owned()], watchdog)
    }

    /// Starts a driver for a Redis Cluster from its seed nodes (Redisson's default
    /// `shardedSubscriptionMode` AUTO: sharded pub/sub on Redis 7).
    ///
    /// # Panics
    /// If the driver cannot be built or started.
    pub fn start_cluster(version: &str, seeds: &[String], watchdog: Duration) -> Redisson {
        Redisson::spawn(
            version,
            &["--cluster".to_owned(), seeds.join(",")],
            watchdog,
        )
    }

    fn spawn(version: &str, target: &[String], watchdog: Duration) -> Redisson {
        let dir = build(version);
        let classpath = classpath(&dir);
        let mut child = Command::new("java")
            .args(["-XX:+UseSerialGC", "-Xss512k", "-cp", &classpath])
            .arg("lockinterop.Driver")
            .args(["--watchdog-ms", &watchdog.as_millis().to_string()])
            .args(target)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start java (scripts/ensure-deps.sh java installs it)");
        let stdin = child.stdin.take().expect("driver stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("driver stdout"));
        let mut first = String::new();
        stdout
            .read_line(&mut first)
            .expect("read the driver's first line");
        assert_eq!(
            first.trim(),
            "ready",
            "the Redisson {version} driver did not start"
        );
        let shared = Arc::new(Shared {
            version: version.to_owned(),
            child: Mutex::new(child),
            stdin: Mutex::new(stdin),
            replies: Mutex::new(Replies::default()),
            arrived: Condvar::new(),
            next_tag: AtomicU64::new(1),
        });
        let reader = shared.clone();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                let Some((tag, reply)) = line.split_once(' ') else {
                    continue;
                };
                let Ok(tag) = tag.parse() else { continue };
                reader
                    .replies
                    .lock()
                    .unwrap()
                    .by_tag
                    .insert(tag, reply.to_owned());
                reader.arrived.notify_all();
            }
            reader.replies.lock().unwrap().closed = true;
            reader.arrived.notify_all();
        });
        Redisson { shared }
    }

    /// The Redisson version this driver runs.
    pub fn version(&self) -> &str {
        &self.shared.version
    }

    /// Sends `command` (see the driver's docs: `lock W NAME LEASE_MS`, …) without waiting.
    ///
    /// # Panics
    /// If the driver's stdin is closed.
    pub fn send(&self, command: &str) -> Ticket {
        let tag = self.shared.next_tag.fetch_add(1, Ordering::Relaxed);
        let mut stdin = self.shared.stdin.lock().unwrap();
        writeln!(stdin, "{tag} {command}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("send `{command}` to the driver: {e}"));
        Ticket {
            shared: self.shared.clone(),
            tag,
            command: command.to_owned(),
        }
    }

    /// Sends `command` and waits for its reply.
    pub async fn call(&self, command: &str) -> String {
        self.send(command).reply().await
    }

    /// `RLock.lock()` by `worker` (a Java thread) with the watchdog; the `CLOCK_MONOTONIC`
    /// nanoseconds when it returned.
    pub async fn lock(&self, worker: &str, name: &str) -> u64 {
        ok_number(&self.call(&format!("lock {worker} {name} -1")).await)
    }

    /// `RLock.tryLock(wait, -1)` by `worker`: when it got the lock, or `None` when busy.
    pub async fn try_lock(&self, worker: &str, name: &str, wait: Duration) -> Option<u64> {
        let reply = self
            .call(&format!("trylock {worker} {name} {} -1", wait.as_millis()))
            .await;
        (reply != "busy").then(|| ok_number(&reply))
    }

    /// `RLock.unlock()` by `worker`: when it returned, or the Java exception's message.
    pub async fn unlock(&self, worker: &str, name: &str) -> Result<u64, String> {
        let reply = self.call(&format!("unlock {worker} {name}")).await;
        match reply.strip_prefix("err ") {
            Some(message) => Err(message.to_owned()),
            None => Ok(ok_number(&reply)),
        }
    }

    /// `RFencedLock.lockAndGetToken()` by `worker`: the fencing token.
    pub async fn fenced_lock(&self, worker: &str, name: &str) -> u64 {
        ok_number(&self.call(&format!("fenced {worker} {name} -1")).await)
    }

    /// `RFencedLock.unlock()` by `worker`.
    pub async fn fenced_unlock(&self, worker: &str, name: &str) {
        let reply = self.call(&format!("funlock {worker} {name}")).await;
        assert!(reply.starts_with("ok "), "{reply}");
    }

    /// `RLock.isHeldByCurrentThread()` on `worker`.
    pub async fn held(&self, worker: &str, name: &str) -> bool {
        ok_bool(&self.call(&format!("held {worker} {name}")).await)
    }

    /// `RLock.forceUnlock()`: whether a lock was deleted.
    pub async fn force_unlock(&self, name: &str) -> bool {
        ok_bool(&self.call(&format!("force {name}")).await)
    }

    /// `RLock.isLocked()`.
    pub async fn is_locked(&self, name: &str) -> bool {
        ok_bool(&self.call(&format!("locked {name}")).await)
    }

    /// Starts `rounds` rounds of lock, non-atomic `GET`/`SET` increment of `counter`, unlock on
    /// `worker`; the ticket's reply is `ok <rounds>` when they are done.
    pub fn contend(&self, worker: &str, name: &str, counter: &str, rounds: u32) -> Ticket {
        self.send(&format!("contend {worker} {name} {counter} {rounds}"))
    }

    /// Kills the JVM with `SIGKILL`: a Java holder that crashed (its watchdog stops renewing).
    pub fn kill9(&self) {
        let mut child = self.shared.child.lock().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|e| e.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn ok_number(reply: &str) -> u64 {
    reply
        .strip_prefix("ok ")
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("expected `ok <number>`, got `{reply}`"))
}

fn ok_bool(reply: &str) -> bool {
    match reply {
        "ok true" => true,
        "ok false" => false,
        _ => panic!("expected `ok true|false`, got `{reply}`"),
    }
}

/// The workspace root (this crate is `<root>/tests`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Builds the driver with Redisson `version` unless built already: its build directory (with
/// `classes/` and `dependency/`).
///
/// # Panics
/// If Maven fails (no `mvn`, no network on a first build, a compile error).
pub fn build(version: &str) -> PathBuf {
    try_build(version).unwrap_or_else(|e| panic!("{e}"))
}

/// [`build`], reporting a failure instead of panicking (for the benchmarks, which leave
/// Redisson's rows out without a JDK).
pub fn try_build(version: &str) -> Result<PathBuf, String> {
    let root = root();
    let interop = root.join("target").join("interop");
    std::fs::create_dir_all(&interop).map_err(|e| format!("create target/interop: {e}"))?;
    let dir = interop.join(format!("redisson-{version}"));
    let done = dir.join("built");
    // One build at a time across test processes; the others wait and reuse it.
    let lock = std::fs::File::create(interop.join(format!("redisson-{version}.lock")))
        .map_err(|e| format!("create the build lock file: {e}"))?;
    let _lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| format!("lock the driver build: {e}"))?;
    let pom = root.join("interop/redisson/pom.xml");
    let source = root.join("interop/redisson/src/main/java/lockinterop");
    if done.exists() && !newer_than(&source, &done) && !newer_than(&pom, &done) {
        return Ok(dir);
    }
    let output = Command::new("mvn")
        .args(["-q", "-B", "-f"])
        .arg(&pom)
        .arg(format!("-Dredisson.version={version}"))
        .arg(format!("-Dbuild.dir={}", dir.display()))
        .arg("compile")
        .output()
        .map_err(|e| format!("run mvn (scripts/ensure-deps.sh java installs it): {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "mvn compile of the Redisson {version} driver failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    std::fs::write(&done, version).map_err(|e| format!("mark the driver built: {e}"))?;
    Ok(dir)
}

/// The `java -cp` class path of a driver built into `dir` by [`build`].
pub fn classpath(dir: &Path) -> String {
    format!(
        "{}:{}/*",
        dir.join("classes").display(),
        dir.join("dependency").display()
    )
}

/// Whether `path` (a file, or any file in a directory) was modified after `than`.
fn newer_than(path: &Path, than: &Path) -> bool {
    let modified = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
    let Some(mark) = modified(than) else {
        return true;
    };
    let mut paths = vec![path.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(path) {
        paths.extend(entries.filter_map(|e| e.ok().map(|e| e.path())));
    }
    paths.iter().any(|p| modified(p).is_some_and(|m| m > mark))
}
