//! Metrics (feature `metrics`): what the client records into the `metrics` facade, by group.
//!
//! Every test of this binary shares one global recorder; each test uses its own group(s). A
//! snapshot drains what it returns, so every snapshot is accumulated here.

mod common;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use lock_runtime::metrics as m;
use lock_runtime::{LockError, LockOptions, LossReason};
use lock_tests::RedisServer;
use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

type Labels = Vec<(String, String)>;

#[derive(Default)]
struct Seen {
    counters: HashMap<(String, Labels), u64>,
    gauges: HashMap<(String, Labels), f64>,
    histograms: HashMap<(String, Labels), Vec<f64>>,
}

struct Store {
    snapshotter: Snapshotter,
    seen: Mutex<Seen>,
}

fn store() -> &'static Store {
    static STORE: OnceLock<Store> = OnceLock::new();
    STORE.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");
        Store {
            snapshotter,
            seen: Mutex::new(Seen::default()),
        }
    })
}

/// Takes a snapshot and merges it into what was seen so far (histogram samples accumulate).
fn seen() -> std::sync::MutexGuard<'static, Seen> {
    let store = store();
    let mut seen = store.seen.lock().unwrap();
    for (key, _, _, value) in store.snapshotter.snapshot().into_vec() {
        let (kind, key) = key.into_parts();
        let mut labels: Labels = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        let id = (key.name().to_owned(), labels);
        match (kind, value) {
            // A snapshot resets counters and gauges to 0: what it returns is the change since
            // the last one (the client only ever increments and decrements its gauges).
            (MetricKind::Counter, DebugValue::Counter(n)) => {
                *seen.counters.entry(id).or_default() += n;
            }
            (MetricKind::Gauge, DebugValue::Gauge(g)) => {
                *seen.gauges.entry(id).or_default() += g.into_inner();
            }
            (MetricKind::Histogram, DebugValue::Histogram(xs)) => {
                seen.histograms
                    .entry(id)
                    .or_default()
                    .extend(xs.into_iter().map(|x| x.into_inner()));
            }
            other => panic!("unexpected metric value {other:?}"),
        }
    }
    seen
}

fn id(name: &str, labels: &[(&str, &str)]) -> (String, Labels) {
    let mut labels: Labels = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    (name.to_owned(), labels)
}

fn counter(name: &str, labels: &[(&str, &str)]) -> u64 {
    seen().counters.get(&id(name, labels)).copied().unwrap_or(0)
}

fn gauge(name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    seen().gauges.get(&id(name, labels)).copied()
}

fn samples(name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    seen()
        .histograms
        .get(&id(name, labels))
        .cloned()
        .unwrap_or_default()
}

/// Every label value recorded so far, of every metric.
fn label_values() -> Vec<String> {
    let seen = seen();
    let ids = (seen.counters.keys())
        .chain(seen.gauges.keys())
        .chain(seen.histograms.keys());
    ids.flat_map(|(_, labels)| labels.iter().map(|(_, v)| v.clone()))
        .collect()
}

/// No metric carries any of `names` as a label value.
fn assert_no_name_labels(names: &[&str]) {
    let values = label_values();
    for name in names {
        assert!(
            !values.iter().any(|v| v == name),
            "the full lock name {name:?} is a label value: {values:?}"
        );
    }
}

/// The script and function calls Redis ran since the last `CONFIG RESETSTAT`.
fn script_calls(redis: &RedisServer) -> u64 {
    let info = redis.cmd(&["INFO", "commandstats"]);
    info.text()
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("cmdstat_fcall:") || l.starts_with("cmdstat_evalsha:"))
        .filter_map(|l| {
            l.split(&[':', ','][..])
                .find_map(|kv| kv.strip_prefix("calls="))
        })
        .filter_map(|n| n.parse::<u64>().ok())
        .sum()
}

