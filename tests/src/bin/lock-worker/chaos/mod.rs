//! The `chaos` mode (tasks lock random keys and do fenced read-modify-writes on the stores,
//! some cancelled at random points; with `family`, the lock family beside them) and the `block`
//! mode (one hold on a thread that stops).

mod client;
mod family;
mod store;

use std::fs::File;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{Lock, LockClient, LockGuard, LockOptions};
use lock_tests::chaos::Outcome;
use lock_tests::chaos::sql::SqlStore;
use lock_tests::mono_ns;
use rand::Rng;
use tokio::time::Instant;

use client::client;
use store::{Store, critical_section, granted_ns, record, section, task_stores};

/// The `chaos` mode's arguments (see the binary's docs).
struct Args<'a> {
    lock_url: &'a str,
    store_urls: Vec<&'a str>,
    keys: usize,
    tasks: usize,
    until: Instant,
    watchdog_ms: &'a str,
    out: &'a str,
    family: bool,
}

impl<'a> Args<'a> {
    fn parse(args: &[&'a str]) -> Args<'a> {
        // The failover suite adds the lock family (`family`).
        let (args, family) = match args {
            [rest @ .., "family"] => (rest, true),
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
                "chaos <lock-url> <store-url> <keys> <tasks> <duration-ms> <watchdog-ms> <out> [family]"
            );
        };
        Args {
            lock_url,
            store_urls: store_url.split(',').collect(),
            keys: keys.parse().expect("keys"),
            tasks: tasks.parse().expect("tasks"),
            until: Instant::now() + Duration::from_millis(duration_ms.parse().expect("ms")),
            watchdog_ms,
            out,
            family,
        }
    }
}

/// Opens `path` for appending records.
fn append(path: &str, what: &str) -> File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect(what)
}

pub(super) async fn workload(args: &[&str]) {
    let args = Args::parse(args);
    if args.lock_url.starts_with("sentinel:") {
        crate::masters::record_to(&format!("{}.masters", args.out));
    }
    let locks = client(args.lock_url, args.watchdog_ms).await;
    let mut sql = Vec::new();
    for url in &args.store_urls {
        sql.push(if SqlStore::is_sql_url(url) {
            Some(SqlStore::connect(url).await.expect("sql store"))
        } else {
            None
        });
    }
    let out = Arc::new(Mutex::new(append(args.out, "open out")));
    let cancelled = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    if args.family {
        handles.extend(family::spawn(&locks, &args.store_urls, args.out, args.until).await);
    }
    for _ in 0..args.tasks {
        let mut task = Task {
            locks: locks.clone(),
            out: out.clone(),
            cancelled: cancelled.clone(),
            stores: task_stores(&args.store_urls, &sql).await,
            keys: args.keys,
        };
        let until = args.until;
        handles.push(tokio::spawn(async move {
            while Instant::now() < until {
                task.round().await;
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
        cancelled.load(Ordering::Relaxed)
    );
}

/// One task of the chaos workload: its client, its stores, where it records.
struct Task {
    locks: LockClient,
    out: Arc<Mutex<File>>,
    cancelled: Arc<AtomicUsize>,
    stores: Vec<Store>,
    keys: usize,
}

/// What a round does, drawn at random: the key, the mode (0: the acquire cancelled, 1: the body
/// cancelled, 2: the release cancelled; 5 and up: fenced), where it cancels, the section's pause.
struct Draw {
    k: usize,
    mode: u8,
    cancel_at: Duration,
    pause: Duration,
}

impl Draw {
    fn new(keys: usize) -> Draw {
        let mut rng = rand::rng();
        Draw {
            k: rng.random_range(0..keys),
            mode: rng.random_range(0..10u8),
            cancel_at: Duration::from_micros(rng.random_range(0..4000)),
            pause: Duration::from_micros(rng.random_range(0..2000)),
        }
    }
}

impl Task {
    /// One critical section: take a random key's lock, do the fenced read-modify-write on its
    /// store, record it, release.
    async fn round(&mut self) {
        let Draw {
            k,
            mode,
            cancel_at,
            pause,
        } = Draw::new(self.keys);
        let key = format!("chaos:{k}");
        let n = self.stores.len();
        // Lazy and eager tokens interleaved on every name: half of the sections take their
        // lock fenced (the token with the grant), the others ask for it in the section (and
        // pass a hot lock between tasks in memory).
        let lock = if mode >= 5 {
            self.locks.lock(&key).fenced()
        } else {
            self.locks.lock(&key)
        };
        let invoked = mono_ns();
        let Some(guard) = self.take(lock, mode, cancel_at).await else {
            return;
        };
        let start = mono_ns();
        // A fenced grant's token was issued by the request that granted the lock, sent after
        // any wait (judged from then); one on demand is asked for now.
        let fenced = mode >= 5;
        let asked = if fenced {
            granted_ns(&guard, invoked, start)
        } else {
            start
        };
        let Ok(token) = guard.fencing_token().await else {
            // Lost before it was asked for: no token, so nothing to write with.
            return;
        };
        let store = &mut self.stores[k % n];
        let body = guard.run(section(store, &key, token, pause));
        let outcome = if mode == 1 {
            // Cancellation fuzz: the body is dropped at a random point.
            match tokio::time::timeout(cancel_at, body).await {
                Ok(Ok(o)) => o,
                Ok(Err(_lost)) => Outcome::Failed,
                Err(_) => {
                    self.cancelled.fetch_add(1, Ordering::Relaxed);
                    Outcome::Cancelled
                }
            }
        } else {
            match body.await {
                Ok(o) => o,
                Err(_lost) => Outcome::Failed,
            }
        };
        let stamps = [invoked, asked, start];
        record(&self.out, &guard, token, stamps, fenced, outcome);
        if mode == 2 {
            // Cancellation fuzz: the release is dropped at a random point.
            if tokio::time::timeout(cancel_at / 4, guard.release())
                .await
                .is_err()
            {
                self.cancelled.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            let _ = guard.release().await;
        }
    }

    /// The acquire, waiting up to 5 s; in mode 0 dropped at `cancel_at`. `None` when no lock
    /// was taken (after a pause of 20 ms when the acquire failed).
    async fn take(&self, lock: Lock, mode: u8, cancel_at: Duration) -> Option<LockGuard> {
        let opts = LockOptions::new().wait(Duration::from_secs(5));
        if mode == 0 {
            // Cancellation fuzz: the acquire is dropped at a random point.
            match tokio::time::timeout(cancel_at, lock.acquire_with(opts)).await {
                Ok(Ok(g)) => Some(g),
                Ok(Err(_)) => None,
                Err(_) => {
                    self.cancelled.fetch_add(1, Ordering::Relaxed);
                    None
                }
            }
        } else {
            match lock.acquire_with(opts).await {
                Ok(g) => Some(g),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    None
                }
            }
        }
    }
}

pub(super) async fn block(args: &[&str]) {
    let [lock_url, store_url, key, block_ms, watchdog_ms, out] = args else {
        panic!("block <lock-url> <store-url> <key> <block-ms> <watchdog-ms> <out>");
    };
    let locks = client(lock_url, watchdog_ms).await;
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
