//! What the lock-fence integration tests share.
// Each test binary uses part of it.
#![allow(dead_code, unreachable_pub)]

use std::fmt::Debug;
use std::time::Duration;

use lock_fence::{FenceError, TokenColumn};
use lock_runtime::{Lock, LockGuard, LockOptions};

/// How long a test waits for a server, a lock or a waiting session.
pub const LIMIT: Duration = Duration::from_secs(10);

/// Takes `lock` at once with an explicit 300 ms lease (no watchdog), so that the lease runs out
/// while the holder stalls; see [`until_lease_ran_out`].
pub async fn acquire_short_lease(lock: &Lock) -> LockGuard {
    lock.acquire_with(
        LockOptions::new()
            .wait(Duration::ZERO)
            .lease(Duration::from_millis(300)),
    )
    .await
    .unwrap()
}

/// Waits (bounded) until the lease of `guard` has run out.
pub async fn until_lease_ran_out(guard: &LockGuard) {
    tokio::time::timeout(LIMIT, guard.lost())
        .await
        .expect("the lease runs out");
}

/// Asserts that `result` is [`FenceError::Stale`]: `token` refused, `newest` recorded.
pub fn assert_stale(result: Result<impl Debug, FenceError>, token: u64, newest: u64) {
    match result {
        Err(FenceError::Stale {
            token: t,
            newest: n,
            ..
        }) => assert_eq!((t, n), (token, newest)),
        other => panic!("expected Stale {{ token: {token}, newest: {newest} }}, got {other:?}"),
    }
}

/// [`assert_stale`], and the error names `name`.
pub fn assert_stale_named(
    result: Result<impl Debug, FenceError>,
    name: &str,
    token: u64,
    newest: u64,
) {
    match &result {
        Err(FenceError::Stale { name: n, .. }) => assert_eq!(n, name),
        other => panic!("{other:?}"),
    }
    assert_stale(result, token, newest);
}

/// Asserts that [`TokenColumn::new`] refuses every `(table, key, column)`.
pub fn assert_invalid_identifiers(cases: &[(&str, &str, &str)]) {
    for &(table, key, column) in cases {
        match TokenColumn::new(table, key, column) {
            Err(FenceError::InvalidIdentifier { .. }) => {}
            other => panic!("{table:?} {key:?} {column:?} accepted: {other:?}"),
        }
    }
}

/// Waits (bounded) until `n` sessions of the pool's database wait for a lock.
#[cfg(feature = "postgres")]
pub async fn until_lock_waiters(pool: &sqlx::PgPool, n: i64) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        if waiting >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no session waited for a lock within {LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