async fn eventually(cond: impl FnMut() -> bool) -> bool {
    common::eventually(Duration::from_secs(3), cond).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_timeouts_and_holds_are_recorded_under_the_default_group() {
    store();
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let other = common::client(&redis).await;
    let group = [(m::LABEL_GROUP, "mdefault")];
    let acquired = [(m::LABEL_GROUP, "mdefault"), (m::LABEL_OUTCOME, "acquired")];
    let timeout = [(m::LABEL_GROUP, "mdefault"), (m::LABEL_OUTCOME, "timeout")];

    let guard = locks.lock("mdefault:1").acquire().await.unwrap();
    assert_eq!(counter(m::ACQUISITIONS_TOTAL, &acquired), 1);
    assert_eq!(gauge(m::HELD, &group), Some(1.0));
    let waited = samples(m::WAIT_SECONDS, &acquired);
    assert_eq!(waited.len(), 1, "one wait sample: {waited:?}");

    let err = other
        .lock("mdefault:1")
        .try_acquire(Duration::from_millis(150))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::WaitTimeout { .. }), "{err:?}");
    assert_eq!(counter(m::ACQUISITIONS_TOTAL, &timeout), 1);
    assert_eq!(counter(m::ACQUISITIONS_TOTAL, &acquired), 1);
    let timed_out = samples(m::WAIT_SECONDS, &timeout);
    assert_eq!(timed_out.len(), 1, "{timed_out:?}");
    assert!(timed_out[0] >= 0.15, "waited {timed_out:?} s");
    // The waiter is no longer counted as waiting.
    assert_eq!(gauge(m::WAITING, &group), Some(0.0));

    tokio::time::sleep(Duration::from_millis(50)).await;
    guard.release().await.unwrap();
    assert_eq!(gauge(m::HELD, &group), Some(0.0), "lock_held back to 0");
    let held = samples(m::HOLD_SECONDS, &group);
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(held[0] >= 0.2, "held {held:?} s");

    // A name without a `:` falls into the `other` group.
    let plain = locks.lock("mplainname").acquire().await.unwrap();
    plain.release().await.unwrap();
    assert!(
        counter(
            m::ACQUISITIONS_TOTAL,
            &[
                (m::LABEL_GROUP, m::OTHER_GROUP),
                (m::LABEL_OUTCOME, "acquired")
            ]
        ) >= 1
    );
    assert_no_name_labels(&["mdefault:1", "mplainname"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_group_replaces_the_default_one() {
    store();
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    for id in 0..3 {
        let name = format!("mexplicit:{id}");
        let lock = locks.lock(&name).group("mexplicit:<id>");
        assert_eq!(lock.metrics_group(), Some("mexplicit:<id>"));
        lock.acquire().await.unwrap().release().await.unwrap();
    }
    let labels = [
        (m::LABEL_GROUP, "mexplicit:<id>"),
        (m::LABEL_OUTCOME, "acquired"),
    ];
    assert_eq!(counter(m::ACQUISITIONS_TOTAL, &labels), 3);
    assert_eq!(samples(m::WAIT_SECONDS, &labels).len(), 3);
    let default = [
        (m::LABEL_GROUP, "mexplicit"),
        (m::LABEL_OUTCOME, "acquired"),
    ];
    assert_eq!(counter(m::ACQUISITIONS_TOTAL, &default), 0);
    assert_eq!(
        gauge(m::HELD, &[(m::LABEL_GROUP, "mexplicit:<id>")]),
        Some(0.0)
    );
    assert_no_name_labels(&["mexplicit:0", "mexplicit:1", "mexplicit:2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_error_is_counted_as_error() {
    store();
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    // A string where the lock's hash belongs: ForeignData.
    redis.cmd(&["SET", "lock:{merror:1}", "not a lock"]);
    let err = locks
        .lock("merror:1")
        .acquire_with(LockOptions::new().wait(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::ForeignData { .. }), "{err:?}");
    let labels = [(m::LABEL_GROUP, "merror"), (m::LABEL_OUTCOME, "error")];
    assert_eq!(counter(m::ACQUISITIONS_TOTAL, &labels), 1);
    assert_eq!(samples(m::WAIT_SECONDS, &labels).len(), 1);
    assert_eq!(
        counter(
            m::ACQUISITIONS_TOTAL,
            &[(m::LABEL_GROUP, "merror"), (m::LABEL_OUTCOME, "acquired")]
        ),
        0
    );
    assert_no_name_labels(&["merror:1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_is_counted_by_reason_and_renewals_are_counted() {
    store();
    let redis = RedisServer::start();
    let locks = common::client_with_watchdog(&redis, Duration::from_millis(600)).await;
    let renewals_before = counter(m::RENEWALS_TOTAL, &[]);
    let guard = locks.lock("mloss:1").acquire().await.unwrap();
    // Two renewal periods (200 ms each).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        counter(m::RENEWALS_TOTAL, &[]) > renewals_before,
        "no renewal counted"
    );
    let deleted = [(m::LABEL_GROUP, "mloss"), (m::LABEL_REASON, "deleted")];
    assert_eq!(counter(m::LOSSES_TOTAL, &deleted), 0);
    redis.cmd(&["DEL", "lock:{mloss:1}"]);
    let err = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("lost within a renewal period");
    assert_eq!(
        lock_tests::loss_reason(&err),
        Some(LossReason::Deleted),
        "{err:?}"
    );
    assert_eq!(counter(m::LOSSES_TOTAL, &deleted), 1);
    // Still held (the guard lives) until it is dropped.
    let group = [(m::LABEL_GROUP, "mloss")];
    assert_eq!(gauge(m::HELD, &group), Some(1.0));
    drop(guard);
    assert_eq!(gauge(m::HELD, &group), Some(0.0));
    assert_no_name_labels(&["mloss:1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_tasks_subscriptions_and_local_hand_offs_are_recorded() {
    store();
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    let group = [(m::LABEL_GROUP, "mhandoff")];
    let guard = locks.lock("mhandoff:1").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move { locks.lock("mhandoff:1").acquire().await }
    });
    assert!(
        eventually(|| gauge(m::WAITING, &group) == Some(1.0)).await,
        "waiting: {:?}",
        gauge(m::WAITING, &group)
    );
    assert!(
        eventually(|| locks.subscribed_channels() == 1
            && gauge(m::SUBSCRIBED_CHANNELS, &[]).unwrap_or(0.0) >= 1.0)
        .await,
        "subscribed channels: {:?}",
        gauge(m::SUBSCRIBED_CHANNELS, &[])
    );
    // Released while a task of the same client waits: handed over.
    guard.release().await.unwrap();
    let second = lock_tests::granted(waiter).await;
    assert!(locks.stats().handoffs >= 1);
    assert_eq!(gauge(m::WAITING, &group), Some(0.0));
    let handovers = samples(m::HANDOVER_SECONDS, &group);
    assert_eq!(handovers.len(), 1, "{handovers:?}");
    assert!(handovers[0] < 1.0, "{handovers:?}");
    assert_eq!(gauge(m::HELD, &group), Some(1.0));

    // A dropped guard is released in the background.
    let background_before = counter(m::BACKGROUND_RELEASES_TOTAL, &[]);
    drop(second);
    assert_eq!(gauge(m::HELD, &group), Some(0.0));
    assert!(
        eventually(|| counter(m::BACKGROUND_RELEASES_TOTAL, &[]) > background_before).await,
        "background release not counted"
    );
    assert_no_name_labels(&["mhandoff:1"]);
}

#[lock_runtime::distributed_lock(name = "mmacro:<id>", client = locks)]
async fn locked_by_the_macro(locks: &lock_runtime::LockClient, id: u32) -> Result<u32, LockError> {
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_macro_records_under_its_name_template() {
    store();
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    for id in 0..2 {
        assert_eq!(locked_by_the_macro(&locks, id).await.unwrap(), id);
    }
    let labels = [
        (m::LABEL_GROUP, "mmacro:<id>"),
        (m::LABEL_OUTCOME, "acquired"),
    ];
    assert_eq!(counter(m::ACQUISITIONS_TOTAL, &labels), 2);
    assert_eq!(
        samples(m::HOLD_SECONDS, &[(m::LABEL_GROUP, "mmacro:<id>")]).len(),
        2
    );
    let default = [(m::LABEL_GROUP, "mmacro"), (m::LABEL_OUTCOME, "acquired")];
    assert_eq!(counter(m::ACQUISITIONS_TOTAL, &default), 0);
    assert_no_name_labels(&["mmacro:0", "mmacro:1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_woken_by_another_clients_release_records_its_hand_over() {
    store();
    let redis = RedisServer::start();
    let (a, b) = (common::client(&redis).await, common::client(&redis).await);
    let group = [(m::LABEL_GROUP, "mwake")];
    let guard = a.lock("mwake:1").acquire().await.unwrap();
    redis.cmd(&["CONFIG", "RESETSTAT"]);
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("mwake:1").acquire().await }
    });
    assert!(eventually(|| gauge(m::WAITING, &group) == Some(1.0)).await);
    // The gauge counts the waiter from before its subscription is confirmed and before the
    // attempt it makes once subscribed: a release in between is taken by that attempt, with no
    // message, so no hand-over is recorded (a one-off failure under load). Release only once
    // Redis ran both attempts (the first, and the one made while waiting).
    assert!(eventually(|| script_calls(&redis) >= 2).await);
    assert!(samples(m::HANDOVER_SECONDS, &group).is_empty());
    // Another client's release: the waiter is woken by the unlock message and takes the lock.
    guard.release().await.unwrap();
    let taken = lock_tests::granted(waiter).await;
    let handovers = samples(m::HANDOVER_SECONDS, &group);
    assert_eq!(handovers.len(), 1, "{handovers:?}");
    assert!(handovers[0] < 1.0, "{handovers:?}");
    drop(taken);
    assert_no_name_labels(&["mwake:1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_starts_with_variable_data_falls_into_the_other_group() {
    // One time series per user or order would grow for ever: the default group is the text
    // before the first `:` only when it is a word (letters, `_`, `-`).
    store();
    let redis = RedisServer::start();
    let locks = common::client(&redis).await;
    for i in 0..20 {
        for name in [
            format!("{i}7:mvar"),
            format!("{{muser:{i}}}:cart"),
            format!("morder-{i}:pay"),
        ] {
            locks
                .lock(&name)
                .acquire()
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
        }
    }
    locks
        .lock("m_word-group:42")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let values = label_values();
    for i in 0..20 {
        for prefix in [format!("{i}7"), "{muser".to_owned(), format!("morder-{i}")] {
            assert!(
                !values.contains(&prefix),
                "variable data {prefix:?} is a group: {values:?}"
            );
        }
    }
    let word = [
        (m::LABEL_GROUP, "m_word-group"),
        (m::LABEL_OUTCOME, "acquired"),
    ];
    assert_eq!(counter(m::ACQUISITIONS_TOTAL, &word), 1);
    let other = [
        (m::LABEL_GROUP, m::OTHER_GROUP),
        (m::LABEL_OUTCOME, "acquired"),
    ];
    assert!(counter(m::ACQUISITIONS_TOTAL, &other) >= 60);
}
