//! Test support: real `redis-server` processes on free loopback ports.
//!
//! Every test starts its own server with [`RedisServer::start`]; nothing assumes a server on
//! 6379. The server can be stopped, killed (`SIGKILL`), frozen (`SIGSTOP`/`SIGCONT`), paused
//! (`CLIENT PAUSE`) and restarted on the same port, and [`RedisServer::cmd`] sends raw commands
//! over a plain TCP connection, independent of the client under test.
//!
//! The binary is `redis-server` from `PATH`, or `$REDIS_SERVER_BIN`.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub mod chaos;
mod client;
pub mod failover;
pub mod family;
mod postgres;
mod process;
mod proxy;
pub mod redisson;
mod tls;
pub mod topology;

pub use client::{client, client_with, eventually, granted, local_redis, loss_reason, until_info};
pub use postgres::PostgresServer;
pub use process::ChildProcess;
pub use proxy::{Peers, TcpProxy};
pub use redisson::Redisson;
pub use tls::TlsRedisServer;

/// Nanoseconds on the system-wide monotonic clock (`CLOCK_MONOTONIC`), comparable across
/// processes on one machine.
pub fn mono_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available on Linux");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// A reply of the Redis protocol, as read by [`RedisServer::cmd`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resp {
    /// `+OK` and other simple strings.
    Simple(String),
    /// `-ERR …`.
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$…`; `None` for a nil reply.
    Bulk(Option<String>),
    /// `*…`; `None` for a nil array.
    Array(Option<Vec<Resp>>),
}

impl Resp {
    /// The integer, for `:n` replies.
    pub fn int(&self) -> Option<i64> {
        match self {
            Resp::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// The text of a simple or bulk string.
    pub fn text(&self) -> Option<&str> {
        match self {
            Resp::Simple(s) | Resp::Bulk(Some(s)) => Some(s),
            _ => None,
        }
    }

    /// The elements of an array (empty for anything else).
    pub fn items(&self) -> &[Resp] {
        match self {
            Resp::Array(Some(items)) => items,
            _ => &[],
        }
    }
}

/// A `redis-server` child process on a free loopback port, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    process: ChildProcess,
    args: Vec<String>,
    /// From `--requirepass`: [`cmd`](RedisServer::cmd) authenticates with it.
    password: Option<String>,
    /// The server binary, when not `$REDIS_SERVER_BIN` or `redis-server`
    /// ([`try_start_binary`](RedisServer::try_start_binary)).
    bin: Option<std::ffi::OsString>,
}

impl std::ops::Deref for RedisServer {
    type Target = ChildProcess;

    /// `url()`, `port()`, `pid()`, `is_running()`, `kill()` and `dir()` of the process.
    fn deref(&self) -> &ChildProcess {
        &self.process
    }
}

impl std::ops::DerefMut for RedisServer {
    fn deref_mut(&mut self) -> &mut ChildProcess {
        &mut self.process
    }
}

impl RedisServer {
    /// Starts a server with persistence off on a free port and waits until it answers `PING`.
    ///
    /// # Panics
    /// If `redis-server` cannot be started (the README's test command installs it).
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// An argument of [`start_with`](RedisServer::start_with) that stands for another free port
    /// (a cluster node's bus port), chosen afresh with the server's own port on every try.
    pub const FREE_PORT: &'static str = "{free port}";

    /// Like [`start`](RedisServer::start), with extra `redis-server` arguments
    /// (e.g. `["--maxmemory", "10mb"]`; [`FREE_PORT`](RedisServer::FREE_PORT) for another free
    /// port).
    pub fn start_with(args: &[&str]) -> RedisServer {
        RedisServer::try_start(None, args).unwrap_or_else(|last_err| {
            panic!(
                "could not start redis-server ({last_err}); install it (Debian: apt-get install -y redis-server) or set REDIS_SERVER_BIN"
            )
        })
    }

    /// Like [`start_with`](RedisServer::start_with), with another server binary (a newer server
    /// of the compatibility cache, for the bench); the last error when it cannot be started.
    pub fn try_start_binary(
        bin: impl AsRef<std::ffi::OsStr>,
        args: &[&str],
    ) -> Result<RedisServer, String> {
        RedisServer::try_start(Some(bin.as_ref().to_owned()), args)
    }

    fn try_start(bin: Option<std::ffi::OsString>, args: &[&str]) -> Result<RedisServer, String> {
        let mut last_err = String::new();
        // A free port can be taken by someone else between our probe and the server's bind:
        // retry with new ones, each in a directory of its own (a cluster node killed on a
        // failed try may leave a half-written `nodes.conf`, which would stop every later try:
        // seen once, five tries in a row exiting with status 1).
        for _ in 0..5 {
            let dir = ChildProcess::temp_dir("redis-server");
            let port = free_port();
            let mut server = RedisServer {
                process: ChildProcess::new(port, dir.clone()),
                args: args
                    .iter()
                    .map(|&arg| match arg {
                        RedisServer::FREE_PORT => free_port().to_string(),
                        arg => arg.to_string(),
                    })
                    .collect(),
                password: args
                    .windows(2)
                    .find(|w| w[0] == "--requirepass")
                    .map(|w| w[1].to_string()),
                bin: bin.clone(),
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last_err = format!("{e}{}", server.log_tail()),
            }
        }
        Err(last_err)
    }

    fn spawn(&mut self) -> io::Result<()> {
        self.spawn_with_env(&[])
    }

    /// [`spawn`](RedisServer::spawn) with `env` added to the server's environment (a clock
    /// shim preloaded: `topology::clock_skew`).
    pub(crate) fn spawn_with_env(&mut self, env: &[(&str, &std::ffi::OsStr)]) -> io::Result<()> {
        let bin = self.bin.clone().unwrap_or_else(|| {
            std::env::var_os("REDIS_SERVER_BIN").unwrap_or_else(|| "redis-server".into())
        });
        let child = Command::new(bin)
            .envs(env.iter().copied())
            .args(["--port", &self.process.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--protected-mode", "no"])
            .args(["--loglevel", "warning"])
            .arg("--dir")
            .arg(&self.process.dir)
            .args(&self.args)
            .stdin(Stdio::null())
            // The server's own log (warnings and worse), kept for a start that fails.
            .stdout(Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.log_path())?,
            ))
            .stderr(Stdio::null())
            .spawn()?;
        self.process.child = Some(await_pong(child, "redis-server", |args| {
            self.try_cmd(args)
        })?);
        Ok(())
    }

    /// Where the server writes its log: its directory.
    fn log_path(&self) -> std::path::PathBuf {
        self.process.dir.join("server.log")
    }

    /// The last lines of the server's log, for an error: empty when there are none.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(5).collect();
        if lines.is_empty() {
            return String::new();
        }
        let tail: Vec<&str> = lines.into_iter().rev().collect();
        format!("; its log ends: {}", tail.join(" | "))
    }

    /// Stops the server with `SHUTDOWN NOSAVE` (clients see closed connections) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.process.child.take() {
            let _ = self.try_cmd(&["SHUTDOWN", "NOSAVE"]);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (empty: persistence is off).
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn() {
                Ok(()) => return,
                // The port may linger for a moment after the old process died.
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!(
                    "could not restart redis-server on port {}: {e}",
                    self.process.port
                ),
            }
        }
    }

    /// Stops the server, deletes its data (RDB and AOF files) and starts it again empty: the
    /// "restart without persistence" fault even for a server started with AOF.
    pub fn restart_empty(&mut self) {
        self.stop();
        if let Ok(entries) = std::fs::read_dir(&self.process.dir) {
            for entry in entries.flatten() {
                let path = entry.path();
                let _ = if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
            }
        }
        self.restart();
    }

    /// Freezes the process (`SIGSTOP`): connections stay open, nothing answers.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Resumes a frozen process (`SIGCONT`).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.pid().expect("redis-server is not running");
        let status = Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {sig} {pid} failed");
    }

    /// `CLIENT PAUSE <ms> ALL`: the server stops answering clients for that long.
    pub fn pause_clients(&self, pause: Duration) {
        self.cmd(&["CLIENT", "PAUSE", &pause.as_millis().to_string(), "ALL"]);
    }

    /// Sends one command on a fresh connection and returns the reply.
    ///
    /// # Panics
    /// If the server cannot be reached or the reply cannot be read.
    pub fn cmd(&self, args: &[&str]) -> Resp {
        self.try_cmd(args)
            .unwrap_or_else(|e| panic!("redis command {args:?} failed: {e}"))
    }

    /// Like [`cmd`](RedisServer::cmd), but returns I/O errors.
    pub fn try_cmd(&self, args: &[&str]) -> io::Result<Resp> {
        send(self.process.port, self.password.as_deref(), args)
    }

    /// Which server this is and its own version, from `HELLO 2`: `("redis", (7, 0, 15))`,
    /// `("valkey", (9, 1, 2))` (Valkey reports `redis_version:7.2.4` in `INFO` whatever its
    /// version; Redis 6.0 wants `HELLO`'s protocol version).
    pub fn server_version(&self) -> (String, (u32, u32, u32)) {
        server_version(&self.cmd(&["HELLO", "2"]))
    }

    /// All keys matching `pattern` (by `SCAN`, so it is safe on a busy server).
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut cursor = "0".to_string();
        let mut keys = Vec::new();
        loop {
            let reply = self.cmd(&["SCAN", &cursor, "MATCH", pattern, "COUNT", "1000"]);
            let items = reply.items();
            cursor = items[0].text().expect("scan cursor").to_string();
            keys.extend(
                items[1]
                    .items()
                    .iter()
                    .filter_map(|k| k.text().map(str::to_string)),
            );
            if cursor == "0" {
                return keys;
            }
        }
    }

    /// The server's clock in milliseconds (`TIME`), the clock the lock scripts compare lease
    /// ends and waiters' places with.
    pub fn time_ms(&self) -> u64 {
        let t = self.cmd(&["TIME"]);
        let part = |i: usize| -> u64 { t.items()[i].text().unwrap().parse().unwrap() };
        part(0) * 1000 + part(1) / 1000
    }

    /// The channels with at least one subscriber matching `pattern` (`PUBSUB CHANNELS`).
    pub fn pubsub_channels(&self, pattern: &str) -> Vec<String> {
        self.cmd(&["PUBSUB", "CHANNELS", pattern])
            .items()
            .iter()
            .filter_map(|c| c.text().map(str::to_string))
            .collect()
    }

    /// How many times `command` (lower case, e.g. `evalsha`) ran on the server so far, from
    /// `INFO commandstats`.
    pub fn command_calls(&self, command: &str) -> u64 {
        let info = self.cmd(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:calls=");
        info.text()
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// How many lock script calls ran on the server so far: `EVALSHA` and `FCALL` (the scripts
    /// run as functions of a library where the server allows it).
    pub fn script_calls(&self) -> u64 {
        self.command_calls("evalsha") + self.command_calls("fcall")
    }

    /// The holder of this crate's mutex at `key` (its owner id, without the mark a waiter
    /// leaves), or `None` when it is free.
    pub fn mutex_holder(&self, key: &str) -> Option<String> {
        let value = self.cmd(&["GET", key]).text()?.to_owned();
        Some(value.strip_suffix('!').unwrap_or(&value).to_owned())
    }

    /// Kills every client connection of a type (`normal`, `pubsub`, …); returns how many.
    pub fn kill_clients(&self, kind: &str) -> i64 {
        self.cmd(&["CLIENT", "KILL", "TYPE", kind])
            .int()
            .unwrap_or(0)
    }
}

/// The `server` and `version` fields of a `HELLO` reply.
fn server_version(hello: &Resp) -> (String, (u32, u32, u32)) {
    let items = hello.items();
    let field = |name: &str| {
        items
            .chunks_exact(2)
            .find(|pair| pair[0].text() == Some(name))
            .and_then(|pair| pair[1].text())
            .unwrap_or_else(|| panic!("no {name} in HELLO's reply {hello:?}"))
    };
    let mut numbers = field("version")
        .split('.')
        .map(|part| part.parse::<u32>().unwrap_or(0));
    let mut next = || numbers.next().unwrap_or(0);
    let version = (next(), next(), next());
    (field("server").to_owned(), version)
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("find a free loopback port")
}

/// Sends one command to `127.0.0.1:port` on a fresh connection (after `AUTH` when a password is
/// given) and reads the reply.
fn send(port: u16, password: Option<&str>, args: &[&str]) -> io::Result<Resp> {
    let stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(&stream);
    if let Some(password) = password {
        (&stream).write_all(&encode(&["AUTH", password]))?;
        if let Resp::Error(e) = read_reply(&mut reader)? {
            return Err(io::Error::other(format!("AUTH failed: {e}")));
        }
    }
    (&stream).write_all(&encode(args))?;
    read_reply(&mut reader)
}

/// Waits (at most 10 s) until a just-started `what` process answers `PING` with `PONG` on its
/// port (`ask` sends a command there); returns the child, or kills it and says why not.
///
/// The answer must come from the child itself (`process_id` in `INFO server`): a free port can
/// be handed to two servers started at once, and the one that cannot bind it may take a moment
/// to exit, while the other already answers `PING` there (seen with Valkey: a test's client
/// reached another test's server).
fn await_pong(
    mut child: std::process::Child,
    what: &str,
    mut ask: impl FnMut(&[&str]) -> io::Result<Resp>,
) -> io::Result<std::process::Child> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait()? {
            return Err(io::Error::other(format!("{what} exited with {status}")));
        }
        if let Ok(Resp::Simple(pong)) = ask(&["PING"])
            && pong == "PONG"
        {
            let pid = format!("process_id:{}", child.id());
            let info = ask(&["INFO", "server"])?;
            if info.text().is_some_and(|i| i.lines().any(|l| l == pid)) {
                return Ok(child);
            }
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other(format!(
                "another server answers on {what}'s port"
            )));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other(format!(
                "{what} did not answer PING in 10 s"
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn read_reply(r: &mut impl BufRead) -> io::Result<Resp> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    let line = line.trim_end_matches("\r\n");
    let (kind, rest) = line.split_at(1);
    let bad =
        |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("bad {what}: {line}"));
    Ok(match kind {
        "+" => Resp::Simple(rest.to_string()),
        "-" => Resp::Error(rest.to_string()),
        ":" => Resp::Int(rest.parse().map_err(|_| bad("integer"))?),
        "$" => {
            let len: i64 = rest.parse().map_err(|_| bad("bulk length"))?;
            if len < 0 {
                Resp::Bulk(None)
            } else {
                let mut buf = vec![0; len as usize + 2];
                r.read_exact(&mut buf)?;
                buf.truncate(len as usize);
                Resp::Bulk(Some(String::from_utf8_lossy(&buf).into_owned()))
            }
        }
        "*" => {
            let len: i64 = rest.parse().map_err(|_| bad("array length"))?;
            if len < 0 {
                Resp::Array(None)
            } else {
                let items = (0..len).map(|_| read_reply(r)).collect::<io::Result<_>>()?;
                Resp::Array(Some(items))
            }
        }
        _ => return Err(bad("reply type")),
    })
}

#[cfg(test)]
mod tests {
    use super::RedisServer;

    #[test]
    fn a_server_binary_of_ones_own_is_the_one_started() {
        let server = RedisServer::try_start_binary("redis-server", &[]).expect("redis-server");
        assert_eq!(server.cmd(&["PING"]), super::Resp::Simple("PONG".into()));
        let missing = RedisServer::try_start_binary("/nonexistent/redis-server", &[]);
        assert!(missing.is_err(), "{missing:?}");
    }
}
