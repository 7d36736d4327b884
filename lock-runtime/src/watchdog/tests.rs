//! The watchdog's state machine against a scripted Redis under paused time: rounds that hang,
//! leases that end mid-round, renewals that find the lock gone, a proxy that rejects
//! cross-slot calls.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::{RedisResult, Value};
use tokio::time::Instant;

use crate::fake::{Call, FakeRedis, reply, resp};
use crate::{LockClient, LockError, LockOptions, LossReason};

/// Grants every acquire and release; renewals are answered by `renew`.
fn granting<R, Fut>(renew: R) -> FakeRedis
where
    R: Fn(Call) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = RedisResult<Value>> + Send + 'static,
{
    let renew = Arc::new(renew);
    FakeRedis::new(move |call| {
        let renew = renew.clone();
        async move {
            match call.script().as_str() {
                "acquire" => Ok(reply(1, 7)),
                "renew" => renew(call).await,
                _ => Ok(reply(1, 0)),
            }
        }
    })
}

/// Every key of the call renewed.
fn renewed(call: &Call) -> Value {
    let n = call.keys().len();
    resp(&format!("*{n}\r\n{}", ":1\r\n".repeat(n)))
}

fn client(fake: FakeRedis, watchdog: Duration) -> LockClient {
    LockClient::builder("redis://fake")
        .watchdog_timeout(watchdog)
        .response_timeout(Duration::from_secs(2))
        .build_fake(fake)
        .unwrap()
}

fn reason(e: LockError) -> LossReason {
    match e {
        LockError::Lost { reason, .. } => reason,
        other => panic!("expected a loss, got {other:?}"),
    }
}

/// Finding H2: a lock registered while a round hangs is declared on time, not when the round
/// ends (about 1.4 s later here).
#[tokio::test(start_paused = true)]
async fn a_lease_that_ends_during_a_hanging_round_is_declared_on_time() {
    let fake = granting(|_| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(Value::Nil)
    });
    let locks = client(fake, Duration::from_secs(3));
    let _renewed = locks.lock("renewed").acquire().await.unwrap();
    // The first round starts at 1 s and hangs until its limit (about 2.5 s).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let start = Instant::now();
    let short = locks
        .lock("short")
        .acquire_with(LockOptions::new().lease(Duration::from_millis(200)))
        .await
        .unwrap();
    let lost = short.lost().await;
    let told = start.elapsed();
    assert_eq!(reason(lost), LossReason::LeaseExpired);
    assert!(told < Duration::from_millis(200), "told after {told:?}");
}

/// Finding M1: an explicit lease is declared lost a margin before it ends in Redis.
#[tokio::test(start_paused = true)]
async fn an_explicit_lease_is_lost_a_margin_before_it_ends() {
    let locks = client(
        granting(|c| async move { Ok(renewed(&c)) }),
        Duration::from_secs(3),
    );
    for lease_ms in [10u64, 30, 100, 1000] {
        let lease = Duration::from_millis(lease_ms);
        let start = Instant::now();
        let guard = locks
            .lock("leased")
            .acquire_with(LockOptions::new().lease(lease))
            .await
            .unwrap();
        let lost = guard.lost().await;
        let told = start.elapsed();
        assert_eq!(reason(lost), LossReason::LeaseExpired);
        let margin = crate::options::loss_margin(lease);
        assert!(margin >= Duration::from_millis(5));
        assert!(
            told <= lease - margin + Duration::from_millis(1),
            "lease {lease:?}: told after {told:?}"
        );
        drop(guard);
    }
}

