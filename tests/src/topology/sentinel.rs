//! Sentinel processes, and a replicated pair monitored by them.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::*;
use crate::{ChildProcess, RedisServer, Resp, await_pong, free_port, send};

/// The name under which a [`SentinelGroup`]'s sentinels monitor the master.
pub const SENTINEL_MASTER_NAME: &str = "mymaster";

/// `sentinel down-after-milliseconds` of a [`SentinelGroup`].
pub const SENTINEL_DOWN_AFTER_MS: u64 = 1000;

/// `sentinel failover-timeout` of a [`SentinelGroup`], in milliseconds.
pub const SENTINEL_FAILOVER_TIMEOUT_MS: u64 = 5000;

/// A `redis-server --sentinel` process on a free loopback port with its own dir and config
/// file; killed on drop. It answers sentinel commands (and `PING`), not data commands.
#[derive(Debug)]
pub struct Sentinel {
    process: ChildProcess,
}

impl std::ops::Deref for Sentinel {
    type Target = ChildProcess;

    /// `url()`, `port()`, `pid()`, `is_running()`, `kill()` and `dir()` of the process.
    fn deref(&self) -> &ChildProcess {
        &self.process
    }
}

impl std::ops::DerefMut for Sentinel {
    fn deref_mut(&mut self) -> &mut ChildProcess {
        &mut self.process
    }
}

impl Sentinel {
    /// Starts a sentinel monitoring `master_name` at `127.0.0.1:<master_port>` with `quorum`
    /// and the [`SentinelGroup`] timings, and waits until it answers `PING`.
    ///
    /// # Panics
    /// If it cannot be started.
    pub fn start(master_name: &str, master_port: u16, quorum: usize) -> Sentinel {
        Sentinel::start_with(master_name, master_port, quorum, "")
    }

    /// Like [`start`](Sentinel::start), with `extra` appended to its config file (for example
    /// [`TlsRedisServer::tls_client_conf`](crate::TlsRedisServer::tls_client_conf), to monitor a
    /// master's TLS port).
    ///
    /// # Panics
    /// If it cannot be started.
    pub fn start_with(master_name: &str, master_port: u16, quorum: usize, extra: &str) -> Sentinel {
        let dir = ChildProcess::temp_dir("a sentinel");
        let mut last_err = String::new();
        // As for RedisServer: the free port may be taken before the sentinel binds it.
        for _ in 0..5 {
            let mut sentinel = Sentinel {
                process: ChildProcess::new(free_port(), dir.clone()),
            };
            let conf = format!(
                "port {port}\n\
                 bind 127.0.0.1\n\
                 protected-mode no\n\
                 daemonize no\n\
                 loglevel warning\n\
                 dir {dir}\n\
                 sentinel monitor {master_name} 127.0.0.1 {master_port} {quorum}\n\
                 sentinel down-after-milliseconds {master_name} {SENTINEL_DOWN_AFTER_MS}\n\
                 sentinel failover-timeout {master_name} {SENTINEL_FAILOVER_TIMEOUT_MS}\n\
                 sentinel parallel-syncs {master_name} 1\n\
                 {extra}",
                port = sentinel.port(),
                dir = dir.display(),
            );
            std::fs::write(sentinel.conf_path(), conf).expect("write sentinel.conf");
            match sentinel.spawn() {
                Ok(()) => return sentinel,
                Err(e) => last_err = e.to_string(),
            }
        }
        panic!("could not start redis-server --sentinel ({last_err}); set REDIS_SERVER_BIN?");
    }

    fn conf_path(&self) -> PathBuf {
        self.process.dir.join("sentinel.conf")
    }

    fn spawn(&mut self) -> io::Result<()> {
        let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(bin)
            .arg(self.conf_path())
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.process.child = Some(await_pong(child, "sentinel", |args| self.try_cmd(args))?);
        Ok(())
    }

    /// Sends one command on a fresh connection and returns the reply.
    ///
    /// # Panics
    /// If the sentinel cannot be reached or the reply cannot be read.
    pub fn cmd(&self, args: &[&str]) -> Resp {
        self.try_cmd(args)
            .unwrap_or_else(|e| panic!("sentinel command {args:?} failed: {e}"))
    }

    /// Like [`cmd`](Sentinel::cmd), but returns I/O errors.
    pub fn try_cmd(&self, args: &[&str]) -> io::Result<Resp> {
        send(self.process.port, None, args)
    }

