//! Every request the client builds stays within `MAX_REQUEST_ARGUMENTS` (ElastiCache
//! Serverless refuses a request of more than 3,999 arguments), however many locks it holds and
//! waits for: read back from the server's slow log, which (logging every command) records each
//! command's argument count.
//!
//! A binary of its own: 10,000 locks and their waiters load the machine, and the timing of
//! the tests beside it (short leases) would suffer.

#[path = "common/mod.rs"]
mod common;

use std::time::Duration;

use futures_util::future::join_all;
use lock_runtime::{
    LockClient, LockError, LockGuard, LockOptions, MAX_REQUEST_ARGUMENTS, MIN_REQUEST_ARGUMENTS,
};
use lock_tests::{RedisServer, Resp};

const LOCKS: usize = 10_000;

/// The argument count of a slow log entry: its arguments, of which the log keeps 31 and then
/// "... (N more arguments)".
fn argument_count(entry: &Resp) -> usize {
    let args = entry.items()[3].items();
    let more = args
        .last()
        .and_then(Resp::text)
        .and_then(|last| last.strip_prefix("... ("))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse::<usize>().ok());
    match more {
        Some(more) => args.len() - 1 + more,
        None => args.len(),
    }
}

/// The most arguments of any command in the server's slow log, and that command's name.
fn largest_command(redis: &RedisServer) -> (usize, String) {
    let log = redis.cmd(&["SLOWLOG", "GET", "-1"]);
    let mut most = 0;
    let mut command = String::new();
    for entry in log.items() {
        let count = argument_count(entry);
        if count > most {
            most = count;
            command = entry.items()[3].items()[0].text().unwrap_or("").to_owned();
        }
    }
    (most, command)
}

/// The load both tests put on the client's requests, once `holder` holds every one of `names`
/// (`guards`): a waiter of `waiters` on each (their channels subscribed), the waiters'
/// connection dropped (every channel subscribed again at once), a renewal round of every hold,
/// then every hold released and every waiter served.
async fn wait_resubscribe_renew_and_release(
    redis: &RedisServer,
    holder: &LockClient,
    waiters: &LockClient,
    names: &[String],
    guards: Vec<LockGuard>,
) {
    let count = names.len();
    let tasks: Vec<_> = names
        .iter()
        .map(|name| {
            let waiters = waiters.clone();
            let name = name.clone();
            tokio::spawn(async move {
                let opts = LockOptions::new().wait(Duration::from_secs(60));
                waiters.lock(&name).acquire_with(opts).await
            })
        })
        .collect();
    let subscribed = common::eventually(Duration::from_secs(30), || {
        waiters.subscribed_channels() == count
    })
    .await;
    assert!(subscribed, "{} subscribed", waiters.subscribed_channels());
    // Their connection lost: the client subscribes every channel again at once.
    assert_eq!(redis.kill_clients("pubsub"), 1);
    let resubscribed = common::eventually(Duration::from_secs(30), || {
        redis.pubsub_channels("lock:*").len() == count
    })
    .await;
    assert!(resubscribed, "{}", redis.pubsub_channels("lock:*").len());
    // At least one renewal round of every hold (every second; a loaded machine may be slower).
    let rounds = holder.stats().renewal_round_trips;
    assert!(
        common::eventually(Duration::from_secs(30), || holder
            .stats()
            .renewal_round_trips
            > rounds)
        .await
    );
    join_all(guards.into_iter().map(|g| g.release())).await;
    for task in tasks {
        drop(task.await.unwrap().unwrap());
    }
}

/// A server that logs every command with its arguments.
fn logging_server() -> RedisServer {
    RedisServer::start_with(&[
        "--slowlog-log-slower-than",
        "0",
        "--slowlog-max-len",
        "1000000",
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_exceeds_the_argument_limit_with_10_000_locks_held_and_waited_for() {
    let redis = logging_server();
    // Renewals every second, in calls of 500 locks.
    let holder = common::client_with_watchdog(&redis, Duration::from_secs(3)).await;
    let waiters = common::client(&redis).await;
    let names: Vec<String> = (0..LOCKS).map(|i| format!("many:{i}")).collect();
    let mut guards = Vec::with_capacity(LOCKS);
    for chunk in names.chunks(500) {
        let locks: Vec<_> = chunk.iter().map(|name| holder.lock(name)).collect();
        let taken = join_all(locks.iter().map(|lock| lock.acquire())).await;
        guards.extend(taken.into_iter().map(Result::unwrap));
    }
    wait_resubscribe_renew_and_release(&redis, &holder, &waiters, &names, guards).await;

    let (most, command) = largest_command(&redis);
    assert!(
        most <= MAX_REQUEST_ARGUMENTS,
        "{command} with {most} arguments"
    );
    // The batches were big: the test would have seen one over the limit.
    assert!(most > 1_000, "at most {most} arguments ({command})");
}

/// A lower limit set on the builder holds for every request that grows with the number of
/// locks: 1,000 locks taken at once, renewed, and waited for (their channels subscribed, and again at once after the connection dropped), all
/// in commands of at most 64 arguments; a limit below that is refused at build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lower_argument_limit_set_on_the_builder_holds_for_every_request() {
    const SOME: usize = 1_000;
    let redis = logging_server();
    let limited =
        |b: lock_runtime::LockClientBuilder| b.max_request_arguments(MIN_REQUEST_ARGUMENTS);
    let holder = lock_tests::client_with(&redis, |b| {
        limited(b).watchdog_timeout(Duration::from_secs(3))
    })
    .await;
    let waiters = lock_tests::client_with(&redis, limited).await;
    let names: Vec<String> = (0..SOME).map(|i| format!("few:{i}")).collect();
    let locks: Vec<_> = names.iter().map(|name| holder.lock(name)).collect();
    let guards: Vec<_> = join_all(locks.iter().map(|lock| lock.acquire()))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    wait_resubscribe_renew_and_release(&redis, &holder, &waiters, &names, guards).await;
    let (most, command) = largest_command(&redis);
    assert!(
        most <= MIN_REQUEST_ARGUMENTS,
        "{command} with {most} arguments"
    );
    // Commands were split at the limit, not kept small anyway.
    assert!(
        most > MIN_REQUEST_ARGUMENTS / 2,
        "at most {most} arguments ({command})"
    );
    let refused = LockClient::builder(&redis.url())
        .max_request_arguments(MIN_REQUEST_ARGUMENTS - 1)
        .build()
        .await;
    assert!(
        matches!(&refused, Err(LockError::InvalidConfig(what)) if what.contains("argument limit")),
        "{refused:?}"
    );
}
