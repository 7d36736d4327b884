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

/// Polls `future` up to `polls` times, each poll after the previous one woke it (so each poll
/// reaches the next await point that had to wait), then drops it: a request cut at its
/// `polls`-th await point. Returns the output if it completed within those polls.
///
/// # Panics
/// If the future is not woken within [`LIMIT`] after a poll.
pub async fn poll_then_drop<F: std::future::Future>(future: F, polls: usize) -> Option<F::Output> {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    struct Woken(tokio::sync::Notify);
    impl Wake for Woken {
        fn wake(self: Arc<Self>) {
            // A permit is stored if no one waits yet: a wake before the wait is not lost.
            self.0.notify_one();
        }
    }

    let woken = Arc::new(Woken(tokio::sync::Notify::new()));
    let waker = Waker::from(Arc::clone(&woken));
    let mut future = std::pin::pin!(future);
    for poll in 1..=polls {
        // A `Context` is not `Send`: made for each poll, not held across the wait.
        let polled = future.as_mut().poll(&mut Context::from_waker(&waker));
        if let Poll::Ready(output) = polled {
            return Some(output);
        }
        tokio::time::timeout(LIMIT, woken.0.notified())
            .await
            .unwrap_or_else(|_| panic!("poll {poll}: not woken within {LIMIT:?}"));
    }
    None
}

/// How many cut points the drop tests try before giving up on the future completing.
pub const MAX_POLLS: usize = 200;

/// Starts a transaction with `begin` and cuts it at its n-th await point ([`poll_then_drop`]),
/// for n = 0, 1, 2, … until it completes (the completed one is rolled back); after each round
/// `check` looks at what the cut left behind (it gets a description of the cut for its
/// messages).
///
/// # Panics
/// If the begin fails, or does not complete within [`MAX_POLLS`] rounds.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub async fn begin_cut_at_every_await_point<DB, B, F>(begin: B, mut check: impl AsyncFnMut(String))
where
    DB: sqlx::Database,
    B: Fn() -> F,
    F: std::future::Future<Output = Result<sqlx::Transaction<'static, DB>, FenceError>>,
{
    for polls in 0..MAX_POLLS {
        let begun = poll_then_drop(begin(), polls).await;
        let completed = begun.is_some();
        if let Some(tx) = begun {
            tx.unwrap().rollback().await.unwrap();
        }
        check(format!("begin dropped after {polls} polls")).await;
        if completed {
            return;
        }
    }
    panic!("begin did not complete within {MAX_POLLS} polls");
}

/// Runs `tasks` fenced sections at once, all cut at their n-th await point ([`poll_then_drop`]),
/// for n = 0, 1, 2, … until every one completes; after each round `check` looks at what the
/// cut left behind (it gets a description of the cut for its messages). A section is started
/// by `section(token)`, with tokens increasing from round to round.
///
/// Returns how many sections said they committed and how many were dropped (a section dropped
/// in its commit may have committed without hearing it).
///
/// # Panics
/// If a section fails other than by a stale token, or they do not all complete within
/// [`MAX_POLLS`] rounds.
pub async fn sections_cut_at_every_await_point<S, F>(
    tasks: u32,
    section: S,
    mut check: impl AsyncFnMut(String),
) -> (i64, i64)
where
    S: Fn(u64) -> F,
    F: std::future::Future<Output = Result<(), FenceError>> + Send + 'static,
{
    let (mut committed, mut dropped) = (0, 0);
    for polls in 0..MAX_POLLS {
        let sections: Vec<_> = (0..tasks)
            .map(|task| {
                let token = (polls as u64 + 1) * 10 + u64::from(task);
                let section = section(token);
                tokio::spawn(async move { poll_then_drop(section, polls).await })
            })
            .collect();
        let mut completed = 0;
        for section in sections {
            match section.await.unwrap() {
                Some(Ok(())) => {
                    completed += 1;
                    committed += 1;
                }
                Some(Err(e)) if e.is_stale() => completed += 1,
                Some(Err(e)) => panic!("after {polls} polls: {e}"),
                None => dropped += 1,
            }
        }
        check(format!("sections dropped after {polls} polls")).await;
        if completed == tasks {
            return (committed, dropped);
        }
    }
    panic!("the sections did not complete within {MAX_POLLS} polls");
}
