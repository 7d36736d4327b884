//! Fencing epochs ("Fencing epochs" in `src/script/prelude.lua`): this release's acquire
//! script, verbatim (run with `EVAL` after the whole prelude, as `upgrade.rs` runs the previous
//! release's), given the failover epoch a Sentinel client sends in its fencing argument
//! (`<retention ms>:<epoch>`), on real servers: one of them with its clock an hour behind.
//! What the Sentinel client sends, and when, is `topology/sentinel.rs`'s
//! `fenced_tokens_follow_the_failover_epoch`.

use lock_tests::RedisServer;

use super::upgrade::{previous_acquire, previous_release};

/// This release's acquire, after the whole prelude.
const ACQUIRE: &str = concat!(
    include_str!("../../src/script/prelude.lua"),
    "\n",
    include_str!("../../src/script/acquire.lua")
);

/// The constants of the encoding, as `prelude.lua` has them.
const EPOCH_BASE: i64 = 1 << 52;
const EPOCH_SPAN: i64 = 1 << 34;
const CLOCK_BASE: i64 = 1_767_225_600_000_000;
const FLOOR_CEILING: i64 = (1 << 53) - (1 << 32);

/// A fenced grant of `name` to a new owner with `fencing` as the fencing argument (lease 30 s);
/// its token. The lock is deleted after it (as an expiry would), so each call is a new holder.
fn grant(redis: &RedisServer, name: &str, fencing: &str) -> i64 {
    let key = format!("lock:{{{name}}}");
    let fence = format!("{key}:fence");
    let channel = format!("{key}:unlock");
    let owner = format!("0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e:{}", rand_suffix());
    let reply = redis.cmd(&[
        "EVAL", ACQUIRE, "3", &key, &fence, &channel, &owner, "30000", fencing,
    ]);
    let items = reply.items();
    assert_eq!(items.first().and_then(|c| c.int()), Some(1), "{reply:?}");
    let token = items[1].int().expect("a token");
    assert_eq!(redis.cmd(&["DEL", &key]).int(), Some(1));
    token
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The server's clock in microseconds (`TIME`).
fn clock_us(redis: &RedisServer) -> i64 {
    let reply = redis.cmd(&["TIME"]);
    let items = reply.items();
    let field = |i: usize| items[i].text().and_then(|t| t.parse::<i64>().ok()).unwrap();
    field(0) * 1_000_000 + field(1)
}

/// A deposed master goes on granting under its epoch; its successor, promoted without the last
/// counter writes and with a clock an hour behind, grants under the next: every token of the
/// successor is above every token of the deposed master, issued before the promotion or after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_epoch_outranks_an_earlier_one_whatever_the_clocks_say() {
    let deposed = RedisServer::start();
    let mut successor = RedisServer::start();
    tokio::task::block_in_place(|| successor.restart_with_clock(-3_600_000_000));
    let behind = deposed.clock_offset_us() - successor.clock_offset_us();
    assert!(
        behind > 3_500_000_000,
        "the successor's clock is only {behind} µs behind"
    );

    let before: Vec<i64> = (0..3).map(|_| grant(&deposed, "n", "86400000:4")).collect();
    assert!(before.windows(2).all(|w| w[0] < w[1]), "{before:?}");
    let promoted = grant(&successor, "n", "86400000:5");
    let after: Vec<i64> = (0..3).map(|_| grant(&deposed, "n", "86400000:4")).collect();
    let next = grant(&successor, "n", "86400000:5");
    for old in before.iter().chain(&after) {
        assert!(
            promoted > *old,
            "the successor's {promoted} under a deposed {old}"
        );
    }
    assert!(next > promoted);
    // Without epochs (one server), the clock alone orders them: the successor's clock behind
    // puts its tokens under the deposed master's, the regression the epochs remove.
    let clock_only_deposed = grant(&deposed, "m", "86400000");
    let clock_only_successor = grant(&successor, "m", "86400000");
    assert!(clock_only_successor < clock_only_deposed);
}

/// Within an epoch tokens increase across holders and a lost counter (its floor is the clock);
/// they never go back when a name moves between tokens with and without an epoch, or between
/// this release and the previous one (whose grants take the last token + 1); the fencing
/// argument's retention is the counter's.
#[test]
fn tokens_increase_within_an_epoch_and_across_the_change_of_scheme() {
    let redis = RedisServer::start();
    let clock_only = grant(&redis, "upgrade", "86400000");
    let first = grant(&redis, "upgrade", "86400000:0");
    assert!(
        first >= EPOCH_BASE && clock_only < EPOCH_BASE,
        "{clock_only} then {first}"
    );
    let pttl = redis.cmd(&["PTTL", "lock:{upgrade}:fence"]).int().unwrap();
    assert!(pttl > 86_000_000, "the counter kept {pttl} ms");
    // A client without the epoch (one server, or a Sentinel master not confirmed yet) after it.
    let without = grant(&redis, "upgrade", "86400000");
    assert!(without > first, "{without} after {first}");
    // The previous release, after it, and this release again.
    let owner = "0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e:1";
    let (code, previous) = previous_acquire(&redis, "upgrade", owner);
    assert_eq!(code, 1);
    assert!(previous > without, "{previous} after {without}");
    assert_eq!(previous_release(&redis, "upgrade", owner), (1, 0));
    let again = grant(&redis, "upgrade", "86400000:0");
    assert!(again > previous, "{again} after {previous}");
    // The counter lost (a restart without persistence, its retention passed): the clock's
    // floor under the same epoch is above what was issued.
    redis.cmd(&["DEL", "lock:{upgrade}:fence"]);
    let lost = grant(&redis, "upgrade", "86400000:0");
    assert!(lost > again, "{lost} after {again}");
}

