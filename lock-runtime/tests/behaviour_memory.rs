//! The shared behaviour tests (`behaviour/mod.rs`) against `MemoryLocks`, under tokio's paused
//! time; then the hooks that only the in-memory backend has.

#[macro_use]
mod behaviour;

use std::time::Duration;

use lock_runtime::{LockClient, MemoryLocks};

/// Fresh in-memory locks per test.
struct Memory(MemoryLocks);

impl behaviour::Fixture for Memory {
    async fn client_with_watchdog(&self, watchdog: Duration) -> LockClient {
        self.0
            .builder()
            .watchdog_timeout(watchdog)
            .build()
            .await
            .expect("a memory client")
    }

    fn take_away(&self, name: &str) {
        assert!(self.0.lose(name), "{name} was not held");
    }

    fn leftovers(&self, name: &str) -> Vec<String> {
        self.0
            .holders(name)
            .iter()
            .map(|h| h.owner().to_owned())
            .collect()
    }

    fn lock_round_trips(&self) -> Option<u64> {
        None
    }
}

behaviour_tests!(
    #[tokio::test(start_paused = true)]
    Memory(MemoryLocks::new())
);

// The hooks, which only `MemoryLocks` has.

use lock_runtime::{Fault, LockError, LockOptions, LossReason};
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn a_busy_fault_makes_the_lock_held_by_another_owner_for_its_lease() {
    let memory = MemoryLocks::new();
    let (a, b) = (memory.client(), memory.client());
    memory.fail_next_acquire("stock:1", Fault::Busy(Duration::from_secs(2)));
    let err = a
        .lock("stock:1")
        .try_acquire(Duration::ZERO)
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
    let holder = memory
        .holder("stock:1")
        .expect("held by the stand-in owner");
    assert_eq!(holder.client_id(), None);
    assert_eq!(holder.remaining(), Duration::from_secs(2));
    // Busy for every client, and used up: nothing is queued any more.
    assert!(
        b.lock("stock:1")
            .try_acquire(Duration::ZERO)
            .await
            .unwrap_err()
            .is_busy()
    );
    // A wait longer than the lease gets the lock when the lease ends.
    let start = Instant::now();
    let guard = a
        .lock("stock:1")
        .try_acquire(Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    assert!(guard.fencing_token().await.unwrap() > holder.fencing_token().unwrap_or(0));
    assert_eq!(memory.holder("stock:1").unwrap().client_id(), Some(a.id()));
}

#[tokio::test(start_paused = true)]
async fn a_busy_fault_waits_for_an_attempt_that_finds_the_lock_free() {
    let memory = MemoryLocks::new();
    let (a, b) = (memory.client(), memory.client());
    let held = a.lock("stock:2").acquire().await.unwrap();
    memory.fail_next_acquire("stock:2", Fault::Busy(Duration::from_secs(1)));
    // Busy because `a` holds it; the fault stays queued.
    let err = b.lock("stock:2").try_acquire(Duration::ZERO).await;
    assert!(err.unwrap_err().is_busy());
    held.release().await.unwrap();
    let err = b.lock("stock:2").try_acquire(Duration::ZERO).await;
    assert!(
        err.unwrap_err().is_busy(),
        "the fault answers the first free attempt"
    );
    // `lose` frees the stand-in's hold too.
    assert!(memory.lose("stock:2"));
    let guard = b.lock("stock:2").try_acquire(Duration::ZERO).await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_unavailable_fault_fails_one_acquisition_as_a_server_that_is_down() {
    let memory = MemoryLocks::new();
    let locks = memory.client();
    memory.fail_next_acquire("stock:3", Fault::Unavailable);
    let err = locks.lock("stock:3").acquire().await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    match &err {
        LockError::Backend { op, source } => {
            assert_eq!(*op, "acquire");
            assert!(source.is_connection_refusal(), "{source:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(memory.holder("stock:3").is_none());
    assert_eq!(locks.held_locks(), 0);
    // One acquisition only.
    let guard = locks.lock("stock:3").acquire().await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_fault_for_any_name_reaches_a_waiting_acquire() {
    let memory = MemoryLocks::new();
    let (a, b) = (memory.client(), memory.client());
    let held = a.lock("stock:4").acquire().await.unwrap();
    let waiter = tokio::spawn(async move { b.lock("stock:4").acquire().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    memory.fail_next_acquire_of_any(Fault::Unavailable);
    held.release().await.unwrap();
    let err = waiter.await.unwrap().unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    // Queued faults can be dropped.
    memory.fail_next_acquire_of_any(Fault::Unavailable);
    memory.clear_faults();
    let guard = a.lock("stock:4").acquire().await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn lose_fires_lost_at_once_and_wakes_the_waiters() {
    let memory = MemoryLocks::new();
    let (a, b) = (memory.client(), memory.client());
    assert!(!memory.lose("stock:5"), "nothing held");
    let guard = a.lock("stock:5").acquire().await.unwrap();
    let first = guard.fencing_token().await.unwrap();
    let waiter = tokio::spawn(async move {
        let g = b.lock("stock:5").acquire().await.unwrap();
        (Instant::now(), g)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let start = Instant::now();
    assert!(memory.lose("stock:5"));
    let err = tokio::time::timeout(Duration::from_millis(10), guard.lost())
        .await
        .expect("lost() at once");
    assert_eq!(
        lock_tests::loss_reason(&err),
        Some(LossReason::Deleted),
        "{err:?}"
    );
    let (got, g) = waiter.await.unwrap();
    // The clock is paused and moves only when every task waits for a timer: the loss told
    // the holder and woke the waiter without any timer firing (no lease end, no retry).
    assert_eq!(got, start, "woken by a timer {:?} later", got - start);
    assert!(g.fencing_token().await.unwrap() > first);
    assert!(matches!(
        guard.fencing_token().await,
        Err(LockError::Lost { .. })
    ));
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
}

#[tokio::test(start_paused = true)]
async fn a_lost_lock_with_an_explicit_lease_is_found_out_at_release() {
    let memory = MemoryLocks::new();
    let locks = memory.client();
    let guard = locks
        .lock("stock:6")
        .acquire_with(LockOptions::new().lease(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(memory.lose("stock:6"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!guard.is_lost(), "an explicit lease is not renewed");
    let released = guard.release().await;
    assert!(
        matches!(released, Err(LockError::NotOwner { .. })),
        "{released:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn holder_reports_the_owner_token_and_lease() {
    let memory = MemoryLocks::new();
    let locks = memory
        .builder()
        .watchdog_timeout(Duration::from_secs(6))
        .build()
        .await
        .unwrap();
    assert!(memory.holder("stock:7").is_none());
    assert_eq!(memory.last_fencing_token("stock:7"), None);
    let guard = locks.lock("stock:7").acquire().await.unwrap();
    // Tokens on demand: none until asked for.
    assert_eq!(memory.holder("stock:7").unwrap().fencing_token(), None);
    let token = guard.fencing_token().await.unwrap();
    let holder = memory.holder("stock:7").unwrap();
    assert_eq!(holder.client_id(), Some(locks.id()));
    assert!(holder.owner().starts_with(locks.id()));
    assert_eq!(holder.fencing_token(), Some(token));
    assert_eq!(holder.remaining(), Duration::from_secs(6));
    assert_eq!(memory.held(), vec!["stock:7".to_owned()]);
    // Renewed by the watchdog.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(memory.holder("stock:7").unwrap().remaining() > Duration::from_secs(4));
    guard.release().await.unwrap();
    assert!(memory.holder("stock:7").is_none());
    assert!(memory.held().is_empty());
    assert_eq!(memory.last_fencing_token("stock:7"), holder.fencing_token());
    assert!(locks.deployment_id().starts_with("memory:"));
    assert_eq!(memory.client().deployment_id(), locks.deployment_id());
    assert_ne!(
        MemoryLocks::new().client().deployment_id(),
        locks.deployment_id()
    );
}

#[tokio::test(start_paused = true)]
async fn separate_memory_locks_share_nothing() {
    let (one, two) = (MemoryLocks::new(), MemoryLocks::new());
    let _held = one.client().lock("stock:8").acquire().await.unwrap();
    let other = two.client();
    let guard = other
        .lock("stock:8")
        .try_acquire(Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(guard.fencing_token().await.unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_hooks_work_on_every_member_of_the_family() {
    let memory = MemoryLocks::new();
    let (a, b) = (memory.client(), memory.client());
    // Busy: a stand-in writer, or a holder of every permit, for the lease.
    memory.fail_next_acquire("rw", Fault::Busy(Duration::from_secs(1)));
    let err = a.rw_lock("rw").read().try_acquire(Duration::ZERO).await;
    assert!(err.unwrap_err().is_busy());
    assert_eq!(memory.holder("rw").unwrap().client_id(), None);
    let reader = b
        .rw_lock("rw")
        .read()
        .try_acquire(Duration::from_secs(2))
        .await;
    let reader = reader.expect("free once the stand-in's lease ended");
    memory.fail_next_acquire("sem", Fault::Busy(Duration::from_secs(1)));
    let err = a.semaphore("sem", 3).try_acquire(Duration::ZERO).await;
    assert!(err.unwrap_err().is_busy());
    assert_eq!(a.semaphore("sem", 3).available().await.unwrap(), 0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Every permit holder is listed, and loses its permits together with the others.
    let p1 = a.semaphore("sem", 3).acquire().await.unwrap();
    let p2 = b.semaphore("sem", 3).acquire().await.unwrap();
    let holders = memory.holders("sem");
    assert_eq!(holders.len(), 2);
    assert!(holders.iter().all(|h| h.client_id().is_some()));
    assert!(memory.lose("sem"));
    for permit in [&p1, &p2] {
        let err = tokio::time::timeout(Duration::from_millis(10), permit.lost())
            .await
            .expect("lost() at once");
        assert_eq!(
            lock_tests::loss_reason(&err),
            Some(LossReason::Deleted),
            "{err:?}"
        );
    }
    assert!(memory.holders("sem").is_empty());
    // A fair lock's acquisition meets a server that is down.
    memory.fail_next_acquire("fair", Fault::Unavailable);
    let err = a.fair_lock("fair").acquire().await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    let turn = a.fair_lock("fair").acquire().await.unwrap();
    assert_eq!(memory.held(), vec!["fair".to_owned(), "rw".to_owned()]);
    turn.release().await.unwrap();
    reader.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_name_used_as_two_kinds_of_lock_is_foreign_data() {
    let memory = MemoryLocks::new();
    let locks = memory.client();
    let mutex = locks.lock("one").acquire().await.unwrap();
    let err = locks.semaphore("one", 2).try_acquire(Duration::ZERO).await;
    assert!(matches!(err, Err(LockError::ForeignData { .. })), "{err:?}");
    mutex.release().await.unwrap();
    let permit = locks.semaphore("one", 2).acquire().await.unwrap();
    let err = locks.lock("one").try_acquire(Duration::ZERO).await;
    assert!(matches!(err, Err(LockError::ForeignData { .. })), "{err:?}");
    permit.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn scan_lists_the_held_names_of_the_clients_prefix() {
    let memory = MemoryLocks::new();
    let locks = memory.client();
    let shop = memory.builder().prefix("shop").build().await.unwrap();
    let mut guards = Vec::new();
    for name in ["stock:1", "stock:2", "order:{user:7}"] {
        guards.push(locks.lock(name).acquire().await.unwrap());
    }
    guards.push(locks.semaphore("supplier", 2).acquire().await.unwrap());
    guards.push(shop.lock("stock:3").acquire().await.unwrap());
    let mut stock = locks.scan("stock:*").collect_up_to(100).await.unwrap();
    stock.sort();
    assert_eq!(stock, ["stock:1", "stock:2"]);
    let mut all = locks.scan("*").collect_up_to(100).await.unwrap();
    all.sort();
    assert_eq!(all, ["order:{user:7}", "stock:1", "stock:2", "supplier"]);
    assert_eq!(
        shop.scan("*").collect_up_to(100).await.unwrap(),
        ["stock:3"]
    );
    drop(guards);
}