/// `remaining_validity()` and `is_lost()` agree: the validity counts down to the instant the
/// hold counts as lost (a margin before the lease ends in Redis), not to the lease's end, for an
/// explicit lease and for a watchdog-renewed one.
#[tokio::test(start_paused = true)]
async fn remaining_validity_reaches_zero_exactly_when_the_hold_counts_as_lost() {
    // Renewals hang: the watchdog-renewed hold runs out too.
    let locks = client(
        granting(|_| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(Value::Nil)
        }),
        Duration::from_secs(3),
    );
    for lease in [None, Some(Duration::from_millis(700))] {
        let options = lease.map_or(LockOptions::new(), |l| LockOptions::new().lease(l));
        let sent = Instant::now();
        let guard = locks.lock("validity").acquire_with(options).await.unwrap();
        let lease = lease.unwrap_or(Duration::from_secs(3));
        let until = guard.valid_until().expect("held");
        assert!(
            until < sent + lease,
            "lease {lease:?}: valid until {:?}, not a margin before the lease ends",
            until - sent
        );
        // Just before it: held, with some validity left.
        advance_without_yielding((until - Instant::now()).saturating_sub(Duration::from_millis(1)));
        assert!(!guard.is_lost(), "lease {lease:?}");
        assert!(
            guard.remaining_validity() > Duration::ZERO,
            "lease {lease:?}"
        );
        // At it: lost, and no validity left.
        advance_without_yielding(Duration::from_millis(1));
        assert!(guard.is_lost(), "lease {lease:?}");
        assert_eq!(
            guard.remaining_validity(),
            Duration::ZERO,
            "lease {lease:?}"
        );
        drop(guard);
    }
}

