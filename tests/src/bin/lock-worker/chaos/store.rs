//! The fenced stores a section writes to (a Redis compare-and-set, or a SQL store through
//! lock-fence), and the record of each section.

use std::io::Write;
use std::time::Duration;

use lock_runtime::LockGuard;
use lock_tests::chaos::sql::SqlStore;
use lock_tests::chaos::{FENCED_READ, FENCED_WRITE, Outcome, Record, store_keys};
use lock_tests::mono_ns;
use redis::aio::MultiplexedConnection;

/// One fenced store of the workload: the compare-and-set on a Redis, or a SQL store through
/// lock-fence.
pub(super) enum Store {
    Redis(MultiplexedConnection),
    Sql(SqlStore),
}

/// A task's stores, one per URL of `urls`: a connection of its own to each Redis, the
/// process's pool of each SQL store (`sql`, index-aligned).
pub(super) async fn task_stores(urls: &[&str], sql: &[Option<SqlStore>]) -> Vec<Store> {
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
pub(super) async fn section(store: &mut Store, key: &str, token: u64, pause: Duration) -> Outcome {
    match store {
        Store::Redis(conn) => critical_section(conn, key, token, pause).await,
        Store::Sql(sql) => sql.section(key, token, pause).await,
    }
}

/// The fenced read-modify-write on a Redis store.
pub(super) async fn critical_section(
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
pub(super) fn granted_ns(guard: &LockGuard, invoked: u64, start: u64) -> u64 {
    // The monotonic clock read before `Instant::now()`: the result errs early, never late.
    let now_ns = mono_ns();
    let now = tokio::time::Instant::now();
    let ago = now.saturating_duration_since(guard.granted_at()).as_nanos() as u64;
    now_ns.saturating_sub(ago).clamp(invoked, start)
}

/// Appends one section's record to `out`.
pub(super) fn record(
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
