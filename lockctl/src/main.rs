//! `lockctl`: look at and operate the distributed locks of [`lock_runtime`] on Redis.
//!
//! It reads the layout the runtime writes (mutexes, fair locks, read/write locks and
//! semaphores, under any key prefix), connects the way the runtime does (one server with TLS
//! and ACL users, Redis Cluster, Sentinel), and never blocks Redis: locks are found with `SCAN`
//! in bounded batches (on every master of a cluster), never `KEYS`, and each lock is read with
//! one short script. Everything it shows or does, an application can do from code too:
//! [`LockClient::info`](lock_runtime::LockClient::info) (a name read as whatever kind of lock
//! it is), [`LockClient::scan`](lock_runtime::LockClient::scan) and
//! [`LockClient::force_unlock`](lock_runtime::LockClient::force_unlock) (freed the way its
//! kind needs).
//!
//! # Commands
//!
//! ```text
//! lockctl list [--pattern GLOB] [--limit N]       held locks: name, kind, holder(s), TTL, token, waiters
//! lockctl inspect NAME                            everything about one lock
//! lockctl force-unlock NAME [--yes]               delete it if the holders shown still hold it (asks first)
//! lockctl top [--interval 1s] [--iterations N]    the busiest locks, refreshed
//! ```
//!
//! Global options (before or after the command):
//!
//! - `--url URL` (also `LOCKCTL_URL`, then `REDIS_URL`; default `redis://127.0.0.1:6379`):
//!   `redis://user:password@host:port/db`, `rediss://…` for TLS, with `--tls-ca FILE` for a
//!   private CA;
//! - `--cluster SEED[,SEED…]`: a Redis Cluster from its seed nodes;
//! - `--sentinel URL[,URL…] --master NAME` (`--master-user`, `--master-password` or
//!   `LOCKCTL_MASTER_PASSWORD` for the data nodes, `--master-tls` for TLS to them): the master
//!   behind Sentinel;
//! - `--prefix PREFIX` (also `LOCKCTL_PREFIX`; default `lock`): the applications' key prefix;
//! - `--redisson`: the applications use `Layout::Redisson` (locks shared with Java services):
//!   `inspect` and `force-unlock` take the name the Java side uses (a semaphore, whose name
//!   holds its available count, is read as one: its leased permits, force-released back to
//!   the count); `list` and `top` need a prefix and are refused;
//! - `--json`: one JSON document per command (for `top`, one per refresh, one a line);
//! - `--timeout DURATION` (default `5s`): connect and reply timeout.
//!
//! ```text
//! $ lockctl --url redis://10.0.0.5:6379 list
//! NAME      KIND          HOLDERS                                           TTL    TOKEN             WAITERS
//! stock:42  mutex         5f0c9d6e2b0a4d1f9a7c3e8b6d2f1a0c:17               28.4s  1718290000123456  2
//! stock:43  read-write    5f0c9d6e2b0a4d1f9a7c3e8b6d2f1a0c:18#r (read)      12.0s  1718290000123999  0
//! supplier  semaphore 3   91bc0e6f3d2a4b5c8e7f6a5b4c3d2e1f:9#3 (3 permits)  29.9s  1718290000124100  1
//!
//! $ lockctl force-unlock stock:42
//! force-unlock stock:42 held by 5f0c9d6e2b0a4d1f9a7c3e8b6d2f1a0c:17? [y/N] y
//! force-unlocked stock:42 (was held by 5f0c9d6e2b0a4d1f9a7c3e8b6d2f1a0c:17)
//! ```
//!
//! The holder's guard learns of a force-unlock at its next renewal and reports the lock lost
//! (`LockGuard::lost`). The lock is freed only if the holders shown (asked about) still hold it,
//! in one compare-and-delete on Redis: one that changed hands before the answer is left alone,
//! reported as an error (exit code 1) naming the new holders. With `--redisson` it is freed
//! whoever holds it by then.