/// Finding M1: a lease with a fraction of a millisecond is sent rounded up, never down.
#[tokio::test(start_paused = true)]
async fn a_lease_is_sent_rounded_up_to_whole_milliseconds() {
    let fake = granting(|c| async move { Ok(renewed(&c)) });
    let locks = client(fake.clone(), Duration::from_secs(3));
    let guard = locks
        .lock("fraction")
        .acquire_with(LockOptions::new().lease(Duration::from_micros(10_500)))
        .await
        .unwrap();
    let acquire = fake
        .calls()
        .into_iter()
        .find(|c| c.script() == "acquire")
        .unwrap();
    assert_eq!(acquire.argv()[1], "11", "{acquire:?}");
    drop(guard);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_renewal_declares_the_loss_before_the_lease_could_end() {
    let fake = granting(|_| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(Value::Nil)
    });
    let locks = client(fake, Duration::from_secs(3));
    let start = Instant::now();
    let guard = locks.lock("hung").acquire().await.unwrap();
    let lost = guard.lost().await;
    let told = start.elapsed();
    assert_eq!(reason(lost), LossReason::RenewalFailed);
    // Lease 3 s, margin 300 ms.
    assert!(told <= Duration::from_millis(2701), "told after {told:?}");
    assert!(told >= Duration::from_millis(2500), "told after {told:?}");
    assert_eq!(locks.held_locks(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_renewal_that_finds_the_lock_gone_declares_it_at_once() {
    let fake = granting(|c| async move {
        let n = c.keys().len();
        Ok(resp(&format!("*{n}\r\n{}", ":0\r\n".repeat(n))))
    });
    let locks = client(fake, Duration::from_secs(3));
    let start = Instant::now();
    let guard = locks.lock("deleted").acquire().await.unwrap();
    assert_eq!(reason(guard.lost().await), LossReason::Deleted);
    // At the first round, a third of the lease in.
    let told = start.elapsed();
    assert!(
        (Duration::from_millis(999)..=Duration::from_millis(1001)).contains(&told),
        "{told:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn max_hold_stops_renewal_and_releases() {
    let fake = granting(|c| async move { Ok(renewed(&c)) });
    let locks = client(fake.clone(), Duration::from_secs(3));
    let start = Instant::now();
    let guard = locks
        .lock("capped")
        .acquire_with(LockOptions::new().max_hold(Duration::from_millis(1500)))
        .await
        .unwrap();
    assert_eq!(reason(guard.lost().await), LossReason::MaxHoldExceeded);
    let told = start.elapsed();
    assert!(told <= Duration::from_millis(1501), "{told:?}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let releases = fake
        .calls()
        .iter()
        .filter(|c| c.script() == "release")
        .count();
    assert_eq!(releases, 1, "the lock is released when max_hold ends");
}

/// Item 8: behind a proxy in front of a cluster, a renewal spanning slots is a CROSSSLOT error;
/// the watchdog falls back to one call per slot and keeps the locks.
#[tokio::test(start_paused = true)]
async fn renewals_fall_back_to_one_slot_per_call_after_crossslot() {
    let fake = granting(|c| async move {
        let mut slots: Vec<u16> = c.keys().iter().map(|k| crate::topology::slot(k)).collect();
        slots.dedup();
        Ok(if slots.len() > 1 {
            resp("-CROSSSLOT Keys in request don't hash to the same slot\r\n")
        } else {
            renewed(&c)
        })
    });
    let locks = client(fake.clone(), Duration::from_secs(3));
    let names = ["a", "b", "c", "stock:1", "stock:2"];
    let mut guards = Vec::new();
    for name in names {
        guards.push(locks.lock(name).acquire().await.unwrap());
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    for g in &guards {
        assert!(!g.is_lost(), "{} lost", g.name());
    }
    let renewals: Vec<Call> = fake
        .calls()
        .into_iter()
        .filter(|c| c.script() == "renew")
        .collect();
    // One rejected multi-slot call, then one call per lock (each in its own slot) per round.
    assert_eq!(renewals[0].keys().len(), names.len());
    assert!(renewals[1..].iter().all(|c| c.keys().len() == 1));
    assert!(renewals.len() > 1 + 2 * names.len(), "{}", renewals.len());
}

/// A grant whose answer arrives after the lease could have ended (a stalled connection, a
/// paused server, a cluster retrying through a slot migration) is not handed to the caller:
/// the acquire takes the lock again with the same owner id and returns with a fresh lease.
#[tokio::test(start_paused = true)]
async fn a_grant_answered_after_its_lease_is_taken_again_before_use() {
    let acquires = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let fake = FakeRedis::new({
        let acquires = acquires.clone();
        move |call| {
            let acquires = acquires.clone();
            async move {
                match call.script().as_str() {
                    "acquire" => {
                        let n = acquires.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        if n == 0 {
                            // Answered 1.2 s after it was sent: past a 1 s lease.
                            tokio::time::sleep(Duration::from_millis(1200)).await;
                        }
                        Ok(reply(1, 7 + n as i64))
                    }
                    "renew" => Ok(renewed(&call)),
                    _ => Ok(reply(1, 0)),
                }
            }
        }
    });
    let locks = client(fake, Duration::from_secs(1));
    // Fenced: each grant carries its own token, which tells them apart.
    let guard = locks.lock("late").fenced().acquire().await.unwrap();
    assert_eq!(acquires.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(
        guard.fencing_token().await.unwrap(),
        8,
        "the second, timely grant"
    );
    assert!(!guard.is_lost());
    // A fresh lease (1 s) less the loss margin (a tenth).
    assert!(guard.remaining_validity() > Duration::from_millis(800));
    assert_eq!(guard.run(async { "body" }).await.unwrap(), "body");
}

/// The same for a hand-off through Redis (SAFETY.md, promise 1: "by an acquire or a
/// hand-off"): a release that grants the lock to a waiting task, answered after the waiter's
/// lease could have ended, is not handed to the waiter as it is; the waiter takes the lock
/// again with its own owner id and returns with a fresh lease and that grant's token.
#[tokio::test(start_paused = true)]
async fn a_hand_off_answered_after_its_lease_is_taken_again_before_use() {
    let acquires = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fake = FakeRedis::new({
        let (acquires, released) = (acquires.clone(), released.clone());
        move |call| {
            let (acquires, released) = (acquires.clone(), released.clone());
            async move {
                match call.script().as_str() {
                    "acquire" => {
                        let n = acquires.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        Ok(if n == 0 {
                            // The first holder.
                            reply(1, 7)
                        } else if !released.load(std::sync::atomic::Ordering::SeqCst) {
                            // The waiter's attempts while it is held: 30 s more.
                            reply(0, 30_000)
                        } else {
                            // The waiter taking it again after the late hand-off.
                            reply(1, 10)
                        })
                    }
                    "release" => {
                        assert!(call.args.len() > 6, "a hand-off: {call:?}");
                        // Handed to the waiter with token 9, answered 1.2 s after it was sent:
                        // past a 1 s lease.
                        tokio::time::sleep(Duration::from_millis(1200)).await;
                        released.store(true, std::sync::atomic::Ordering::SeqCst);
                        Ok(reply(2, 9))
                    }
                    "renew" => Ok(renewed(&call)),
                    _ => Ok(reply(1, 0)),
                }
            }
        }
    });
    let locks = client(fake, Duration::from_secs(1));
    // Fenced: the hand-off goes through Redis, which issues the waiter's token in its step.
    let first = locks.lock("late").fenced().acquire().await.unwrap();
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .lock("late")
                .fenced()
                .acquire_with(LockOptions::new().wait(Duration::from_secs(10)))
                .await
        }
    });
    // Its first attempt, then its waiting one (subscribed): queued for a hand-off.
    while acquires.load(std::sync::atomic::Ordering::SeqCst) < 3 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    first.release().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    assert_eq!(
        acquires.load(std::sync::atomic::Ordering::SeqCst),
        4,
        "taken again after the late hand-off"
    );
    assert_eq!(
        guard.fencing_token().await.unwrap(),
        10,
        "the timely grant's token, not the late hand-off's"
    );
    assert!(!guard.is_lost());
    // A fresh lease (the late grant's would have ended 200 ms before it was answered).
    let left = guard.remaining_validity();
    assert!(left > Duration::from_millis(500), "{left:?}");
}

/// The safety net under it: a hold registered with the watchdog after its loss deadline is
/// declared lost at once, not at the watchdog's next tick.
#[tokio::test(start_paused = true)]
async fn a_hold_registered_past_its_deadline_is_lost_at_once() {
    let locks = client(
        granting(|c| async move { Ok(renewed(&c)) }),
        Duration::from_secs(3),
    );
    let signal = Arc::new(crate::signal::LossSignal::new(
        crate::metrics::Group::resolve(None, "x"),
    ));
    let names = Arc::new(crate::keys::LockNames::new("lock", "late").unwrap());
    let lease = Duration::from_millis(100);
    locks.inner.watchdog.register(
        1,
        super::Entry {
            names,
            owner: "me:1".into(),
            renew: false,
            confirmed_until: Instant::now() + crate::options::loss_margin(lease) / 2,
            max_hold_until: None,
            lease,
            signal: signal.clone(),
        },
    );
    assert_eq!(signal.get(), Some(LossReason::LeaseExpired));
    assert_eq!(locks.held_locks(), 0);
}

/// Moves the paused clock forward without yielding, so no other task (the watchdog) runs.
fn advance_without_yielding(d: Duration) {
    let mut advance = std::pin::pin!(tokio::time::advance(d));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    // The clock moves on the first poll; what is left is a yield, dropped here.
    let _ = advance.as_mut().poll(&mut cx);
}

/// SAFETY.md "Paused processes": a holder that runs before the watchdog task (a process
/// resumed after `SIGSTOP`, a starved runtime) still sees the loss once its clock is past the
/// hold's local deadline; every way of asking agrees, and renewals had moved that deadline.
#[tokio::test(start_paused = true)]
async fn a_check_past_the_deadline_reports_the_loss_before_the_watchdog_runs() {
    use futures_util::FutureExt;
    let locks = client(
        granting(|c| async move { Ok(renewed(&c)) }),
        Duration::from_secs(1),
    );
    let renewed_lock = locks.lock("renewed").acquire().await.unwrap();
    let leased = locks
        .lock("leased")
        .acquire_with(LockOptions::new().lease(Duration::from_secs(5)))
        .await
        .unwrap();
    // Renewals every third of the watchdog timeout keep it held well past its first lease.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!renewed_lock.is_lost());
    let left = renewed_lock.remaining_validity();
    assert!(left > Duration::ZERO);
    // Frozen past the last confirmed lease; the watchdog task does not get to run.
    advance_without_yielding(left);
    assert!(renewed_lock.is_lost());
    assert_eq!(renewed_lock.valid_until(), None);
    assert_eq!(renewed_lock.remaining_validity(), Duration::ZERO);
    let lost = renewed_lock
        .lost()
        .now_or_never()
        .expect("lost() resolves at once");
    assert_eq!(reason(lost), LossReason::RenewalFailed);
    let run = renewed_lock
        .run(async {})
        .now_or_never()
        .expect("run() ends at once");
    assert_eq!(reason(run.unwrap_err()), LossReason::RenewalFailed);
    // The explicit lease, 2 s from its end, is still held; past its margin it is not.
    assert!(!leased.is_lost());
    assert!(leased.lost_owned().now_or_never().is_none());
    advance_without_yielding(
        Duration::from_secs(2) - crate::options::loss_margin(Duration::from_secs(5)),
    );
    let owned = leased
        .lost_owned()
        .now_or_never()
        .expect("lost_owned() resolves at once");
    assert_eq!(reason(owned), LossReason::LeaseExpired);
    assert!(leased.is_lost());
    assert_eq!(locks.held_locks(), 0);
}

/// `lost()` wakes at the local deadline by its own timer, with no watchdog to declare it, and
/// a confirmed renewal (`extend`) moves that wake-up forward.
#[tokio::test(start_paused = true)]
async fn lost_wakes_at_the_deadline_by_its_own_timer() {
    let signal = crate::signal::LossSignal::new(crate::metrics::Group::resolve(None, "x"));
    let names = Arc::new(crate::keys::LockNames::new("lock", "alone").unwrap());
    let start = Instant::now();
    signal.arm(
        &names,
        Some(start + Duration::from_millis(500)),
        LossReason::RenewalFailed,
    );
    assert_eq!(signal.get(), None);
    let wait = signal.wait();
    tokio::pin!(wait);
    tokio::select! {
        _ = &mut wait => panic!("lost before its deadline"),
        _ = tokio::time::sleep(Duration::from_millis(300)) => {}
    }
    signal.extend(start + Duration::from_millis(800));
    assert_eq!(wait.await, LossReason::RenewalFailed);
    assert!(start.elapsed() >= Duration::from_millis(800));
    assert_eq!(signal.get(), Some(LossReason::RenewalFailed));
}

/// The family shares the clock-based look: a `MultiLockGuard` (and so the macro's held body
/// and lock-tower's held bodies, which run under `run`/`lost_owned` of these guards) reports
/// the loss of a member past its deadline before the watchdog task runs.
#[tokio::test(start_paused = true)]
async fn a_multi_lock_past_a_deadline_is_lost_before_the_watchdog_runs() {
    use futures_util::FutureExt;
    let locks = client(
        granting(|c| async move { Ok(renewed(&c)) }),
        Duration::from_secs(1),
    );
    let multi = crate::MultiLock::new([locks.lock("a"), locks.lock("b")])
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let lost_owned = multi.lost_owned();
    tokio::pin!(lost_owned);
    assert!(lost_owned.as_mut().now_or_never().is_none());
    assert!(!multi.is_lost());
    advance_without_yielding(Duration::from_secs(1));
    assert!(multi.is_lost());
    let lost = lost_owned
        .now_or_never()
        .expect("lost_owned() resolves at once");
    assert_eq!(reason(lost), LossReason::RenewalFailed);
    let run = multi
        .run(async {})
        .now_or_never()
        .expect("run() ends at once");
    assert_eq!(reason(run.unwrap_err()), LossReason::RenewalFailed);
    assert!(multi.lost().now_or_never().is_some());
}
