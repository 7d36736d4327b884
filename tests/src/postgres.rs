//! A real PostgreSQL server on a free loopback port, in a temp dir of its own.
//!
//! [`PostgresServer::start`] runs `initdb` (superuser `postgres`, trust authentication, UTF-8,
//! locale `C`) and `postgres` with durability off (`fsync`, `synchronous_commit` and
//! `full_page_writes` off: a test database is thrown away anyway), listening on `127.0.0.1`
//! only and with its unix socket inside the temp dir. Dropping the server shuts it down (fast
//! shutdown, `SIGINT`, then `SIGKILL` after 10 s) and removes the dir.
//!
//! The binaries are PostgreSQL 15 or newer, from Debian's `postgresql` package
//! (`bash scripts/ensure-deps.sh postgres` installs it). They are looked up in
//! `$POSTGRES_BIN_DIR`, else next to the (symlink-resolved) `initdb` on `PATH`, else in the
//! newest `/usr/lib/postgresql/<version>/bin/` (where Debian installs them, off `PATH`).
//!
//! PostgreSQL refuses to run as root: when the tests run as root (as in CI), `initdb` and
//! `postgres` run as the `postgres` system user (created by the Debian package), or as
//! `nobody` where there is none, and the temp dir is handed to that user.
//!
//! Each test starts its own server (about one second for `initdb` and start-up); a test that
//! needs several independent databases on one server uses
//! [`create_database`](PostgresServer::create_database).

use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Gid, Pid, Uid, User, chown, geteuid};

use crate::ChildProcess;

/// How long `postgres` may take to accept connections, and to shut down on drop.
const START_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A `postgres` child process on a free loopback port, shut down (and its dir removed) on drop,
/// also while a test unwinds from a panic.
///
/// ```no_run
/// let pg = lock_tests::PostgresServer::start();
/// let url = pg.create_database("shop"); // postgres://postgres@127.0.0.1:<port>/shop
/// # let _ = url;
/// ```
#[derive(Debug)]
pub struct PostgresServer {
    port: u16,
    /// The temp dir: `data/` (the cluster), `socket/` (the unix socket), `postgres.log`.
    dir: PathBuf,
    bin_dir: PathBuf,
    /// The unprivileged user the server runs as when the tests run as root.
    run_as: Option<(Uid, Gid)>,
    child: Option<Child>,
}