//!
//! # What the columns mean
//!
//! - **holders**: owner ids, `<client id>:<acquisition>`; the client id is
//!   [`LockClient::id`](lock_runtime::LockClient::id) of the holding process. Readers, writers
//!   and permits are marked.
//! - **ttl**: until the lock falls free unless renewed (the watchdog renews a third of the way).
//! - **token**: the fencing token last issued for the name.
//! - **waiters**: a fair lock's queue length; otherwise the connections subscribed to the
//!   lock's unlock channel. All waiting tasks of one process share one subscription, so this
//!   counts waiting *processes*.
//! - `top` sorts by waiters, then by how much the fencing token grew since the last refresh.
//!   Tokens follow the server clock in microseconds, so the growth says how recently the lock
//!   was granted again rather than how many times.
//!
//! Keys under the prefix that belong to no lock are skipped and counted (`list` names the
//! first of them on standard error and in its JSON); a lock's key holding data of another type
//! is reported, never touched.
//!
//! # Exit codes
//!
//! `0` done; `1` an error (Redis unreachable, data that is not a lock, a force-unlock not
//! confirmed, or of a lock that changed hands before it was confirmed), printed as one line on
//! standard error; `2` a usage error.
//!
//! # Which crate do I need
//!
//! | you want | crate |
//! |---|---|
//! | a distributed lock, semaphore, read/write or fair lock from code | [`lock-runtime`](https://docs.rs/lock-runtime) |
//! | `#[distributed_lock]` on an `async fn` | [`lock-macros`](https://docs.rs/lock-macros), through `lock-runtime`'s default `macros` feature |
//! | a lock (or *N* permits) per request in axum, tonic or any tower stack | [`lock-tower`](https://docs.rs/lock-tower) |
//! | the store to refuse a stale holder's write (PostgreSQL, SQLite, Redis) | [`lock-fence`](https://docs.rs/lock-fence) |
//! | to list, inspect or force-unlock locks from a shell | [`lockctl`](https://crates.io/crates/lockctl) (`cargo install lockctl`) |

#![cfg_attr(docsrs, feature(doc_cfg))]

mod cli;
mod render;

use std::collections::HashMap;
use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use lock_runtime::{ForceUnlock, LockClient, LockError, LockInfo};
use serde_json::json;

use crate::cli::{Cli, Command, Connection, Listing};

/// A failure to report as one line, with exit code 1.
#[derive(Debug)]
struct Failure(String);

