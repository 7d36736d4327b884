//! A separate OS process that uses the lock, for multi-process and crash tests.
//!
//! ```text
//! lock-worker count <redis-url> <lock> <counter-key> <tasks> <increments-per-task>
//!     increments <counter-key> with a non-atomic GET → yield → SET under <lock>; prints
//!     `done <n>` and exits.
//! lock-worker hold <redis-url> <lock> <watchdog-ms>
//!     takes <lock> with the watchdog, prints `held <fencing-token>`, then sleeps until killed.
//! lock-worker family <redis-url> <kind> <name> <tasks> <rounds> <hold-ms>
//!     <kind> is `semaphore:<capacity>`, `rw` (one section in four writes) or `fair`; each task
//!     takes the primitive <rounds> times and holds it <hold-ms>; prints one line per section,
//!     `section <read|write|permit|fair> <asked-ns> <start-ns> <end-ns>` (CLOCK_MONOTONIC,
//!     comparable across processes), then `done`.
//! lock-worker hold-family <redis-url> <kind> <name> <watchdog-ms>
//!     takes <name> as <kind> (`semaphore:<capacity>`, `read`, `write`, `fair`) with the
//!     watchdog, prints `held <fencing-token>`, then sleeps until killed; if it has to wait,
//!     it prints `waiting` first.
//! lock-worker paused <redis-url> <prefix> <watchdog-ms> <tasks>
//!     holds `<prefix>:mutex` (a lock), a permit of `<prefix>:sem` (a semaphore of 1) and the
//!     read side of `<prefix>:rw`, each with <tasks> tasks that check `is_lost()` before every
//!     "use" (yielding between uses) and one task waiting in `lost()`; prints `held`, then, once every
//!     task saw the loss, one line per task, `uses <kind> <last-held-check-ns>
//!     <first-lost-check-ns>` and `signal <kind> <lost()-resolved-ns>` (CLOCK_MONOTONIC; the
//!     timestamps are taken just *before* the check), then `done`. For SIGSTOP/SIGCONT tests.
//! lock-worker family-chaos <redis-url> <duration-ms> <watchdog-ms> <out>
//!     the lock family under faults: six tasks, two on a semaphore of 2 permits, two on a
//!     read/write lock (one section in four writes), two on a fair lock, each taking it again
//!     and again until <duration-ms> passed, riding out errors; one line per section is
//!     appended to <out>: `<semaphore|read|write|fair> <asked-ns> <start-ns> <end-ns> <lost>`;
//!     prints `exit held=<n> subscribed=<n> sections=<n>` at the end.
//! lock-worker chaos <lock-url> <store-url> <keys> <tasks> <duration-ms> <watchdog-ms> <out>
//!     [group-commit] [family]
//!     (<lock-url>: one server, `sentinel:<master>@<sentinel-url>,…[+ack]`, or
//!     `cluster:<node-url>,…[+ack]`; <store-url>: a Redis URL (the compare-and-set store),
//!     `sqlite://<file>` or `postgres://…` (fenced through lock-fence), or several of them,
//!     comma-separated: lock `chaos:<k>` writes to the (k mod n)-th)
//!     the chaos workload: tasks lock random keys and do fenced read-modify-writes on the
//!     store, some cancelled at random points; one record per critical section is appended to
//!     <out>; prints `exit held=<n> subscribed=<n> cancelled=<n>` at the end. With a Sentinel
//!     URL, the master the client uses is appended to `<out>.masters` (`<mono-ns> <host:port>`
//!     at the start and at every switch). `family` adds two tasks on a semaphore of 2 permits
//!     and two on a read/write lock, each section using a fenced resource on the (first) Redis
//!     store; one line per section in `<out>.family`.
//! lock-worker block <lock-url> <store-url> <key> <block-ms> <watchdog-ms> <out>
//!     on a single-threaded runtime: takes <key>, blocks the thread for <block-ms>, then tries
//!     its fenced read-modify-write and records the outcome.
//! ```

use std::time::Duration;

use lock_runtime::LockClient;
use redis::AsyncCommands;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    if args.first() == Some(&"block") {
        // A single thread: blocking it stops the watchdog too, like a stuck process.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        return rt.block_on(chaos::block(&args[1..]));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(args));
}

