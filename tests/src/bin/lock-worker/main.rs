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
//!     appended to <out>: `<semaphore|read|write|fair> <asked-ns> <start-ns> <end-ns> <lost>`,
//!     and ` passed` for a permit passed in memory by the other task of the process;
//!     prints `exit held=<n> subscribed=<n> sections=<n>` at the end.
//! lock-worker chaos <lock-url> <store-url> <keys> <tasks> <duration-ms> <watchdog-ms> <out>
//!     [family]
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

mod chaos;
mod family;
mod masters;

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
