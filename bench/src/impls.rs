//! The three locks under test, behind one interface.

use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{LockClient, LockGuard, LockOptions};
use redis::aio::MultiplexedConnection;

/// Every lock gets the same lease.
pub(crate) const LEASE: Duration = Duration::from_secs(10);

/// Which implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Ours as most callers use it: the watchdog (lease 10 s), tokens on demand.
    Ours,
    /// Ours with every lock taken `fenced` (the token with the grant).
    OursFenced,
    /// Our semaphore of [`SEMAPHORE_PERMITS`], one permit per acquisition (tokens on demand).
    OursSemaphore,
    Rslock,
    Naive,
}

/// The name of [`Kind::OursFenced`]'s rows.
pub(crate) const FENCED: &str = "lock-runtime, fenced";
/// The capacity of [`Kind::OursSemaphore`]'s semaphore.
pub(crate) const SEMAPHORE_PERMITS: u32 = 4;

impl Kind {
    pub(crate) const ALL: [Kind; 3] = [Kind::Ours, Kind::Rslock, Kind::Naive];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Ours => "lock-runtime",
            Kind::OursFenced => FENCED,
            Kind::OursSemaphore => "lock-runtime, semaphore",
            Kind::Rslock => "rslock",
            Kind::Naive => "naive",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Kind> {
        [Kind::OursFenced, Kind::OursSemaphore]
            .into_iter()
            .chain(Kind::ALL)
            .find(|k| k.name() == s)
    }
}

/// A connected lock client of one kind.
#[derive(Clone)]
pub(crate) enum Locker {
    Ours(LockClient),
    OursSemaphore(LockClient),
    Rslock(Arc<rslock::LockManager>),
    Naive(MultiplexedConnection),
}

/// A held lock of one kind.
pub(crate) enum Held {
    Ours(LockGuard),
    Rslock(rslock::LockGuard),
    Naive(String, String),
}

static NAIVE_RELEASE: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end",
    )
});

/// Our client as the bench uses it.
async fn ours(url: &str, kind: Kind) -> LockClient {
    LockClient::builder(url)
        .prefix("bench")
        // The lease every lock gets, renewed while held (a hold here is short).
        .watchdog_timeout(LEASE)
        .fenced_by_default(kind == Kind::OursFenced)
        .build()
        .await
        .expect("connect")
}

impl Locker {
    pub(crate) async fn connect(kind: Kind, url: &str) -> Locker {
        match kind {
            Kind::Ours | Kind::OursFenced => Locker::Ours(ours(url, kind).await),
            Kind::OursSemaphore => Locker::OursSemaphore(ours(url, kind).await),
            // Its recommended API with default retry settings (3 tries, up to 200 ms apart).
            Kind::Rslock => Locker::Rslock(Arc::new(rslock::LockManager::new(vec![url]))),
            Kind::Naive => Locker::Naive(
                redis::Client::open(url)
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connect"),
            ),
        }
    }

    /// Waits until the lock is held (generous wait for ours).
    pub(crate) async fn acquire(&self, key: &str) -> Held {
        match self {
            Locker::Ours(c) => Held::Ours(
                c.lock(key)
                    .acquire_with(LockOptions::new().wait(Duration::from_secs(60)))
                    .await
                    .expect("acquire"),
            ),
            Locker::OursSemaphore(c) => Held::Ours(
                c.semaphore(key, SEMAPHORE_PERMITS)
                    .acquire_with(LockOptions::new().wait(Duration::from_secs(60)))
                    .await
                    .expect("acquire"),
            ),
            Locker::Rslock(m) => {
                Held::Rslock(m.acquire(key.as_bytes(), LEASE).await.expect("acquire"))
            }
            Locker::Naive(conn) => {
                let token = uuid::Uuid::new_v4().to_string();
                let mut conn = conn.clone();
                loop {
                    let set: Option<String> = redis::cmd("SET")
                        .arg(key)
                        .arg(&token)
                        .arg("NX")
                        .arg("PX")
                        .arg(LEASE.as_millis() as u64)
                        .query_async(&mut conn)
                        .await
                        .expect("set");
                    if set.is_some() {
                        return Held::Naive(key.to_string(), token);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    pub(crate) async fn release(&self, held: Held) {
        match (self, held) {
            (_, Held::Ours(g)) => g.release().await.expect("release"),
            (_, Held::Rslock(g)) => g.release().await,
            (Locker::Naive(conn), Held::Naive(key, token)) => {
                let _: i64 = NAIVE_RELEASE
                    .key(key)
                    .arg(token)
                    .invoke_async(&mut conn.clone())
                    .await
                    .expect("release");
            }
            _ => unreachable!("a guard is released by the locker that made it"),
        }
    }
}