impl PostgresServer {
    /// Creates a cluster in a new temp dir, starts `postgres` on a free loopback port and waits
    /// (at most 30 s) until it accepts connections.
    ///
    /// # Panics
    /// If PostgreSQL is not installed or does not start (the message says how to install it).
    pub fn start() -> PostgresServer {
        let bin_dir = bin_dir();
        let dir = ChildProcess::temp_dir("postgres");
        let mut server = PostgresServer {
            port: 0,
            dir,
            bin_dir,
            run_as: run_as(),
            child: None,
        };
        server.init_cluster();
        let mut last_err = String::new();
        // A free port can be taken by someone else between our probe and the server's bind:
        // retry with a new one.
        for _ in 0..5 {
            server.port = crate::free_port();
            match server.spawn() {
                Ok(()) => return server,
                Err(e) => last_err = e,
            }
        }
        panic!("could not start postgres: {last_err}");
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`: the default database, as the superuser.
    pub fn url(&self) -> String {
        self.database_url("postgres")
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's temp dir (`data/`, `socket/`, `postgres.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory the PostgreSQL binaries were taken from.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// Creates a new, empty database (with `createdb`) and returns its URL.
    ///
    /// # Panics
    /// If `name` is not made of ASCII lower-case letters, digits and `_` (so it needs no quoting
    /// in SQL or in the URL), or if `createdb` fails (e.g. the database exists).
    pub fn create_database(&self, name: &str) -> String {
        assert!(
            !name.is_empty()
                && name.len() <= 63
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "database name {name:?}: use 1 to 63 of [a-z0-9_]"
        );
        let output = Command::new(self.tool("createdb"))
            .args(self.connection_args())
            .arg(name)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run createdb: {e}"));
        assert!(
            output.status.success(),
            "createdb {name} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        self.database_url(name)
    }

    /// Runs `sql` in `database` with `psql` (stopping at the first error) and returns what it
    /// printed: unaligned, tuples only, so `SELECT qty FROM stock` gives `"7\n"`.
    ///
    /// # Panics
    /// If `psql` cannot run or the SQL fails.
    pub fn psql(&self, database: &str, sql: &str) -> String {
        let output = Command::new(self.tool("psql"))
            .args(self.connection_args())
            .args([
                "-d",
                database,
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
            ])
            .args(["-c", sql])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run psql: {e}"));
        assert!(
            output.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The process id of the postmaster.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn database_url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    fn connection_args(&self) -> [String; 6] {
        [
            "-h".into(),
            "127.0.0.1".into(),
            "-p".into(),
            self.port.to_string(),
            "-U".into(),
            "postgres".into(),
        ]
    }

    /// A binary from the bin dir, or from `PATH` when it is not there (Debian's `psql`,
    /// `createdb` and `pg_isready` are also on `PATH` through `pg_wrapper`).
    fn tool(&self, name: &str) -> PathBuf {
        let path = self.bin_dir.join(name);
        if path.is_file() { path } else { name.into() }
    }

    /// A command that runs as the unprivileged user when we are root, in the temp dir (which
    /// that user can enter, unlike the test's working directory, perhaps).
    fn command(&self, name: &str) -> Command {
        let mut cmd = Command::new(self.tool(name));
        cmd.current_dir(&self.dir).stdin(Stdio::null());
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
        cmd
    }

    fn init_cluster(&self) {
        for sub in ["data", "socket"] {
            let path = self.dir.join(sub);
            fs::create_dir_all(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
            // initdb insists on a data dir only its owner can enter.
            fs::set_permissions(&path, fs::Permissions::from_mode(0o700))
                .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
        }
        if let Some((uid, gid)) = self.run_as {
            for path in [
                self.dir.clone(),
                self.dir.join("data"),
                self.dir.join("socket"),
            ] {
                chown(&path, Some(uid), Some(gid))
                    .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
            }
        }
        let output = self
            .command("initdb")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"])
            // Durability is pointless for a throw-away cluster; this makes initdb ~3× faster.
            .arg("--no-sync")
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "run {}: {e}; install PostgreSQL (Debian: bash scripts/ensure-deps.sh postgres) or set POSTGRES_BIN_DIR",
                    self.tool("initdb").display()
                )
            });
        assert!(
            output.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Starts `postgres` on `self.port` and waits until it accepts connections; on failure
    /// the process is gone and the error has the tail of its log.
    fn spawn(&mut self) -> Result<(), String> {
        let log_path = self.dir.join("postgres.log");
        let log = File::create(&log_path).map_err(|e| format!("create postgres.log: {e}"))?;
        let log_err = log.try_clone().map_err(|e| e.to_string())?;
        let mut child = self
            .command("postgres")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                self.dir.join("socket").display()
            ))
            .args(["-c", "fsync=off"])
            .args(["-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off"])
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| format!("run {}: {e}", self.tool("postgres").display()))?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "postgres exited with {status}: {}",
                    log_tail(&log_path)
                ));
            }
            if self.is_ready() {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "postgres did not accept connections in {START_TIMEOUT:?}: {}",
                    log_tail(&log_path)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `pg_isready`: whether the server accepts connections (not just the TCP handshake: a
    /// starting server accepts those and then refuses with "starting up").
    fn is_ready(&self) -> bool {
        Command::new(self.tool("pg_isready"))
            .args(self.connection_args())
            .args(["-d", "postgres", "-q", "-t", "2"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGINT is PostgreSQL's "fast shutdown": abort transactions, disconnect, exit.
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGINT);
            }
            let deadline = Instant::now() + STOP_TIMEOUT;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Where the PostgreSQL binaries are (see the module docs).
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("POSTGRES_BIN_DIR") {
        return dir.into();
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("initdb"))
            .find(|initdb| initdb.is_file())
    });
    // Resolve symlinks: `createdb` and `pg_isready` of the same version sit next to the
    // real `initdb`, not necessarily next to a link to it.
    if let Some(real) = on_path.and_then(|initdb| fs::canonicalize(initdb).ok())
        && let Some(dir) = real.parent()
    {
        return dir.to_path_buf();
    }
    newest_debian_bin_dir().unwrap_or_else(|| {
        panic!(
            "PostgreSQL not found (no initdb on PATH nor in /usr/lib/postgresql/*/bin); install it (Debian: bash scripts/ensure-deps.sh postgres) or set POSTGRES_BIN_DIR"
        )
    })
}

/// The newest `/usr/lib/postgresql/<version>/bin` with an `initdb` in it.
fn newest_debian_bin_dir() -> Option<PathBuf> {
    fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let version: Vec<u32> = entry
                .file_name()
                .to_str()?
                .split('.')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .max()
        .map(|(_, bin)| bin)
}

/// The user to run PostgreSQL as: none (ourselves) unless we are root.
fn run_as() -> Option<(Uid, Gid)> {
    if !geteuid().is_root() {
        return None;
    }
    let user = ["postgres", "nobody"]
        .into_iter()
        .find_map(|name| User::from_name(name).ok().flatten())
        .unwrap_or_else(|| {
            panic!(
                "running as root, and there is no `postgres` or `nobody` user to run PostgreSQL as"
            )
        });
    Some((user.uid, user.gid))
}

/// The last lines of a log, for error messages.
fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}