async fn run(args: Vec<&str>) {
    match args.as_slice() {
        ["count", url, lock, key, tasks, n] => {
            let tasks: usize = tasks.parse().expect("tasks");
            let n: usize = n.parse().expect("increments");
            let locks = LockClient::connect(url).await.expect("connect");
            let redis = redis::Client::open(*url).expect("url");
            let mut handles = Vec::new();
            for _ in 0..tasks {
                let locks = locks.clone();
                let mut conn = redis
                    .get_multiplexed_async_connection()
                    .await
                    .expect("conn");
                let (lock, key) = (lock.to_string(), key.to_string());
                handles.push(tokio::spawn(async move {
                    for _ in 0..n {
                        let guard = locks.lock(&lock).acquire().await.expect("acquire");
                        let v: Option<u64> = conn.get(&key).await.expect("get");
                        tokio::task::yield_now().await;
                        let _: () = conn.set(&key, v.unwrap_or(0) + 1).await.expect("set");
                        guard.release().await.expect("release");
                    }
                }));
            }
            for h in handles {
                h.await.expect("task");
            }
            println!("done {}", tasks * n);
        }
        ["hold", url, lock, watchdog_ms] => {
            let locks = LockClient::builder(url)
                .watchdog_timeout(Duration::from_millis(watchdog_ms.parse().expect("ms")))
                .build()
                .await
                .expect("connect");
            let guard = locks.lock(lock).acquire().await.expect("acquire");
            println!("held {}", guard.fencing_token().await.expect("token"));
            std::future::pending::<()>().await;
        }
        ["family", url, kind, name, tasks, rounds, hold_ms] => {
            family::sections(url, kind, name, tasks, rounds, hold_ms).await;
        }
        ["hold-family", url, kind, name, watchdog_ms] => {
            family::hold(url, kind, name, watchdog_ms).await;
        }
        ["family-chaos", url, ms, watchdog_ms, out] => {
            family::chaos(url, ms, watchdog_ms, out).await;
        }
        ["paused", url, prefix, watchdog_ms, tasks] => {
            paused(url, prefix, watchdog_ms, tasks).await;
        }
        ["chaos", rest @ ..] => chaos::workload(rest).await,
        _ => {
            eprintln!("usage: lock-worker count … | hold … | chaos … | block … (see the source)");
            std::process::exit(2);
        }
    }
}

/// The `paused` mode: see the module docs.
async fn paused(url: &str, prefix: &str, watchdog_ms: &str, tasks: &str) {
    use std::sync::Arc;

    use lock_tests::mono_ns;

    let tasks: usize = tasks.parse().expect("tasks");
    let locks = LockClient::builder(url)
        .watchdog_timeout(Duration::from_millis(watchdog_ms.parse().expect("ms")))
        .build()
        .await
        .expect("connect");
    let holds = [
        (
            "mutex",
            locks.lock(format!("{prefix}:mutex")).acquire().await,
        ),
        (
            "permit",
            locks.semaphore(format!("{prefix}:sem"), 1).acquire().await,
        ),
        (
            "read",
            locks.rw_lock(format!("{prefix}:rw")).read().acquire().await,
        ),
    ];
    let mut handles = Vec::new();
    for (kind, guard) in holds {
        let guard = Arc::new(guard.expect("acquire"));
        for _ in 0..tasks {
            let guard = guard.clone();
            handles.push(tokio::spawn(async move {
                let mut last_held = 0;
                loop {
                    // Taken before the check: a check after the rival's grant has a later stamp.
                    let at = mono_ns();
                    if guard.is_lost() {
                        return format!("uses {kind} {last_held} {at}");
                    }
                    // The "use" of the resource would be here.
                    last_held = at;
                    // Busy tasks, as on a loaded runtime: after a pause they are ready to run
                    // before the timer driver (and the watchdog task) gets a turn.
                    tokio::task::yield_now().await;
                }
            }));
        }
        handles.push(tokio::spawn(async move {
            let _ = guard.lost().await;
            let at = mono_ns();
            // A token asked for after the loss (the mutex's first: it was taken without one)
            // is refused.
            let token = match guard.fencing_token().await {
                Ok(token) => token.to_string(),
                Err(_) => "refused".to_owned(),
            };
            format!("signal {kind} {at} {token}")
        }));
    }
    println!("held");
    for handle in handles {
        println!("{}", handle.await.expect("task"));
    }
    println!("done");
}