    /// `SENTINEL MASTER <name>` as a map (`num-slaves`, `num-other-sentinels`, `flags`, …).
    pub fn master_state(&self, name: &str) -> io::Result<HashMap<String, String>> {
        match self.try_cmd(&["SENTINEL", "MASTER", name])? {
            Resp::Error(e) => Err(io::Error::other(format!("SENTINEL MASTER {name}: {e}"))),
            reply => Ok(reply
                .items()
                .chunks(2)
                .filter_map(|kv| match kv {
                    [k, v] => Some((k.text()?.to_string(), v.text()?.to_string())),
                    _ => None,
                })
                .collect()),
        }
    }

    /// Since when (seconds) this sentinel is in TILT mode (`INFO sentinel`), if it is: it then
    /// watches but takes no part in a failover, for 30 s after its timer was held up for more
    /// than 2 s.
    pub fn tilt(&self) -> io::Result<Option<u64>> {
        let reply = self.try_cmd(&["INFO", "sentinel"])?;
        let text = reply
            .text()
            .ok_or_else(|| io::Error::other(format!("INFO sentinel: {reply:?}")))?;
        let info = parse_info(text);
        Ok(match info.get("sentinel_tilt").map(String::as_str) {
            Some("1") => Some(
                info.get("sentinel_tilt_since_seconds")
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0),
            ),
            _ => None,
        })
    }

    /// The master's port per `SENTINEL GET-MASTER-ADDR-BY-NAME <name>`.
    pub fn master_port(&self, name: &str) -> io::Result<u16> {
        let reply = self.try_cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", name])?;
        reply
            .items()
            .get(1)
            .and_then(Resp::text)
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| io::Error::other(format!("GET-MASTER-ADDR-BY-NAME {name}: {reply:?}")))
    }
}

/// A [`ReplicatedPair`] monitored by sentinels under [`SENTINEL_MASTER_NAME`], with
/// `down-after-milliseconds` [`SENTINEL_DOWN_AFTER_MS`], `failover-timeout`
/// [`SENTINEL_FAILOVER_TIMEOUT_MS`] and a majority quorum.
#[derive(Debug)]
pub struct SentinelGroup {
    // Sentinels first: dropped before the servers, so they never react to the teardown.
    sentinels: Vec<Sentinel>,
    data: ReplicatedPair,
}

impl SentinelGroup {
    /// Starts a [`ReplicatedPair`] and `sentinels` sentinels (quorum `sentinels / 2 + 1`), and
    /// waits until every sentinel knows the master (not down), its replica and all other
    /// sentinels.
    ///
    /// # Panics
    /// If `sentinels` is 0, a process cannot be started, or the sentinels have not discovered
    /// each other within 30 s.
    pub fn start(sentinels: usize) -> SentinelGroup {
        assert!(sentinels > 0, "a SentinelGroup needs at least one sentinel");
        let data = ReplicatedPair::start();
        let quorum = sentinels / 2 + 1;
        let sentinels: Vec<Sentinel> = (0..sentinels)
            .map(|_| Sentinel::start(SENTINEL_MASTER_NAME, data.master().port(), quorum))
            .collect();
        let group = SentinelGroup { sentinels, data };
        let others = (group.sentinels.len() - 1).to_string();
        wait_for(
            "sentinels know the master, its replica and each other",
            READY_TIMEOUT,
            || {
                for (i, s) in group.sentinels.iter().enumerate() {
                    let state = s
                        .master_state(SENTINEL_MASTER_NAME)
                        .map_err(|e| format!("sentinel {i}: {e}"))?;
                    let get = |k: &str| state.get(k).map(String::as_str).unwrap_or("?");
                    let slaves: usize = get("num-slaves").parse().unwrap_or(0);
                    if get("flags") != "master"
                        || slaves < 1
                        || get("num-other-sentinels") != others
                    {
                        return Err(format!(
                            "sentinel {i} (port {}): flags {}, num-slaves {}, num-other-sentinels {}",
                            s.port(),
                            get("flags"),
                            get("num-slaves"),
                            get("num-other-sentinels")
                        ));
                    }
                }
                Ok(())
            },
        );
        group
    }

    /// The name the sentinels monitor the master under ([`SENTINEL_MASTER_NAME`]).
    pub fn master_name(&self) -> &str {
        SENTINEL_MASTER_NAME
    }

    /// `redis://127.0.0.1:<port>` of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(|s| s.url()).collect()
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &[Sentinel] {
        &self.sentinels
    }

    /// Sentinel `index`, mutable (to `kill` it).
    pub fn sentinel_mut(&mut self, index: usize) -> &mut Sentinel {
        &mut self.sentinels[index]
    }

