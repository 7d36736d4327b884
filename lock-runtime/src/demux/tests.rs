//! The demultiplexer's state machine against a scripted subscription connection under paused
//! time: one waiter per unlock message, everyone on a lost connection, stale confirmations,
//! retries with backoff, unsubscribing after the last waiter.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::aio::AsyncPushSender;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::futures::Notified;
use tokio::time::Instant;

use super::Subscription;
use crate::LockClient;
use crate::fake::{FakeRedis, reply};

fn client(fake: FakeRedis) -> LockClient {
    LockClient::builder("redis://fake")
        .build_fake(fake)
        .unwrap()
}

fn fake() -> FakeRedis {
    FakeRedis::new(|_| async { Ok(reply(1, 0)) })
}

fn push(kind: PushKind, data: Vec<Value>) -> PushInfo {
    PushInfo { kind, data }
}

fn message(channel: &str) -> PushInfo {
    push(
        PushKind::Message,
        vec![
            Value::BulkString(channel.as_bytes().to_vec()),
            Value::BulkString(b"0".to_vec()),
        ],
    )
}

/// A wake-up of `sub`'s channel, already listening (as the wait loop does before it looks).
fn listening(sub: &Subscription) -> Pin<Box<Notified<'_>>> {
    let mut notified = Box::pin(sub.notify().notified());
    notified.as_mut().enable();
    notified
}

/// Whether a pinned `Notified` has fired, without waiting.
async fn fired(n: Pin<&mut Notified<'_>>) -> bool {
    tokio::time::timeout(Duration::ZERO, n).await.is_ok()
}

#[tokio::test(start_paused = true)]
async fn an_unlock_message_wakes_exactly_one_waiter() {
    let locks = client(fake());
    let demux = &locks.inner.demux;
    let (a, b) = (demux.subscribe("ch"), demux.subscribe("ch"));
    assert!(a.ready(Instant::now() + Duration::from_secs(1)).await);
    let (mut na, mut nb) = (listening(&a), listening(&b));
    demux.router().send(message("ch")).unwrap();
    demux.router().send(message("other")).unwrap();
    let woken = [fired(na.as_mut()).await, fired(nb.as_mut()).await];
    assert_eq!(woken.iter().filter(|w| **w).count(), 1, "{woken:?}");
}

/// Redisson's read/write lock channel: a write unlock (`1`) wakes every waiter, a read unlock
/// (`0`) one; the same `1` on a mutex's channel wakes one.
#[tokio::test(start_paused = true)]
async fn a_redisson_write_unlock_wakes_every_waiter_of_its_channel() {
    let locks = client(fake());
    let demux = &locks.inner.demux;
    let send = |channel: &str, payload: &[u8]| {
        let data = vec![
            Value::BulkString(channel.as_bytes().to_vec()),
            Value::BulkString(payload.to_vec()),
        ];
        demux.router().send(push(PushKind::Message, data)).unwrap();
    };
    let rule = super::WakeRule::WriteUnlockWakesAll;
    let rw = [0, 1, 2].map(|_| demux.subscribe_with("rw", rule));
    let mutex = [0, 1].map(|_| demux.subscribe("mutex"));
    assert!(rw[0].ready(Instant::now() + Duration::from_secs(1)).await);
    assert!(
        mutex[0]
            .ready(Instant::now() + Duration::from_secs(1))
            .await
    );

    let mut listeners: Vec<_> = rw.iter().chain(&mutex).map(listening).collect();
    send("rw", b"1");
    send("mutex", b"1");
    let mut woken = Vec::new();
    for n in &mut listeners {
        woken.push(fired(n.as_mut()).await);
    }
    assert_eq!(
        woken[..3],
        [true; 3],
        "every reader/writer of the rwlock: {woken:?}"
    );
    assert_eq!(woken[3..].iter().filter(|w| **w).count(), 1, "{woken:?}");

    let mut listeners: Vec<_> = rw.iter().map(listening).collect();
    send("rw", b"0");
    let mut woken = 0;
    for n in &mut listeners {
        woken += usize::from(fired(n.as_mut()).await);
    }
    assert_eq!(woken, 1);
}