mod family {
    use std::time::Duration;

    use lock_runtime::{LockClient, LockError, LockGuard};
    use lock_tests::mono_ns;

    /// Takes `name` as `kind` once; `write` picks the write side of a read/write lock.
    async fn take(
        locks: &LockClient,
        kind: &str,
        name: &str,
        write: bool,
    ) -> Result<(LockGuard, &'static str), LockError> {
        if let Some(capacity) = kind.strip_prefix("semaphore:") {
            let capacity = capacity.parse().expect("capacity");
            let guard = locks.semaphore(name, capacity).acquire().await?;
            return Ok((guard, "permit"));
        }
        match kind {
            "fair" => Ok((locks.fair_lock(name).acquire().await?, "fair")),
            "rw" | "read" | "write" if write || kind == "write" => {
                Ok((locks.rw_lock(name).write().acquire().await?, "write"))
            }
            "rw" | "read" => Ok((locks.rw_lock(name).read().acquire().await?, "read")),
            other => panic!("unknown kind {other}"),
        }
    }

    pub(super) async fn sections(
        url: &str,
        kind: &str,
        name: &str,
        tasks: &str,
        rounds: &str,
        hold_ms: &str,
    ) {
        let tasks: usize = tasks.parse().expect("tasks");
        let rounds: usize = rounds.parse().expect("rounds");
        let hold = Duration::from_millis(hold_ms.parse().expect("hold ms"));
        let locks = LockClient::connect(url).await.expect("connect");
        let mut handles = Vec::new();
        for task in 0..tasks {
            let (locks, kind, name) = (locks.clone(), kind.to_owned(), name.to_owned());
            handles.push(tokio::spawn(async move {
                let mut lines = Vec::new();
                for round in 0..rounds {
                    let write = (task + round).is_multiple_of(4);
                    let asked = mono_ns();
                    let (guard, what) = take(&locks, &kind, &name, write).await.expect("take");
                    let start = mono_ns();
                    tokio::time::sleep(hold).await;
                    let end = mono_ns();
                    assert!(!guard.is_lost(), "lost while held");
                    guard.release().await.expect("release");
                    lines.push(format!("section {what} {asked} {start} {end}"));
                }
                lines
            }));
        }
        for handle in handles {
            for line in handle.await.expect("task") {
                println!("{line}");
            }
        }
        println!("done");
    }