    /// The master's port according to the first running sentinel that answers
    /// `SENTINEL GET-MASTER-ADDR-BY-NAME`.
    ///
    /// # Panics
    /// If no sentinel answers.
    pub fn current_master_port(&self) -> u16 {
        let mut errors = Vec::new();
        for s in self.sentinels.iter().filter(|s| s.is_running()) {
            match s.master_port(SENTINEL_MASTER_NAME) {
                Ok(port) => return port,
                Err(e) => errors.push(format!("port {}: {e}", s.port())),
            }
        }
        panic!("no sentinel told the master's address: {errors:?}");
    }

    /// The data server the sentinels currently name as master.
    pub fn current_master(&self) -> &RedisServer {
        self.server(self.current_master_port())
    }

    /// The data servers: the one started as master, then the one started as replica.
    pub fn servers(&self) -> [&RedisServer; 2] {
        [self.data.master(), self.data.replica()]
    }

    /// The data server on `port`.
    ///
    /// # Panics
    /// If neither data server has that port.
    pub fn server(&self, port: u16) -> &RedisServer {
        self.servers()
            .into_iter()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no data server on port {port}"))
    }

    /// The data server on `port`, mutable.
    ///
    /// # Panics
    /// If neither data server has that port.
    pub fn server_mut(&mut self, port: u16) -> &mut RedisServer {
        if self.data.master().port() == port {
            self.data.master_mut()
        } else if self.data.replica().port() == port {
            self.data.replica_mut()
        } else {
            panic!("no data server on port {port}")
        }
    }

    /// The data servers as started.
    pub fn pair(&self) -> &ReplicatedPair {
        &self.data
    }

    /// The data servers as started, mutable.
    pub fn pair_mut(&mut self) -> &mut ReplicatedPair {
        &mut self.data
    }

    /// Kills the current master (per the sentinels) with `SIGKILL`; returns its port.
    pub fn kill_master(&mut self) -> u16 {
        let port = self.current_master_port();
        self.server_mut(port).kill();
        port
    }

    /// What each sentinel names as master, which sentinels are in TILT mode, and each data
    /// server's role (for messages when a test goes wrong).
    pub fn describe(&self) -> String {
        let named: Vec<String> = self
            .sentinels
            .iter()
            .filter(|s| s.is_running())
            .map(|s| match s.master_port(SENTINEL_MASTER_NAME) {
                Ok(port) => port.to_string(),
                Err(e) => format!("({e})"),
            })
            .collect();
        let roles: Vec<String> = self
            .servers()
            .into_iter()
            .map(|s| {
                let role = role(s).unwrap_or_else(|e| format!("({e})"));
                format!("port {}: {role}", s.port())
            })
            .collect();
        format!(
            "sentinels name master ports {named:?}{}; {}",
            tilts(&self.sentinels),
            roles.join(", ")
        )
    }

    /// Waits (at most 90 s) until every running sentinel names the same master, other than
    /// `old_port`, and that server says `role:master`; returns its port.
    ///
    /// # Panics
    /// If that does not happen in time.
    pub fn wait_for_failover(&self, old_port: u16) -> u16 {
        wait_for(
            &format!("sentinel failover away from port {old_port}"),
            FAILOVER_TIMEOUT,
            || {
                let mut ports = Vec::new();
                for s in self.sentinels.iter().filter(|s| s.is_running()) {
                    ports.push(
                        s.master_port(SENTINEL_MASTER_NAME)
                            .map_err(|e| format!("sentinel on port {}: {e}", s.port()))?,
                    );
                }
                let &new = ports.first().ok_or("no sentinel is running")?;
                if new == old_port || ports.iter().any(|&p| p != new) {
                    return Err(format!(
                        "sentinels name master ports {ports:?}{}",
                        tilts(&self.sentinels)
                    ));
                }
                let server = self
                    .servers()
                    .into_iter()
                    .find(|s| s.port() == new)
                    .ok_or_else(|| format!("sentinels name unknown port {new}"))?;
                let now = role(server)?;
                if now != "master" {
                    return Err(format!("port {new} is named master but says role {now}"));
                }
                Ok(new)
            },
        )
    }
}

/// `"; in TILT: sentinel <port> for <n> s, …"` for the sentinels in TILT mode (nothing when none
/// is, or none answers): why a failover can be late, for a wait's message.
pub(super) fn tilts(sentinels: &[Sentinel]) -> String {
    let tilted: Vec<String> = sentinels
        .iter()
        .filter(|s| s.is_running())
        .filter_map(|s| Some((s.port(), s.tilt().ok()??)))
        .map(|(port, since)| format!("sentinel {port} for {since} s"))
        .collect();
    if tilted.is_empty() {
        String::new()
    } else {
        format!("; in TILT: {}", tilted.join(", "))
    }
}
