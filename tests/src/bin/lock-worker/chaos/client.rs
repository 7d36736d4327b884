//! The workload's lock client: one server, a Sentinel deployment or a Redis Cluster, from the
//! `<lock-url>` argument.

use std::time::Duration;

use lock_runtime::LockClient;

/// A client of `url`: one server's URL, or a Sentinel deployment written
/// `sentinel:<master-name>@<sentinel-url>,<sentinel-url>…`, with `+ack` at the end for
/// `replica_ack(1, 100 ms)` (the failover suite, `tests/failover.rs`).
pub(super) async fn client(url: &str, watchdog_ms: &str) -> LockClient {
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
