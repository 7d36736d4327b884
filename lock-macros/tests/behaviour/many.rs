//! `#[distributed_lock]` with a lock name over a collection (`"stock:<cart.items[].sku>"`)
//! against a real `redis-server`: one lock per distinct element, taken in one global order,
//! all or nothing within the one `wait`, the body inside every lock's scope, dropped if any
//! lock is lost; `max_names` and empty collections.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{LockClient, LockError, distributed_lock};
use lock_tests::RedisServer;
use tokio::time::{sleep, timeout};

use common::{AppError, connect};

#[derive(Debug, Clone)]
struct Item {
    sku: String,
    qty: u32,
}

#[derive(Debug, Clone)]
struct Cart {
    items: Vec<Item>,
}

fn cart(skus: &[&str]) -> Cart {
    Cart {
        items: skus
            .iter()
            .map(|sku| Item {
                sku: sku.to_string(),
                qty: 1,
            })
            .collect(),
    }
}

/// How many bodies are inside at once: in all, and per SKU.
#[derive(Debug, Default)]
struct Probe {
    entered: AtomicUsize,
    inside: AtomicUsize,
    max_inside: AtomicUsize,
    per_sku: Mutex<BTreeMap<String, (usize, usize)>>,
    runs: AtomicUsize,
}

impl Probe {
    fn enter(&self, cart: &Cart) {
        self.entered.fetch_add(1, SeqCst);
        let now = self.inside.fetch_add(1, SeqCst) + 1;
        self.max_inside.fetch_max(now, SeqCst);
        let mut per_sku = self.per_sku.lock().unwrap();
        let distinct: HashSet<&str> = cart.items.iter().map(|i| i.sku.as_str()).collect();
        for sku in distinct {
            let (inside, max) = per_sku.entry(sku.to_string()).or_default();
            *inside += 1;
            *max = (*max).max(*inside);
        }
    }

    fn leave(&self, cart: &Cart) {
        let mut per_sku = self.per_sku.lock().unwrap();
        let distinct: HashSet<&str> = cart.items.iter().map(|i| i.sku.as_str()).collect();
        for sku in distinct {
            if let Some((inside, _)) = per_sku.get_mut(sku) {
                *inside -= 1;
            }
        }
        drop(per_sku);
        self.inside.fetch_sub(1, SeqCst);
        self.runs.fetch_add(1, SeqCst);
    }

    /// The most bodies that were inside at once with this SKU in their cart.
    fn max_for(&self, sku: &str) -> usize {
        self.per_sku
            .lock()
            .unwrap()
            .get(sku)
            .map_or(0, |&(_, max)| max)
    }

    /// Resolves once `n` bodies have entered; `false` after 5 s. A body that waits for this
    /// before it leaves ran at the same time as the others.
    async fn until_entered(&self, n: usize) -> bool {
        lock_tests::eventually(Duration::from_secs(5), || self.entered.load(SeqCst) >= n).await
    }
}

#[distributed_lock(name = "stock:<cart.items[].sku>", client = locks, wait = "10s")]
async fn checkout(
    locks: &LockClient,
    cart: &Cart,
    probe: &Probe,
    hold: Duration,
) -> Result<u32, AppError> {
    probe.enter(cart);
    sleep(hold).await;
    probe.leave(cart);
    Ok(cart.items.iter().map(|item| item.qty).sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn carts_sharing_a_sku_are_serialised() {
    let server = RedisServer::start();
    let clients = [connect(&server).await, connect(&server).await];
    let probe = Arc::new(Probe::default());
    let carts = [cart(&["apple", "pear"]), cart(&["pear", "plum"])];

    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (locks, probe, cart) =
                (clients[i % 2].clone(), probe.clone(), carts[i % 2].clone());
            tokio::spawn(
                async move { checkout(&locks, &cart, &probe, Duration::from_millis(30)).await },
            )
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap(), 2);
    }

    assert_eq!(probe.runs.load(SeqCst), 8);
    assert_eq!(probe.max_for("pear"), 1, "two carts with `pear` overlapped");
    assert_eq!(
        probe.max_inside.load(SeqCst),
        1,
        "carts sharing a SKU overlapped"
    );
    for sku in ["apple", "pear", "plum"] {
        let name = format!("stock:{sku}");
        assert!(
            !clients[0].lock(&name).is_locked().await.unwrap(),
            "{name} still held"
        );
    }
}