    pub(super) async fn chaos(url: &str, ms: &str, watchdog_ms: &str, out: &str) {
        use std::io::Write;
        use std::sync::{Arc, Mutex};

        let until = tokio::time::Instant::now() + Duration::from_millis(ms.parse().expect("ms"));
        let locks = LockClient::builder(url)
            .watchdog_timeout(Duration::from_millis(watchdog_ms.parse().expect("ms")))
            .response_timeout(Duration::from_millis(500))
            .build()
            .await
            .expect("connect");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out)
            .expect("out file");
        let file = Arc::new(Mutex::new(file));
        let kinds = ["semaphore:2", "semaphore:2", "rw", "rw", "fair", "fair"];
        let mut handles = Vec::new();
        for (task, kind) in kinds.into_iter().enumerate() {
            let (locks, file) = (locks.clone(), file.clone());
            handles.push(tokio::spawn(async move {
                let name = match kind {
                    "rw" => "family:rw",
                    "fair" => "family:fair",
                    _ => "family:sem",
                };
                let mut sections = 0usize;
                let mut round = 0usize;
                while tokio::time::Instant::now() < until {
                    round += 1;
                    let write = (task + round).is_multiple_of(4);
                    let asked = mono_ns();
                    let taken = tokio::time::timeout(
                        Duration::from_secs(3),
                        take(&locks, kind, name, write),
                    )
                    .await;
                    let Ok(Ok((guard, what))) = taken else {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    let start = mono_ns();
                    tokio::time::sleep(Duration::from_millis(2 + (round % 4) as u64)).await;
                    let end = mono_ns();
                    let lost = guard.is_lost();
                    let what = if what == "permit" { "semaphore" } else { what };
                    {
                        let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
                        let _ = writeln!(f, "{what} {asked} {start} {end} {lost}");
                    }
                    sections += 1;
                    let _ = guard.release().await;
                }
                sections
            }));
        }
        let mut sections = 0;
        for handle in handles {
            sections += handle.await.expect("task");
        }
        // Let background releases and unsubscriptions settle.
        for _ in 0..100 {
            if locks.held_locks() == 0 && locks.subscribed_channels() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        println!(
            "exit held={} subscribed={} sections={sections}",
            locks.held_locks(),
            locks.subscribed_channels()
        );
    }

    pub(super) async fn hold(url: &str, kind: &str, name: &str, watchdog_ms: &str) {
        let locks = LockClient::builder(url)
            .watchdog_timeout(Duration::from_millis(watchdog_ms.parse().expect("ms")))
            .build()
            .await
            .expect("connect");
        let waiting = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            println!("waiting");
            std::future::pending::<()>().await
        };
        let (guard, _) = tokio::select! {
            taken = take(&locks, kind, name, false) => taken.expect("take"),
            () = waiting => unreachable!(),
        };
        println!("held {}", guard.fencing_token().await.expect("token"));
        std::future::pending::<()>().await;
    }
}

/// Which master a Sentinel client used when: lock-runtime's events "Sentinel named the master"
/// (`master`) and "Sentinel failed over to a new master; switched connections" (`new`), one
/// line each, `<mono-ns> <host:port>`, appended to a file (the failover suite attributes each
/// grant to the master its client used at the time: `chaos::attribute_masters`).
mod masters {
    use std::io::Write;
    use std::sync::Mutex;

    use lock_tests::mono_ns;
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    struct Masters {
        out: Mutex<std::fs::File>,
    }