#[tokio::test(start_paused = true)]
async fn a_lost_connection_wakes_every_waiter_and_resubscribes() {
    let subscribes = Arc::new(AtomicUsize::new(0));
    let count = subscribes.clone();
    let locks = client(fake().on_subscribe(move |_, on| {
        if on {
            count.fetch_add(1, Ordering::SeqCst);
        }
        async { Ok(()) }
    }));
    let demux = &locks.inner.demux;
    let (a, b) = (demux.subscribe("ch"), demux.subscribe("ch"));
    assert!(a.ready(Instant::now() + Duration::from_secs(1)).await);
    let (mut na, mut nb) = (listening(&a), listening(&b));
    demux
        .router()
        .send(push(PushKind::Disconnection, vec![]))
        .unwrap();
    assert!(!a.is_ready(), "unconfirmed until resubscribed");
    assert!(fired(na.as_mut()).await && fired(nb.as_mut()).await);
    assert!(a.ready(Instant::now() + Duration::from_secs(1)).await);
    assert_eq!(subscribes.load(Ordering::SeqCst), 2);
    assert_eq!(locks.subscribed_channels(), 1);
}

/// A confirmation that answers a SUBSCRIBE sent before the connection was lost says nothing
/// about the new connection.
#[tokio::test(start_paused = true)]
async fn a_confirmation_from_before_a_lost_connection_is_stale() {
    let calls = Arc::new(AtomicUsize::new(0));
    let count = calls.clone();
    let locks = client(fake().on_subscribe(move |_, _| {
        let n = count.fetch_add(1, Ordering::SeqCst);
        async move {
            let delay = if n == 0 { 500 } else { 50 };
            tokio::time::sleep(Duration::from_millis(delay)).await;
            Ok(())
        }
    }));
    let demux = &locks.inner.demux;
    let start = Instant::now();
    let sub = demux.subscribe("ch");
    tokio::time::sleep(Duration::from_millis(100)).await;
    demux
        .router()
        .send(push(PushKind::Disconnection, vec![]))
        .unwrap();
    // The first SUBSCRIBE answers at 500 ms; the one for the new connection at 550 ms.
    tokio::time::sleep_until(start + Duration::from_millis(520)).await;
    assert!(!sub.is_ready(), "a stale confirmation counted");
    assert!(sub.ready(start + Duration::from_millis(600)).await);
}

#[tokio::test(start_paused = true)]
async fn a_failing_subscribe_is_retried_with_backoff() {
    let calls = Arc::new(AtomicUsize::new(0));
    let count = calls.clone();
    let locks = client(fake().on_subscribe(move |_, _| {
        let n = count.fetch_add(1, Ordering::SeqCst);
        async move {
            if n < 3 {
                Err(redis::RedisError::from(std::io::Error::other("NOPERM")))
            } else {
                Ok(())
            }
        }
    }));
    let start = Instant::now();
    let sub = locks.inner.demux.subscribe("ch");
    assert!(sub.ready(start + Duration::from_secs(1)).await);
    // 10 + 20 + 40 ms of backoff.
    let took = start.elapsed();
    assert!(
        (Duration::from_millis(70)..Duration::from_millis(80)).contains(&took),
        "{took:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn the_last_waiter_leaving_unsubscribes() {
    let unsubscribed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = unsubscribed.clone();
    let locks = client(fake().on_subscribe(move |channels, on| {
        if !on {
            seen.lock().unwrap().extend(channels);
        }
        async { Ok(()) }
    }));
    let demux = &locks.inner.demux;
    let (a, b) = (demux.subscribe("ch"), demux.subscribe("ch"));
    assert!(a.ready(Instant::now() + Duration::from_secs(1)).await);
    drop(a);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(
        unsubscribed.lock().unwrap().is_empty(),
        "one waiter is left"
    );
    drop(b);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(*unsubscribed.lock().unwrap(), ["ch"]);
    assert_eq!(locks.subscribed_channels(), 0);
}
