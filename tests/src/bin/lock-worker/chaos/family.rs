//! The lock family beside the chaos workload (its `family` option): tasks on a semaphore and on
//! a read/write lock, each section using a fenced resource on the first Redis store.

use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockGuard, LockOptions};
use lock_tests::chaos::Outcome;
use lock_tests::chaos::family_store::{
    ENTER, EXIT, RW_READ, RW_WRITE, USE, rw_keys, semaphore_keys,
};
use lock_tests::chaos::sql::SqlStore;
use lock_tests::family::PERMITS;
use lock_tests::mono_ns;
use rand::Rng;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

/// Four tasks, two on the semaphore and two on the read/write lock, recording to
/// `<out>.family`.
pub(super) async fn spawn(
    locks: &LockClient,
    store_urls: &[&str],
    out: &str,
    until: Instant,
) -> Vec<tokio::task::JoinHandle<()>> {
    let sections = Arc::new(Mutex::new(super::append(
        &format!("{out}.family"),
        "open family out",
    )));
    let redis_url = (store_urls.iter())
        .find(|url| !SqlStore::is_sql_url(url))
        .expect("the family workload needs a Redis store");
    let store = redis::Client::open(*redis_url).expect("store url");
    let mut handles = Vec::new();
    for task in 0..4 {
        let (locks, sections) = (locks.clone(), sections.clone());
        let mut store = store
            .get_multiplexed_async_connection()
            .await
            .expect("store");
        handles.push(tokio::spawn(async move {
            sections_of(&locks, &mut store, &sections, task < 2, task, until).await;
        }));
    }
    handles
}

/// The lock family under the failover suite's faults: a task on the semaphore
/// (`family:sem`, [`PERMITS`] permits) enters, uses and exits the fenced resource with its
/// permit's token; a task on the read/write lock (`family:rw`, one section in four writes)
/// reads, or read-modify-writes, the fenced counter (`lock_tests::chaos::family_store`). One
/// line per section: `<semaphore|read|write> <asked-ns> <start-ns> <end-ns> <lost> <outcome>`.
async fn sections_of(
    locks: &LockClient,
    store: &mut MultiplexedConnection,
    out: &Mutex<File>,
    semaphore: bool,
    task: usize,
    until: Instant,
) {
    let mut round = 0usize;
    while Instant::now() < until {
        round += 1;
        let write = !semaphore && (task + round).is_multiple_of(4);
        let asked = mono_ns();
        let Ok(guard) = take(locks, semaphore, write).await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let start = mono_ns();
        let Ok(token) = guard.fencing_token().await else {
            continue;
        };
        let pause = Duration::from_micros(rand::rng().random_range(500..3000));
        let outcome = if semaphore {
            use_permit(store, token, pause).await
        } else {
            read_or_write(store, token, write, pause).await
        };
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

/// A permit of `family:sem`, or a side of `family:rw`, waiting up to 5 s.
async fn take(locks: &LockClient, semaphore: bool, write: bool) -> Result<LockGuard, LockError> {
    let opts = LockOptions::new().wait(Duration::from_secs(5));
    if semaphore {
        locks
            .semaphore("family:sem", PERMITS as u32)
            .acquire_with(opts)
            .await
    } else if write {
        locks.rw_lock("family:rw").write().acquire_with(opts).await
    } else {
        locks.rw_lock("family:rw").read().acquire_with(opts).await
    }
}

/// The semaphore's section: enter the fenced resource with the permit's token, use it, exit.
async fn use_permit(
    store: &mut MultiplexedConnection,
    token: u64,
    pause: Duration,
) -> redis::RedisResult<Outcome> {
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
}

/// The read/write lock's section: read the fenced counter, and on the write side write it back
/// plus one.
async fn read_or_write(
    store: &mut MultiplexedConnection,
    token: u64,
    write: bool,
    pause: Duration,
) -> redis::RedisResult<Outcome> {
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