/// Enters, then waits (at most 5 s) until `n` bodies have entered: whether they did.
#[distributed_lock(name = "stock:<cart.items[].sku>", client = locks, wait = "10s")]
async fn checkout_meeting(
    locks: &LockClient,
    cart: &Cart,
    probe: &Probe,
    n: usize,
) -> Result<bool, AppError> {
    probe.enter(cart);
    let met = probe.until_entered(n).await;
    probe.leave(cart);
    Ok(met)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn disjoint_carts_run_in_parallel() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let probe = Probe::default();
    let (first, second) = (cart(&["fig", "kiwi"]), cart(&["lime", "date"]));

    let (a, b) = tokio::join!(
        checkout_meeting(&locks, &first, &probe, 2),
        checkout_meeting(&locks, &second, &probe, 2),
    );

    assert!(
        a.unwrap() && b.unwrap(),
        "the bodies never ran at the same time"
    );
    assert_eq!(probe.max_inside.load(SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn carts_listing_the_same_skus_in_opposite_orders_never_deadlock() {
    let server = RedisServer::start();
    let clients = [connect(&server).await, connect(&server).await];
    let probe = Arc::new(Probe::default());
    let carts = [
        cart(&["a1", "b2", "c3", "d4"]),
        cart(&["d4", "c3", "b2", "a1"]),
    ];

    // Listed in opposite orders, taken in the same global one: no call waits for another in a
    // cycle, so none runs into its `wait` (10 s; the whole run takes well under a second).
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            let (locks, probe) = (clients[i % 2].clone(), probe.clone());
            let cart = carts[(i / 2) % 2].clone();
            tokio::spawn(
                async move { checkout(&locks, &cart, &probe, Duration::from_millis(2)).await },
            )
        })
        .collect();
    for task in tasks {
        match task.await.unwrap() {
            Ok(total) => assert_eq!(total, 4),
            Err(e) => panic!("a call failed: {e:?}"),
        }
    }

    assert_eq!(probe.runs.load(SeqCst), 24);
    assert_eq!(probe.max_inside.load(SeqCst), 1);
}

/// The keys of held locks in Redis, `<prefix>:{name}`: a mutex's string or a read/write
/// lock's sorted set (the fencing counters and other keys have a suffix).
fn lock_keys(server: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = server
        .keys("*}")
        .into_iter()
        .filter(|key| matches!(server.cmd(&["TYPE", key]).text(), Some("string" | "zset")))
        .collect();
    keys.sort();
    keys
}

#[distributed_lock(name = "dup:<skus[]>", client = locks, wait = "2s")]
async fn with_duplicates(
    locks: &LockClient,
    server: &RedisServer,
    skus: &[&str],
) -> Result<Vec<String>, AppError> {
    Ok(lock_keys(server))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_names_are_taken_once() {
    let server = RedisServer::start();
    let locks = connect(&server).await;

    // Taking `dup:a` a second time would wait for the first hold (the acquisitions do not run
    // inside each other's scope) and time out.
    let keys = with_duplicates(&locks, &server, &["a", "b", "a", "a"])
        .await
        .unwrap();

    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(
        keys[0].ends_with("{dup:a}") && keys[1].ends_with("{dup:b}"),
        "{keys:?}"
    );
    assert!(lock_keys(&server).is_empty(), "locks left after the call");
}

#[distributed_lock(name = "stock:<skus[]>", client = locks, max_names = 2)]
async fn at_most_two(
    locks: &LockClient,
    skus: Vec<&str>,
    ran: &AtomicBool,
) -> Result<(), AppError> {
    ran.store(true, SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_distinct_names_than_max_names_take_nothing() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let ran = AtomicBool::new(false);
    // Script calls, and the plain `SET` of an uncontended mutex's first attempt.
    let calls =
        || server.script_calls() + server.command_calls("eval") + server.command_calls("set");
    let before = calls();

    match at_most_two(&locks, vec!["x", "y", "z", "x"], &ran).await {
        Err(AppError::Lock(LockError::TooManyNames { count, max })) => {
            assert_eq!((count, max), (3, 2));
        }
        other => panic!("expected TooManyNames, got {other:?}"),
    }
    assert!(!ran.load(SeqCst), "the body ran");
    assert!(lock_keys(&server).is_empty());
    assert_eq!(calls(), before, "a lock call ran: something was taken");

    // Duplicates count once.
    at_most_two(&locks, vec!["x", "y", "x"], &ran)
        .await
        .unwrap();
    assert!(ran.load(SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_collection_is_an_invalid_name() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let ran = AtomicBool::new(false);

    match at_most_two(&locks, Vec::new(), &ran).await {
        Err(AppError::Lock(LockError::InvalidName { name, reason })) => {
            assert_eq!(name, "stock:<skus[]>");
            assert!(reason.contains("empty"), "{reason}");
        }
        other => panic!("expected InvalidName, got {other:?}"),
    }
    assert!(!ran.load(SeqCst), "the body ran without a lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_name_takes_nothing() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let ran = AtomicBool::new(false);

    let result = at_most_two(&locks, vec!["ok", "bad\nname"], &ran).await;

    assert!(
        matches!(result, Err(AppError::Lock(LockError::InvalidName { .. }))),
        "{result:?}"
    );
    assert!(!ran.load(SeqCst));
    assert!(lock_keys(&server).is_empty());
}

#[distributed_lock(name = "stock:<cart.items[].sku>", client = locks)]
async fn long_checkout(
    locks: &LockClient,
    cart: &Cart,
    started: &AtomicBool,
    finished: &AtomicBool,
) -> Result<(), AppError> {
    started.store(true, SeqCst);
    sleep(Duration::from_secs(5)).await;
    finished.store(true, SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_any_of_the_locks_drops_the_body() {
    let server = RedisServer::start();
    let locks =
        lock_tests::client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(1))).await;
    let other = connect(&server).await;
    let (started, finished) = (AtomicBool::new(false), AtomicBool::new(false));
    let cart = cart(&["melon", "grape", "cherry"]);

    let force = async {
        assert!(lock_tests::eventually(Duration::from_secs(5), || started.load(SeqCst)).await);
        assert!(other.lock("stock:grape").force_unlock().await.unwrap());
    };
    let (result, ()) = timeout(Duration::from_secs(4), async {
        tokio::join!(long_checkout(&locks, &cart, &started, &finished), force)
    })
    .await
    .expect("the loss was not noticed before the body's end");

    match result {
        Err(AppError::Lock(LockError::Lost { name, .. })) => assert_eq!(name, "stock:grape"),
        other => panic!("expected the lost error, got {other:?}"),
    }
    assert!(
        !finished.load(SeqCst),
        "the body kept running after the loss"
    );
    for name in ["stock:melon", "stock:cherry"] {
        assert!(
            !locks.lock(name).is_locked().await.unwrap(),
            "{name} still held"
        );
    }
}

#[distributed_lock(name = "stock:<sku>", client = locks, wait = "0s")]
async fn reserve_one(locks: &LockClient, sku: &str) -> Result<bool, AppError> {
    let again = locks
        .lock(format!("stock:{sku}"))
        .try_acquire(Duration::ZERO)
        .await?;
    Ok(again.is_reentrant())
}

#[distributed_lock(name = "stock:<cart.items[].sku>", client = locks, wait = "5s")]
async fn reserve_each(locks: &LockClient, cart: &Cart) -> Result<Vec<bool>, AppError> {
    let mut reentered = Vec::new();
    for item in &cart.items {
        reentered.push(reserve_one(locks, &item.sku).await?);
    }
    Ok(reentered)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_call_for_one_of_the_names_re_enters() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let cart = cart(&["kale", "leek", "kale"]);

    // `wait = "0s"`: a nested call that did not re-enter would fail with `WaitTimeout`.
    let reentered = reserve_each(&locks, &cart).await.unwrap();

    assert_eq!(reentered, [true, true, true]);
    // Outside the body, a new owner.
    let fresh = locks
        .lock("stock:kale")
        .try_acquire(Duration::ZERO)
        .await
        .unwrap();
    assert!(!fresh.is_reentrant());
    fresh.release().await.unwrap();
}

struct Warehouse {
    locks: LockClient,
    name: String,
    items: Vec<Item>,
}

impl Warehouse {
    #[distributed_lock(name = "stock:<self.name>:<self.items[].sku>", client = self.locks)]
    async fn reserve_all(&self, names: &[&str]) -> Result<Vec<bool>, AppError> {
        let mut held = Vec::new();
        for name in names {
            held.push(self.locks.lock(name).is_locked().await?);
        }
        Ok(held)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_field_can_be_the_collection() {
    let server = RedisServer::start();
    let warehouse = Warehouse {
        locks: connect(&server).await,
        name: "north".into(),
        items: cart(&["oat", "rye"]).items,
    };

    let held = warehouse
        .reserve_all(&["stock:north:oat", "stock:north:rye", "stock:north:corn"])
        .await
        .unwrap();

    assert_eq!(held, [true, true, false]);
    assert!(
        !warehouse
            .locks
            .lock("stock:north:oat")
            .is_locked()
            .await
            .unwrap()
    );
}

#[distributed_lock(name = "seat:<seats[]>", client = locks, wait = "1s")]
async fn book(
    locks: &LockClient,
    seats: &HashSet<u32>,
    other: &LockClient,
) -> Result<Vec<bool>, AppError> {
    let mut busy = Vec::new();
    for seat in [1, 2, 3] {
        // Another client cannot take them meanwhile.
        match other
            .lock(format!("seat:{seat}"))
            .try_acquire(Duration::ZERO)
            .await
        {
            Err(LockError::WaitTimeout { .. }) => busy.push(true),
            Err(e) => return Err(e.into()),
            Ok(guard) => {
                guard.release().await?;
                busy.push(false);
            }
        }
    }
    Ok(busy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hash_set_parameter_is_a_collection() {
    let server = RedisServer::start();
    let (locks, other) = (connect(&server).await, connect(&server).await);
    let seats: HashSet<u32> = [2, 1].into_iter().collect();

    let busy = book(&locks, &seats, &other).await.unwrap();

    assert_eq!(busy, [true, true, false]);
    assert!(lock_keys(&server).is_empty(), "locks left after the call");
}

/// Enters, waits until two readers have entered, then until `done` (at most 5 s each).
#[distributed_lock(name = "stock:<skus[]>", client = locks, mode = "read", wait = "5s")]
async fn read_levels(
    locks: &LockClient,
    skus: &[&str],
    probe: &Probe,
    done: &AtomicBool,
) -> Result<bool, AppError> {
    let cart = cart(skus);
    probe.enter(&cart);
    let met = probe.until_entered(2).await;
    lock_tests::eventually(Duration::from_secs(5), || done.load(SeqCst)).await;
    probe.leave(&cart);
    Ok(met)
}

#[distributed_lock(name = "stock:<skus[]>", client = locks, mode = "write", wait = "0s")]
async fn restock(locks: &LockClient, skus: &[&str]) -> Result<(), AppError> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_mode_shares_the_names_and_write_mode_excludes_readers() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let probe = Probe::default();
    let done = AtomicBool::new(false);

    let writer = async {
        assert!(probe.until_entered(2).await);
        // Both readers hold `stock:b`: a writer over it cannot get in. It takes `stock:0` first
        // (the global order is by key) and gives it back when `stock:b` fails: all or nothing.
        let blocked = restock(&locks, &["b", "0"]).await;
        let keys = lock_keys(&server);
        done.store(true, SeqCst);
        (blocked, keys)
    };
    let (a, b, (blocked, keys_meanwhile)) = tokio::join!(
        read_levels(&locks, &["a", "b"], &probe, &done),
        read_levels(&locks, &["b", "c"], &probe, &done),
        writer,
    );

    assert!(
        a.unwrap() && b.unwrap(),
        "two readers of `stock:b` did not overlap"
    );
    assert!(
        matches!(blocked, Err(AppError::Lock(LockError::WaitTimeout { .. }))),
        "a writer got in while readers held the names: {blocked:?}"
    );
    assert_eq!(keys_meanwhile.len(), 3, "{keys_meanwhile:?}");
    assert!(
        keys_meanwhile.iter().all(|key| !key.ends_with("{stock:0}")),
        "the failed writer kept `stock:0`: {keys_meanwhile:?}"
    );
    // The readers are gone: a writer gets in at once.
    restock(&locks, &["b", "0"]).await.unwrap();
}