    #[derive(Default)]
    struct Fields {
        message: String,
        master: Option<String>,
    }

    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            let text = format!("{value:?}");
            match field.name() {
                "message" => self.message = text,
                "master" | "new" => self.master = Some(text),
                _ => {}
            }
        }
    }

    impl Subscriber for Masters {
        fn enabled(&self, meta: &Metadata<'_>) -> bool {
            meta.target().starts_with("lock_runtime::topology")
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut fields = Fields::default();
            event.record(&mut fields);
            let named = fields.message.contains("Sentinel named the master")
                || fields.message.contains("switched connections");
            if let (true, Some(master)) = (named, fields.master) {
                let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
                let _ = writeln!(out, "{} {master}", mono_ns());
                let _ = out.flush();
            }
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    /// Appends the client's master to `path` from now on.
    pub(super) fn record_to(path: &str) {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("masters file");
        let _ = tracing::subscriber::set_global_default(Masters {
            out: Mutex::new(out),
        });
    }
}

mod chaos {
    use std::io::Write;
    use std::time::Duration;

    use lock_runtime::{LockClient, LockGuard, LockOptions};
    use lock_tests::chaos::sql::SqlStore;
    use lock_tests::chaos::{FENCED_READ, FENCED_WRITE, Outcome, Record, store_keys};
    use lock_tests::mono_ns;
    use rand::Rng;
    use redis::aio::MultiplexedConnection;

    /// A client of `url`: one server's URL, or a Sentinel deployment written
    /// `sentinel:<master-name>@<sentinel-url>,<sentinel-url>…`, with `+ack` at the end for
    /// `replica_ack(1, 100 ms)` (the failover suite, `tests/failover.rs`).
    async fn client(url: &str, watchdog_ms: &str, group_commit: bool) -> LockClient {
        let builder = match url.strip_prefix("sentinel:") {
            Some(spec) => {
                let (spec, ack) = match spec.strip_suffix("+ack") {
                    Some(spec) => (spec, true),
                    None => (spec, false),
                };
                let (master, sentinels) = spec.split_once('@').expect("sentinel:<master>@<urls>");
                let builder = LockClient::sentinel_builder(sentinels.split(','), master)
                    .failover_grace(Duration::from_secs(20));
                if ack {
                    builder.replica_ack(1, Duration::from_millis(100))
                } else {
                    builder
                }
            }
            None => cluster_or_single(url),
        };
        builder
            .watchdog_timeout(Duration::from_millis(
                watchdog_ms.parse().expect("watchdog ms"),
            ))
            .response_timeout(Duration::from_millis(500))
            .connect_timeout(Duration::from_secs(5))
            .group_commit(group_commit)
            .build()
            .await
            .expect("connect")
    }

    /// The builder of a Redis Cluster `<lock-url>`, `cluster:<node-url>,<node-url>…` (seed
    /// nodes), with `+ack` at the end for `replica_ack(1, 100 ms)` (the Cluster failover suite,
    /// `tests/failover_cluster.rs`), or of one server's URL.
    fn cluster_or_single(url: &str) -> lock_runtime::LockClientBuilder {
        let Some(spec) = url.strip_prefix("cluster:") else {
            return LockClient::builder(url);
        };
        let (spec, ack) = match spec.strip_suffix("+ack") {
            Some(spec) => (spec, true),
            None => (spec, false),
        };
        let builder =
            LockClient::cluster_builder(spec.split(',')).failover_grace(Duration::from_secs(20));
        if ack {
            builder.replica_ack(1, Duration::from_millis(100))
        } else {
            builder
        }
    }

    /// One fenced store of the workload: the compare-and-set on a Redis, or a SQL store through
    /// lock-fence.
    enum Store {
        Redis(MultiplexedConnection),
        Sql(SqlStore),
    }

    /// A task's stores, one per URL of `urls`: a connection of its own to each Redis, the
    /// process's pool of each SQL store (`sql`, index-aligned).
    async fn task_stores(urls: &[&str], sql: &[Option<SqlStore>]) -> Vec<Store> {
        let mut stores = Vec::new();
        for (url, sql) in urls.iter().zip(sql) {
            stores.push(match sql {
                Some(sql) => Store::Sql(sql.clone()),
                None => Store::Redis(
                    redis::Client::open(*url)
                        .expect("store url")
                        .get_multiplexed_async_connection()
                        .await
                        .expect("store"),
                ),
            });
        }
        stores
    }

    /// The fenced read-modify-write on whichever store.
    async fn section(store: &mut Store, key: &str, token: u64, pause: Duration) -> Outcome {
        match store {
            Store::Redis(conn) => critical_section(conn, key, token, pause).await,
            Store::Sql(sql) => sql.section(key, token, pause).await,
        }
    }

    /// The fenced read-modify-write on a Redis store.
    async fn critical_section(
        store: &mut MultiplexedConnection,
        key: &str,
        token: u64,
        pause: Duration,
    ) -> Outcome {
        let [tk, vk, lk] = store_keys(key);
        let read: redis::RedisResult<(i64, u64)> = FENCED_READ
            .key(&tk)
            .key(&vk)
            .arg(token)
            .invoke_async(store)
            .await;
        let value = match read {
            Ok((1, v)) => v,
            Ok(_) => return Outcome::RejectedRead,
            Err(_) => return Outcome::Failed,
        };
        // The non-atomic part: only the lock (and, when it is lost, fencing) keeps it right.
        tokio::time::sleep(pause).await;
        let wrote: redis::RedisResult<i64> = FENCED_WRITE
            .key(&tk)
            .key(&vk)
            .key(&lk)
            .arg(token)
            .arg(value + 1)
            .invoke_async(store)
            .await;
        match wrote {
            Ok(1) => Outcome::Committed,
            Ok(_) => Outcome::RejectedWrite,
            Err(_) => Outcome::Failed,
        }
    }

    /// When the request that granted `guard`'s hold was sent (`LockGuard::granted_at`), on
    /// [`mono_ns`]. Kept within `[invoked, start]`, where the send must be.
    fn granted_ns(guard: &LockGuard, invoked: u64, start: u64) -> u64 {
        // The monotonic clock read before `Instant::now()`: the result errs early, never late.
        let now_ns = mono_ns();
        let now = tokio::time::Instant::now();
        let ago = now.saturating_duration_since(guard.granted_at()).as_nanos() as u64;
        now_ns.saturating_sub(ago).clamp(invoked, start)
    }

    fn record(
        out: &std::sync::Mutex<std::fs::File>,
        guard: &LockGuard,
        token: u64,
        [invoked_ns, asked_ns, start_ns]: [u64; 3],
        fenced: bool,
        outcome: Outcome,
    ) {
        let r = Record {
            key: guard.name().to_string(),
            token,
            owner: guard.owner().to_string(),
            start_ns,
            asked_ns,
            invoked_ns,
            fenced,
            end_ns: mono_ns(),
            outcome,
            lost: guard.is_lost(),
        };
        let mut f = out.lock().unwrap_or_else(|e| e.into_inner());
        // One write per line, flushed: a SIGKILL loses at most the section in flight.
        let _ = writeln!(f, "{r}");
        let _ = f.flush();
    }

    pub(super) async fn workload(args: &[&str]) {
        // The failover suite adds the lock family (`family`); half the chaos workers send
        // their writes with group commit (see tests/chaos.rs).
        let (args, family) = match args {
            [rest @ .., "family"] => (rest, true),
            all => (all, false),
        };
        let (args, group_commit) = match args {
            [rest @ .., "group-commit"] => (rest, true),
            all => (all, false),
        };
        let [
            lock_url,
            store_url,
            keys,
            tasks,
            duration_ms,
            watchdog_ms,
            out,
        ] = args
        else {
            panic!(
                "chaos <lock-url> <store-url> <keys> <tasks> <duration-ms> <watchdog-ms> <out> [group-commit]"
            );
        };
        let keys: usize = keys.parse().expect("keys");
        let tasks: usize = tasks.parse().expect("tasks");
        let until =
            tokio::time::Instant::now() + Duration::from_millis(duration_ms.parse().expect("ms"));
        if lock_url.starts_with("sentinel:") {
            super::masters::record_to(&format!("{out}.masters"));
        }
        let locks = client(lock_url, watchdog_ms, group_commit).await;
        let store_urls: Vec<&str> = store_url.split(',').collect();
        let mut sql = Vec::new();
        for url in &store_urls {
            sql.push(if SqlStore::is_sql_url(url) {
                Some(SqlStore::connect(url).await.expect("sql store"))
            } else {
                None
            });
        }
        let out_path = *out;
        let out = std::sync::Arc::new(std::sync::Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(out)
                .expect("open out"),
        ));
        let cancelled = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut handles = Vec::new();
        if family {
            let sections = std::sync::Arc::new(std::sync::Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(format!("{out_path}.family"))
                    .expect("open family out"),
            ));
            let redis_url = (store_urls.iter())
                .find(|url| !SqlStore::is_sql_url(url))
                .expect("the family workload needs a Redis store");
            let store = redis::Client::open(*redis_url).expect("store url");
            for task in 0..4 {
                let (locks, sections) = (locks.clone(), sections.clone());
                let mut store = store
                    .get_multiplexed_async_connection()
                    .await
                    .expect("store");
                handles.push(tokio::spawn(async move {
                    family_sections(&locks, &mut store, &sections, task < 2, task, until).await;
                }));
            }
        }
        for _ in 0..tasks {
            let locks = locks.clone();
            let out = out.clone();
            let cancelled = cancelled.clone();
            let cancel = move || {
                cancelled.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            };
            let mut stores = task_stores(&store_urls, &sql).await;
            handles.push(tokio::spawn(async move {
                while tokio::time::Instant::now() < until {
                    let (k, mode, cancel_at, pause) = {
                        let mut rng = rand::rng();
                        (
                            rng.random_range(0..keys),
                            rng.random_range(0..10u8),
                            Duration::from_micros(rng.random_range(0..4000)),
                            Duration::from_micros(rng.random_range(0..2000)),
                        )
                    };
                    let key = format!("chaos:{k}");
                    let n = stores.len();
                    let store = &mut stores[k % n];
                    // Lazy and eager tokens interleaved on every name: half of the sections
                    // take their lock fenced (the token with the grant), the others ask for it
                    // in the section (and pass a hot lock between tasks in memory).
                    let lock = if mode >= 5 {
                        locks.lock(&key).fenced()
                    } else {
                        locks.lock(&key)
                    };
                    let opts = LockOptions::new().wait(Duration::from_secs(5));
                    let invoked = mono_ns();
                    let guard = if mode == 0 {
                        // Cancellation fuzz: the acquire is dropped at a random point.
                        match tokio::time::timeout(cancel_at, lock.acquire_with(opts)).await {
                            Ok(Ok(g)) => g,
                            Ok(Err(_)) => continue,
                            Err(_) => {
                                cancel();
                                continue;
                            }
                        }
                    } else {
                        match lock.acquire_with(opts).await {
                            Ok(g) => g,
                            Err(_) => {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                continue;
                            }
                        }
                    };
                    let start = mono_ns();
                    // A fenced grant's token was issued by the request that granted the lock,
                    // sent after any wait (judged from then); one on demand is asked for now.
                    let fenced = mode >= 5;
                    let asked = if fenced {
                        granted_ns(&guard, invoked, start)
                    } else {
                        start
                    };
                    let Ok(token) = guard.fencing_token().await else {
                        // Lost before it was asked for: no token, so nothing to write with.
                        continue;
                    };
                    let body = guard.run(section(store, &key, token, pause));
                    let outcome = if mode == 1 {
                        // Cancellation fuzz: the body is dropped at a random point.
                        match tokio::time::timeout(cancel_at, body).await {
                            Ok(Ok(o)) => o,
                            Ok(Err(_lost)) => Outcome::Failed,
                            Err(_) => {
                                cancel();
                                Outcome::Cancelled
                            }
                        }
                    } else {
                        match body.await {
                            Ok(o) => o,
                            Err(_lost) => Outcome::Failed,
                        }
                    };
                    record(
                        &out,
                        &guard,
                        token,
                        [invoked, asked, start],
                        fenced,
                        outcome,
                    );
                    if mode == 2 {
                        // Cancellation fuzz: the release is dropped at a random point.
                        if tokio::time::timeout(cancel_at / 4, guard.release())
                            .await
                            .is_err()
                        {
                            cancel();
                        }
                    } else {
                        let _ = guard.release().await;
                    }
                }
            }));
        }
        for h in handles {
            h.await.expect("task");
        }
        // Give the background releaser a moment, then report what is left.
        tokio::time::sleep(Duration::from_millis(300)).await;
        println!(
            "exit held={} subscribed={} handoffs={} cancelled={}",
            locks.held_locks(),
            locks.subscribed_channels(),
            locks.stats().handoffs,
            cancelled.load(std::sync::atomic::Ordering::Relaxed)
        );
    }

    /// The lock family under the failover suite's faults: a task on the semaphore
    /// (`family:sem`, [`PERMITS`](lock_tests::family::PERMITS) permits) enters, uses and exits
    /// the fenced resource with its permit's token; a task on the read/write lock
    /// (`family:rw`, one section in four writes) reads, or read-modify-writes, the fenced
    /// counter (`lock_tests::chaos::family_store`). One line per section:
    /// `<semaphore|read|write> <asked-ns> <start-ns> <end-ns> <lost> <outcome>`.
    async fn family_sections(
        locks: &LockClient,
        store: &mut MultiplexedConnection,
        out: &std::sync::Mutex<std::fs::File>,
        semaphore: bool,
        task: usize,
        until: tokio::time::Instant,
    ) {
        use lock_tests::chaos::family_store::{
            ENTER, EXIT, RW_READ, RW_WRITE, USE, rw_keys, semaphore_keys,
        };
        use lock_tests::family::PERMITS;

        let mut round = 0usize;
        while tokio::time::Instant::now() < until {
            round += 1;
            let write = !semaphore && (task + round).is_multiple_of(4);
            let asked = mono_ns();
            let opts = LockOptions::new().wait(Duration::from_secs(5));
            let taken = if semaphore {
                locks
                    .semaphore("family:sem", PERMITS as u32)
                    .acquire_with(opts)
                    .await
            } else if write {
                locks.rw_lock("family:rw").write().acquire_with(opts).await
            } else {
                locks.rw_lock("family:rw").read().acquire_with(opts).await
            };
            let Ok(guard) = taken else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            let start = mono_ns();
            let Ok(token) = guard.fencing_token().await else {
                continue;
            };
            let pause = Duration::from_micros(rand::rng().random_range(500..3000));
            let outcome: redis::RedisResult<Outcome> = async {
                if semaphore {
                    let [occupants, log, uses] = semaphore_keys("family:sem");
                    let entered: i64 = ENTER
                        .key(&occupants)
                        .key(&log)
                        .arg(token)
                        .arg(PERMITS)
                        .invoke_async(store)
                        .await?;
                    if entered != 1 {
                        return Ok(Outcome::RejectedRead);
                    }
                    tokio::time::sleep(pause).await;
                    let used: i64 = USE
                        .key(&occupants)
                        .key(&log)
                        .key(&uses)
                        .arg(token)
                        .invoke_async(store)
                        .await?;
                    let _: i64 = EXIT
                        .key(&occupants)
                        .key(&log)
                        .arg(token)
                        .invoke_async(store)
                        .await?;
                    Ok(if used == 1 {
                        Outcome::Committed
                    } else {
                        Outcome::RejectedWrite
                    })
                } else {
                    let [seen, writer, value, log] = rw_keys("family:rw");
                    let (ok, v): (i64, u64) = RW_READ
                        .key(&seen)
                        .key(&writer)
                        .key(&value)
                        .arg(token)
                        .arg(if write { "1" } else { "0" })
                        .invoke_async(store)
                        .await?;
                    if ok != 1 {
                        return Ok(Outcome::RejectedRead);
                    }
                    tokio::time::sleep(pause).await;
                    if !write {
                        return Ok(Outcome::Committed);
                    }
                    let wrote: i64 = RW_WRITE
                        .key(&seen)
                        .key(&writer)
                        .key(&value)
                        .key(&log)
                        .arg(token)
                        .arg(v + 1)
                        .invoke_async(store)
                        .await?;
                    Ok(if wrote == 1 {
                        Outcome::Committed
                    } else {
                        Outcome::RejectedWrite
                    })
                }
            }
            .await;
            let outcome = outcome.unwrap_or(Outcome::Failed);
            let end = mono_ns();
            let kind = if semaphore {
                "semaphore"
            } else if write {
                "write"
            } else {
                "read"
            };
            {
                let mut f = out.lock().unwrap_or_else(|e| e.into_inner());
                let _ = writeln!(
                    f,
                    "{kind} {asked} {start} {end} {} {outcome:?}",
                    guard.is_lost()
                );
                let _ = f.flush();
            }
            let _ = guard.release().await;
        }
    }

    pub(super) async fn block(args: &[&str]) {
        let [lock_url, store_url, key, block_ms, watchdog_ms, out] = args else {
            panic!("block <lock-url> <store-url> <key> <block-ms> <watchdog-ms> <out>");
        };
        let locks = client(lock_url, watchdog_ms, false).await;
        let store = redis::Client::open(*store_url).expect("store url");
        let mut store = store
            .get_multiplexed_async_connection()
            .await
            .expect("store");
        let out = std::sync::Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(out)
                .expect("open out"),
        );
        let invoked = mono_ns();
        let guard = locks.lock(key).fenced().acquire().await.expect("acquire");
        let start = mono_ns();
        let asked = granted_ns(&guard, invoked, start);
        let token = guard
            .issued_token()
            .expect("a fenced grant carries its token");
        println!("held {token}");
        // Block the only runtime thread: no renewal can run.
        std::thread::sleep(Duration::from_millis(block_ms.parse().expect("ms")));
        // Let the watchdog run once now that the thread is free again.
        tokio::time::sleep(Duration::from_millis(50)).await;
        println!("lost {}", guard.is_lost());
        let outcome = critical_section(&mut store, key, token, Duration::ZERO).await;
        record(&out, &guard, token, [invoked, asked, start], true, outcome);
        println!("outcome {outcome:?}");
        let _ = guard.release().await;
    }
}