/// At the limit: an epoch past the room the encoding has at this clock counts as the largest it
/// has (about 170,000 in 2076), so the floor stays below 2^53 − 2^32; tokens keep increasing,
/// by the counter, through epochs it cannot rank any higher.
#[test]
fn an_epoch_past_the_encodings_room_counts_as_the_largest_it_has() {
    let redis = RedisServer::start();
    let before = clock_us(&redis);
    let huge = grant(&redis, "limit", "86400000:1000000000000");
    let after = clock_us(&redis);
    let most = |since: i64| (FLOOR_CEILING - EPOCH_BASE - since) / EPOCH_SPAN;
    let (since_before, since_after) = (before - CLOCK_BASE, after - CLOCK_BASE);
    assert!(
        (EPOCH_BASE + most(since_after) * EPOCH_SPAN + since_before
            ..=EPOCH_BASE + most(since_before) * EPOCH_SPAN + since_after)
            .contains(&huge),
        "{huge}: not the floor of epoch {}",
        most(since_after)
    );
    assert!(huge <= FLOOR_CEILING);
    let larger = grant(&redis, "limit", "86400000:99999999999999999999");
    let smaller = grant(&redis, "limit", "86400000:3");
    assert!(
        huge < larger && larger < smaller,
        "{huge}, {larger}, {smaller}"
    );
    assert!(smaller < FLOOR_CEILING + 3);
}

/// On Redis Cluster a call carries `:node` and the node that runs it reads its own epoch
/// (`cluster_my_epoch` of `CLUSTER INFO`, its `configEpoch`): a failover raises the promoted
/// replica's above every other node's (here `CLUSTER BUMPEPOCH`, as a takeover does), so every
/// token of the successor is above every token of the node it replaced, issued before or
/// after. A server that is not a cluster node has no epoch to read: the clock's floor, as
/// before epochs.
#[test]
fn a_cluster_node_orders_tokens_by_its_own_epoch() {
    let node = || {
        let node = RedisServer::start_with(&[
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-port",
            RedisServer::FREE_PORT,
        ]);
        node.cmd(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !(node.cmd(&["CLUSTER", "INFO"]).text())
            .is_some_and(|i| i.contains("cluster_state:ok"))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "a one-node cluster never came up"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        node
    };
    let my_epoch = |node: &RedisServer| -> i64 {
        let info = node.cmd(&["CLUSTER", "INFO"]);
        let text = info.text().expect("CLUSTER INFO").to_owned();
        (text.lines())
            .find_map(|l| l.strip_prefix("cluster_my_epoch:"))
            .and_then(|e| e.trim().parse().ok())
            .expect("cluster_my_epoch")
    };
    // The epoch a token carries, by the node's clock at the grant.
    let epoch_of = |node: &RedisServer, token: i64| {
        (token - EPOCH_BASE - (clock_us(node) - CLOCK_BASE) + EPOCH_SPAN / 2) / EPOCH_SPAN
    };
    let deposed = node();
    let successor = node();
    for _ in 0..3 {
        successor.cmd(&["CLUSTER", "BUMPEPOCH"]);
    }
    let (old, new) = (my_epoch(&deposed), my_epoch(&successor));
    assert!(new > old, "epochs {old} and {new}");

    let before: Vec<i64> = (0..3)
        .map(|_| grant(&deposed, "c", "86400000:node"))
        .collect();
    assert!(before.windows(2).all(|w| w[0] < w[1]), "{before:?}");
    assert_eq!(epoch_of(&deposed, before[0]), old, "{}", before[0]);
    let promoted = grant(&successor, "c", "86400000:node");
    assert_eq!(epoch_of(&successor, promoted), new, "{promoted}");
    let after: Vec<i64> = (0..3)
        .map(|_| grant(&deposed, "c", "86400000:node"))
        .collect();
    for old in before.iter().chain(&after) {
        assert!(
            promoted > *old,
            "the successor's {promoted} under a deposed {old}"
        );
    }

    let plain = RedisServer::start();
    let clock = clock_us(&plain);
    let token = grant(&plain, "c", "86400000:node");
    assert!(
        (clock..clock + 60_000_000).contains(&token),
        "{token}: not the clock's floor ({clock})"
    );
}