impl From<LockError> for Failure {
    fn from(e: LockError) -> Failure {
        Failure(e.to_string())
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version print to stdout with 0; usage errors to stderr with 2.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    if let Err(e) = check_usage(&cli) {
        let _ = e.print();
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&Failure(format!("cannot start the async runtime: {e}"))),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn fail(e: &Failure) -> ExitCode {
    // One line, whatever the message carries.
    let line = e.0.replace(['\n', '\r'], " ");
    eprintln!("lockctl: error: {line}");
    ExitCode::FAILURE
}

/// What clap cannot say alone: Sentinel needs a master name, and only Sentinel takes one.
fn check_usage(cli: &Cli) -> Result<(), clap::Error> {
    let c = &cli.connection;
    let usage =
        |msg: &str| Cli::command().error(clap::error::ErrorKind::MissingRequiredArgument, msg);
    if !c.sentinel.is_empty() && c.master.is_none() {
        return Err(usage("--sentinel needs --master NAME"));
    }
    if c.sentinel.is_empty()
        && (c.master.is_some() || c.master_user.is_some() || c.master_password.is_some())
    {
        return Err(usage(
            "--master, --master-user and --master-password need --sentinel",
        ));
    }
    Ok(())
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let client = connect(&cli).await?;
    let out = Output { json: cli.json };
    match cli.command {
        Command::List(listing) => list(&client, &listing, out).await,
        Command::Inspect { name } => inspect(&client, &name, out).await,
        Command::ForceUnlock { name, yes } => {
            force_unlock(&client, &name, yes, cli.redisson, out).await
        }
        Command::Top {
            listing,
            interval,
            iterations,
            rows,
        } => top(&client, &listing, interval, iterations, rows, out).await,
    }
}

#[derive(Debug, Clone, Copy)]
struct Output {
    json: bool,
}

/// Connects the way the options say; the error names where, without credentials.
async fn connect(cli: &Cli) -> Result<LockClient, Failure> {
    let c: &Connection = &cli.connection;
    let (builder, target) = if !c.cluster.is_empty() {
        let target = format!("the cluster at {}", redact_all(&c.cluster));
        (LockClient::cluster_builder(c.cluster.clone()), target)
    } else if !c.sentinel.is_empty() {
        let master = c.master.clone().unwrap_or_default();
        let target = format!(
            "master {master} via the sentinels at {}",
            redact_all(&c.sentinel)
        );
        let mut builder = LockClient::sentinel_builder(c.sentinel.clone(), master);
        let password = c
            .master_password
            .clone()
            .or_else(|| std::env::var("LOCKCTL_MASTER_PASSWORD").ok());
        if let Some(password) = password {
            builder = builder.master_credentials(c.master_user.as_deref(), &password);
        }
        if c.master_tls {
            builder = builder.master_tls();
        }
        (builder, target)
    } else {
        let url = c
            .url
            .clone()
            .or_else(|| std::env::var("LOCKCTL_URL").ok())
            .or_else(|| std::env::var("REDIS_URL").ok())
            .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
        let target = redact(&url);
        (LockClient::builder(&url), target)
    };
    let prefix = cli
        .prefix
        .clone()
        .or_else(|| std::env::var("LOCKCTL_PREFIX").ok())
        .unwrap_or_else(|| lock_runtime::DEFAULT_PREFIX.into());
    let layout = match cli.redisson {
        true => lock_runtime::Layout::Redisson,
        false => lock_runtime::Layout::Native,
    };
    let mut builder = builder
        .prefix(prefix)
        .layout(layout)
        .connect_timeout(c.timeout)
        .response_timeout(c.timeout);
    if let Some(path) = &c.tls_ca {
        let pem = std::fs::read(path)
            .map_err(|e| Failure(format!("cannot read --tls-ca {}: {e}", path.display())))?;
        builder = builder.tls_root_certificate(pem);
    }
    builder
        .build()
        .await
        .map_err(|e| Failure(format!("cannot connect to {target}: {e}")))
}

/// A URL without its password.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://…@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

fn redact_all(urls: &[String]) -> String {
    urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",")
}

/// The locks a listing covers, read one by one, and the keys skipped on the way.
struct Snapshot {
    locks: Vec<LockInfo>,
    /// Lock keys holding data of another type: (name, key, what was found).
    foreign: Vec<(String, String, String)>,
    /// Keys under the prefix that belong to no lock: the first ones, and how many.
    unknown: (Vec<String>, usize),
    /// Whether `--limit` cut the listing short.
    truncated: bool,
}

async fn snapshot(client: &LockClient, listing: &Listing) -> Result<Snapshot, Failure> {
    let mut scan = client.scan(&listing.pattern);
    let names = scan.collect_up_to(listing.limit).await?;
    let truncated = names.len() == listing.limit && !scan.collect_up_to(1).await?.is_empty();
    let mut locks = Vec::with_capacity(names.len());
    let mut foreign = Vec::new();
    for name in names {
        match client.lock(&name).info().await {
            Ok(Some(info)) => locks.push(info),
            // Released since the scan saw it.
            Ok(None) => {}
            Err(LockError::ForeignData { key, found }) => foreign.push((name, key, found)),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Snapshot {
        locks,
        foreign,
        unknown: (scan.unknown_keys().to_vec(), scan.unknown_key_count()),
        truncated,
    })
}

impl Snapshot {
    fn skipped_json(&self) -> serde_json::Value {
        json!({
            "foreign": self.foreign.iter().map(|(name, key, found)| json!({
                "name": name, "key": key, "found": found,
            })).collect::<Vec<_>>(),
            "unknown_keys": self.unknown.0,
            "unknown_key_count": self.unknown.1,
        })
    }

    /// Warnings for people, on standard error.
    fn warn(&self, limit: usize) {
        for (_, key, found) in &self.foreign {
            eprintln!("lockctl: warning: key {key} holds a Redis {found}, not a lock; skipped");
        }
        let (keys, count) = &self.unknown;
        if *count > 0 {
            let shown = keys.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
            eprintln!(
                "lockctl: warning: {count} key(s) under the prefix belong to no lock (e.g. {shown}); skipped"
            );
        }
        if self.truncated {
            eprintln!("lockctl: warning: more than {limit} locks; raise --limit to see them all");
        }
    }
}

async fn list(client: &LockClient, listing: &Listing, out: Output) -> Result<(), Failure> {
    let snap = snapshot(client, listing).await?;
    if out.json {
        let doc = json!({
            "prefix": client.prefix(),
            "pattern": listing.pattern,
            "locks": snap.locks.iter().map(render::lock_json).collect::<Vec<_>>(),
            "truncated": snap.truncated,
            "skipped": snap.skipped_json(),
        });
        print_line(&doc.to_string())?;
    } else {
        snap.warn(listing.limit);
        if snap.locks.is_empty() {
            print_line("no locks held")?;
        } else {
            let rows: Vec<_> = snap.locks.iter().map(|l| (l, None)).collect();
            print_text(&render::table(&rows, None))?;
        }
    }
    Ok(())
}

/// Reads the lock as whatever kind it is ([`LockClient::info`]: with `--redisson`, a string at
/// the name is Redisson's semaphore).
async fn inspect(client: &LockClient, name: &str, out: Output) -> Result<(), Failure> {
    let info = client.info(name).await?;
    match (info, out.json) {
        (Some(info), true) => {
            let mut doc = render::lock_json(&info);
            doc["held"] = json!(true);
            print_line(&doc.to_string())
        }
        (Some(info), false) => print_text(&render::details(&info)),
        (None, true) => print_line(&json!({ "name": name, "held": false }).to_string()),
        (None, false) => print_line(&format!("{name}: not locked")),
    }
}

/// Frees the lock after asking unless `yes`: only while the holders shown still hold it
/// ([`LockClient::force_unlock_held_by`], one compare-and-delete on Redis), so an answer given
/// after the lock changed hands never frees the successor. With `--redisson`, the way its kind
/// needs ([`LockClient::force_unlock`]: each kind wakes its waiters, Java's included, its own
/// way), whoever holds it by then.
async fn force_unlock(
    client: &LockClient,
    name: &str,
    yes: bool,
    redisson: bool,
    out: Output,
) -> Result<(), Failure> {
    let info = client.info(name).await?;
    let Some(info) = info else {
        return if out.json {
            print_line(&json!({ "name": name, "was_held": false, "unlocked": false }).to_string())
        } else {
            print_line(&format!("{name} is not locked; nothing to do"))
        };
    };
    let holders = info
        .holders
        .iter()
        .map(render::holder)
        .collect::<Vec<_>>()
        .join(", ");
    if !yes && !confirm(&format!("force-unlock {name} held by {holders}? [y/N] ")).await? {
        return Err(Failure(format!(
            "force-unlock of {name} not confirmed; nothing changed (pass --yes to skip the question)"
        )));
    }
    let deleted = if redisson {
        client.force_unlock(name).await?.is_some()
    } else {
        let shown: Vec<String> = info.holders.iter().map(|h| h.owner.clone()).collect();
        match client.force_unlock_held_by(name, &shown).await? {
            ForceUnlock::Freed => true,
            ForceUnlock::HolderChanged => {
                let now = match client.info(name).await {
                    Ok(Some(now)) => now
                        .holders
                        .iter()
                        .map(render::holder)
                        .collect::<Vec<_>>()
                        .join(", "),
                    _ => "others".to_owned(),
                };
                return Err(Failure(format!(
                    "{name} changed hands since it was shown (held by {holders}, now by {now}); \
                     nothing changed"
                )));
            }
            _ => false,
        }
    };
    if out.json {
        let mut doc = json!({ "name": name, "was_held": true, "unlocked": deleted });
        doc["lock"] = render::lock_json(&info);
        print_line(&doc.to_string())
    } else if deleted {
        print_line(&format!("force-unlocked {name} (was held by {holders})"))
    } else {
        print_line(&format!("{name} was released meanwhile; nothing to do"))
    }
}

/// Asks on standard error and reads the answer from standard input (a terminal or a pipe, so
/// scripts and tests can answer); end of input means no.
async fn confirm(question: &str) -> Result<bool, Failure> {
    let question = question.to_owned();
    let answer = tokio::task::spawn_blocking(move || {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(question.as_bytes());
        let _ = err.flush();
        let mut line = String::new();
        let read = std::io::stdin().lock().read_line(&mut line);
        if !std::io::stdin().is_terminal() {
            // The answer did not echo: end the prompt's line.
            let _ = writeln!(err);
        }
        read.map(|_| line)
    })
    .await
    .map_err(|e| Failure(format!("reading the answer failed: {e}")))?
    .map_err(|e| Failure(format!("reading the answer failed: {e}")))?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

async fn top(
    client: &LockClient,
    listing: &Listing,
    interval: std::time::Duration,
    iterations: Option<u64>,
    rows: usize,
    out: Output,
) -> Result<(), Failure> {
    let live = !out.json && std::io::stdout().is_terminal();
    let mut last_tokens: HashMap<String, u64> = HashMap::new();
    let mut refresh = 0u64;
    loop {
        refresh += 1;
        let snap = snapshot(client, listing).await?;
        let mut ranked: Vec<(&LockInfo, u64)> = snap
            .locks
            .iter()
            .map(|info| {
                let growth = match (info.fencing_token, last_tokens.get(&info.name)) {
                    (Some(now), Some(&before)) => now.saturating_sub(before),
                    _ => 0,
                };
                (info, growth)
            })
            .collect();
        ranked.sort_by(|(a, ga), (b, gb)| {
            b.waiting()
                .cmp(&a.waiting())
                .then(gb.cmp(ga))
                .then_with(|| a.name.cmp(&b.name))
        });
        ranked.truncate(rows);
        if out.json {
            let doc = json!({
                "refresh": refresh,
                "prefix": client.prefix(),
                "lock_count": snap.locks.len(),
                "locks": ranked.iter().map(|(info, growth)| {
                    let mut doc = render::lock_json(info);
                    doc["token_growth"] = json!(growth);
                    doc
                }).collect::<Vec<_>>(),
                "truncated": snap.truncated,
                "skipped": snap.skipped_json(),
            });
            print_line(&doc.to_string())?;
        } else {
            let mut text = String::new();
            if live {
                // Clear the screen and go home: a refreshing view.
                text.push_str("\x1b[H\x1b[2J");
            } else if refresh > 1 {
                text.push('\n');
            }
            text.push_str(&format!(
                "lockctl top: prefix {}, {} lock(s) held, refresh {refresh} every {}\n",
                client.prefix(),
                snap.locks.len(),
                render::duration(Some(interval))
            ));
            let table_rows: Vec<_> = ranked
                .iter()
                .map(|(info, growth)| (*info, Some(growth.to_string())))
                .collect();
            text.push_str(&render::table(&table_rows, Some("TOKEN+")));
            print_text(&text)?;
        }
        last_tokens = snap
            .locks
            .iter()
            .filter_map(|info| Some((info.name.clone(), info.fencing_token?)))
            .collect();
        if iterations.is_some_and(|n| refresh >= n) {
            return Ok(());
        }
        tokio::time::sleep(interval).await;
    }
}

fn print_line(line: &str) -> Result<(), Failure> {
    print_text(&format!("{line}\n"))
}

/// Writes to standard output; a closed pipe (`lockctl list | head`) ends quietly.
fn print_text(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(Failure(format!("cannot write the output: {e}"))),
    }
}
