//! The lock family's benchmarks: semaphore throughput and wake-up, read-heavy read/write
//! throughput, fair-lock hand-over rate and order, each next to the mutex on the same workload.
//!
//! The references are our own mutex on the same workload (for the order, the mutex's order of
//! grants) and a peer from crates.io: for the semaphore and the read/write lock
//! `distributed-lock-redis` 0.2 (its waiters poll with a backoff of 10 to 200 ms; its leases
//! are extended by a background task), for the fair lock `redisson` 0.1's `AsyncRFairLock`
//! (a Redis list as the queue, polled every 100 ms). The latter runs as a separate binary,
//! `bench/peers/redisson-fair`, a workspace of its own that `scripts/bench.sh` builds, so its
//! dependencies stay out of ours.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_runtime::{Lock, LockClient, LockGuard, LockOptions};
use lock_tests::mono_ns;

use crate::impls::Kind;
use crate::stats::{self, quantile};

/// The family's figures of one run.
#[derive(Debug, Clone, Default)]
pub(crate) struct FamilyFigures {
    /// 16 tasks taking one permit (capacity 4) vs the mutex: acquisitions/s.
    pub(crate) sem_per_s: f64,
    pub(crate) sem_mutex_per_s: f64,
    /// Jain's index over those 16 tasks' acquisitions.
    pub(crate) sem_jain: f64,
    /// 4 processes × 4 tasks on the same semaphore of 4: acquisitions/s, Jain's index over the
    /// processes and over the tasks.
    pub(crate) sem_processes: (f64, f64, f64),
    /// One task, uncontended: acquire + release pairs/s, semaphore vs mutex.
    pub(crate) sem_uncontended: f64,
    pub(crate) mutex_uncontended: f64,
    /// Release → waiter holding, p50 / p99 µs: semaphore vs mutex.
    pub(crate) sem_wake: (f64, f64),
    pub(crate) mutex_wake: (f64, f64),
    /// 16 tasks, nine reads to one write, 1 ms each: operations/s, read/write lock vs mutex.
    pub(crate) rw_per_s: f64,
    pub(crate) rw_mutex_per_s: f64,
    /// 4 clients × 2 tasks on one lock: hand-overs/s and order (share of grants in ask order
    /// within 1 ms), fair lock vs mutex.
    pub(crate) fair: Order,
    pub(crate) fair_mutex: Order,
    /// The same scenarios with `distributed-lock-redis`: semaphore acquisitions/s, uncontended
    /// pairs/s, wake-up p50 / p99 µs, read-heavy operations/s.
    pub(crate) peer_sem_per_s: f64,
    pub(crate) peer_sem_uncontended: f64,
    pub(crate) peer_sem_wake: (f64, f64),
    /// Read-heavy operations/s and acquisitions that gave up after 2 s; `None` when the peer
    /// did not grant even an uncontended read or write within 2 s.
    pub(crate) peer_rw: Option<(f64, u64)>,
    /// `redisson`'s fair lock on the order workload, and its `lock()` calls that failed; `None`
    /// when its binary is not built.
    pub(crate) peer_fair: Option<(Order, u64)>,
}

/// `distributed-lock-redis`, on the same workloads.
mod peer {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use distributed_lock_core::prelude::*;
    use distributed_lock_redis::RedisLockProvider;
    pub(super) use distributed_lock_redis::{
        RedisDistributedSemaphore as Semaphore, RedisSemaphoreHandle as Permit,
    };

    /// How long a peer waiter waits (its `None` means no wait at all, not "forever").
    const WAIT: Option<Duration> = Some(Duration::from_secs(60));
    /// The read/write workload's wait: its acquisitions can starve (see the report).
    pub(super) const RW_WAIT: Option<Duration> = Some(Duration::from_secs(2));

    async fn provider(url: &str) -> RedisLockProvider {
        RedisLockProvider::builder()
            .url(url)
            .expiry(Duration::from_secs(10))
            .build()
            .await
            .expect("distributed-lock-redis connects")
    }

    /// A semaphore of the peer's, on its own connection.
    pub(super) async fn semaphore(url: &str, name: &str, capacity: u32) -> Arc<Semaphore> {
        Arc::new(provider(url).await.create_semaphore(name, capacity))
    }

    /// Takes one of the peer's permits.
    pub(super) async fn permit(sem: &Semaphore) -> Permit {
        sem.acquire(WAIT).await.unwrap()
    }

    /// Operations/s, and how many acquisitions gave up after [`RW_WAIT`]; `None` when even an
    /// uncontended read or write was not granted within it.
    pub(super) async fn read_heavy(url: &str, run: Duration) -> Option<(f64, u64)> {
        let providers = [provider(url).await, provider(url).await];
        let locks = providers.map(|p| Arc::new(p.create_reader_writer_lock("peer-rw")));
        // Uncontended, each side must work first (so a starved run below is the workload, not
        // misuse); `None` when it does not.
        let read = locks[0].acquire_read(RW_WAIT).await.ok()?;
        read.release().await.ok()?;
        let write = locks[1].acquire_write(RW_WAIT).await.ok()?;
        write.release().await.ok()?;
        let until = Instant::now() + run;
        let mut handles = Vec::new();
        for t in 0..16usize {
            let lock = locks[t % 2].clone();
            handles.push(tokio::spawn(async move {
                let (mut n, mut timeouts) = (0u64, 0u64);
                while Instant::now() < until {
                    let done = if (n as usize + t + timeouts as usize).is_multiple_of(10) {
                        match lock.acquire_write(RW_WAIT).await {
                            Ok(h) => {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                                h.release().await.unwrap();
                                true
                            }
                            Err(_) => false,
                        }
                    } else {
                        match lock.acquire_read(RW_WAIT).await {
                            Ok(h) => {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                                h.release().await.unwrap();
                                true
                            }
                            Err(_) => false,
                        }
                    };
                    if done {
                        n += 1;
                    } else {
                        timeouts += 1;
                    }
                }
                (n, timeouts)
            }));
        }
        let (mut total, mut timeouts) = (0, 0);
        for h in handles {
            let (n, t) = h.await.unwrap();
            total += n;
            timeouts += t;
        }
        Some((total as f64 / run.as_secs_f64(), timeouts))
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Order {
    pub(crate) per_s: f64,
    pub(crate) in_order: f64,
    pub(crate) wait_p99_us: f64,
}

async fn client(url: &str) -> LockClient {
    LockClient::builder(url)
        .prefix("bench-family")
        .build()
        .await
        .unwrap()
}

/// How a task takes the lock under test.
#[derive(Clone)]
enum Take {
    Lock(Lock),
    Permit(lock_runtime::Semaphore),
    PeerPermit(Arc<peer::Semaphore>),
}

/// What [`Take::take`] holds.
enum Taken {
    Ours(LockGuard),
    Peer(peer::Permit),
}

impl Take {
    async fn take(&self) -> Taken {
        match self {
            Take::Lock(lock) => Taken::Ours(lock.acquire().await.unwrap()),
            Take::Permit(sem) => Taken::Ours(sem.acquire().await.unwrap()),
            Take::PeerPermit(sem) => Taken::Peer(peer::permit(sem).await),
        }
    }
}

impl Taken {
    async fn release(self) {
        match self {
            Taken::Ours(guard) => guard.release().await.unwrap(),
            Taken::Peer(permit) => distributed_lock_core::prelude::LockHandle::release(permit)
                .await
                .unwrap(),
        }
    }
}

/// `tasks` tasks taking and releasing as fast as they can for `run`: acquisitions/s.
async fn churn(take: Take, tasks: usize, run: Duration) -> f64 {
    let until = Instant::now() + run;
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let take = take.clone();
        handles.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < until {
                let held = take.take().await;
                n += 1;
                held.release().await;
            }
            n
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.unwrap();
    }
    total as f64 / run.as_secs_f64()
}

/// Release → the waiting task of another client holding it, `cycles` times: p50, p99 µs.
async fn wake(holder: Take, waiter: Take, cycles: usize) -> (f64, f64) {
    let mut delays = Vec::new();
    for _ in 0..cycles {
        let held = holder.take().await;
        let w = waiter.clone();
        let task = tokio::spawn(async move {
            let held = w.take().await;
            let got = Instant::now();
            held.release().await;
            got
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        held.release().await;
        let released = Instant::now();
        delays.push(task.await.unwrap().saturating_duration_since(released));
    }
    (
        stats::us(quantile(&mut delays, 0.5)),
        stats::us(quantile(&mut delays, 0.99)),
    )
}

/// 16 tasks over two clients, nine reads to one write, each held 1 ms: operations/s.
async fn read_heavy(url: &str, rw: bool, run: Duration) -> f64 {
    let clients = [client(url).await, client(url).await];
    let until = Instant::now() + run;
    let mut handles = Vec::new();
    for t in 0..16usize {
        let c = clients[t % 2].clone();
        handles.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < until {
                let write = (n as usize + t).is_multiple_of(10);
                let g = match (rw, write) {
                    (true, true) => c.rw_lock("rw").write().acquire().await.unwrap(),
                    (true, false) => c.rw_lock("rw").read().acquire().await.unwrap(),
                    (false, _) => c.lock("rw-as-mutex").acquire().await.unwrap(),
                };
                tokio::time::sleep(Duration::from_millis(1)).await;
                g.release().await.unwrap();
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.unwrap();
    }
    total as f64 / run.as_secs_f64()
}

/// 4 clients × 2 tasks on one lock, each asking again at once: hand-overs/s and the share of
/// grants that follow the ask order (a grant whose task asked more than 1 ms after another
/// still-waiting task's is out of order).
async fn order(url: &str, fair: bool, run: Duration) -> Order {
    let until = Instant::now() + run;
    let grants: Arc<Mutex<Vec<(u64, u64, Duration)>>> = Arc::default();
    let mut handles = Vec::new();
    for _ in 0..4 {
        let c = client(url).await;
        for _ in 0..2 {
            let (c, grants) = (c.clone(), grants.clone());
            handles.push(tokio::spawn(async move {
                let lock = if fair {
                    c.fair_lock("order")
                } else {
                    c.lock("order-mutex")
                };
                let mut local = Vec::new();
                while Instant::now() < until {
                    let asked = mono_ns();
                    let t = Instant::now();
                    let g = lock
                        .acquire_with(LockOptions::new().wait(Duration::from_secs(10)))
                        .await
                        .unwrap();
                    local.push((asked, mono_ns(), t.elapsed()));
                    g.release().await.unwrap();
                }
                grants.lock().unwrap().extend(local);
            }));
        }
    }
    for h in handles {
        h.await.unwrap();
    }
    let grants = std::mem::take(&mut *grants.lock().unwrap());
    score(grants, run)
}

/// Scores grants `(asked, granted, waited)` (asked and granted on one clock, ns): hand-overs/s
/// over `run`, the share in ask order, wait p99.
fn score(mut grants: Vec<(u64, u64, Duration)>, run: Duration) -> Order {
    grants.sort_by_key(|g| g.1);
    // For each grant: was any task that asked clearly earlier still waiting (granted later)?
    let mut in_order = 0usize;
    for (i, g) in grants.iter().enumerate() {
        let jumped = grants[i + 1..]
            .iter()
            .take(16)
            .any(|later| later.0 + 1_000_000 < g.0);
        if !jumped {
            in_order += 1;
        }
    }
    let mut waits: Vec<Duration> = grants.iter().map(|g| g.2).collect();
    Order {
        per_s: grants.len() as f64 / run.as_secs_f64(),
        in_order: in_order as f64 / grants.len().max(1) as f64,
        wait_p99_us: stats::us(quantile(&mut waits, 0.99)),
    }
}

/// Where `scripts/bench.sh` builds the `redisson` fair-lock driver.
const PEER_FAIR_BIN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../target/peers/release/peer-redisson-fair"
);

/// The order workload on `redisson` 0.1's fair lock, in its own process (4 clients × 2 tasks).
/// `None` when the driver is not built or fails.
async fn peer_order(url: &str, run: Duration) -> Option<(Order, u64)> {
    if !std::path::Path::new(PEER_FAIR_BIN).exists() {
        return None;
    }
    let out = tokio::process::Command::new(PEER_FAIR_BIN)
        .arg(url)
        .arg(run.as_secs_f64().to_string())
        .output()
        .await
        .ok()
        .filter(|out| out.status.success())?;
    let mut grants = Vec::new();
    let mut failed = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["grant", asked, granted] => {
                let (asked, granted): (u64, u64) = (asked.parse().ok()?, granted.parse().ok()?);
                let waited = Duration::from_nanos(granted.saturating_sub(asked));
                grants.push((asked, granted, waited));
            }
            ["failed", n] => failed = n.parse().ok()?,
            _ => return None,
        }
    }
    Some((score(grants, run), failed))
}

pub(crate) async fn run(url: &str, run: Duration, cycles: usize) -> FamilyFigures {
    let a = client(url).await;
    let b = client(url).await;
    let mut f = FamilyFigures::default();
    crate::progress("lock family: semaphore, 16 tasks, 4 permits");
    let sem = crate::hot::hot_in_process(Kind::OursSemaphore, url, 16, run).await;
    (f.sem_per_s, f.sem_jain) = (sem.acq_per_s, sem.jain);
    f.sem_mutex_per_s = churn(Take::Lock(a.lock("sem-mutex")), 16, run).await;
    crate::progress("lock family: semaphore, 4 processes × 4 tasks, 4 permits");
    let sem = crate::hot::hot_processes(Kind::OursSemaphore, url, 4, 4, run).await;
    f.sem_processes = (sem.acq_per_s, sem.jain_processes, sem.jain);
    crate::progress("lock family: uncontended semaphore and mutex");
    f.sem_uncontended = churn(Take::Permit(a.semaphore("sem-1", 4)), 1, run).await;
    f.mutex_uncontended = churn(Take::Lock(a.lock("mutex-1")), 1, run).await;
    crate::progress("lock family: semaphore and mutex wake-up");
    f.sem_wake = wake(
        Take::Permit(a.semaphore("sem-wake", 1)),
        Take::Permit(b.semaphore("sem-wake", 1)),
        cycles,
    )
    .await;
    f.mutex_wake = wake(
        Take::Lock(a.lock("mutex-wake")),
        Take::Lock(b.lock("mutex-wake")),
        cycles,
    )
    .await;
    crate::progress("lock family: read-heavy read/write lock and mutex");
    f.rw_per_s = read_heavy(url, true, run).await;
    f.rw_mutex_per_s = read_heavy(url, false, run).await;
    crate::progress("lock family: distributed-lock-redis semaphore and read/write lock");
    let peer_sem = Take::PeerPermit(peer::semaphore(url, "peer-sem", 4).await);
    f.peer_sem_per_s = churn(peer_sem.clone(), 16, run).await;
    f.peer_sem_uncontended = churn(peer_sem, 1, run).await;
    f.peer_sem_wake = wake(
        Take::PeerPermit(peer::semaphore(url, "peer-wake", 1).await),
        Take::PeerPermit(peer::semaphore(url, "peer-wake", 1).await),
        cycles,
    )
    .await;
    f.peer_rw = peer::read_heavy(url, run).await;
    crate::progress("lock family: fair lock and mutex order, 4 clients × 2 tasks");
    f.fair = order(url, true, run).await;
    f.fair_mutex = order(url, false, run).await;
    crate::progress("lock family: redisson 0.1 fair lock order, 4 clients × 2 tasks");
    f.peer_fair = peer_order(url, run).await;
    f
}

/// The report's section.
pub(crate) fn markdown(f: &FamilyFigures) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## Lock family\n");
    let _ = writeln!(
        s,
        "Next to our mutex on the same workload, and to a peer on crates.io: \
         `distributed-lock-redis` 0.2 for the semaphore and the read/write lock (its waiters poll \
         with a backoff of 10 to 200 ms), `redisson` 0.1's `AsyncRFairLock` for the fair lock (a \
         Redis list as the queue, polled every 100 ms; run in its own process). Ratios are ours \
         over the mutex, and ours over the peer.\n"
    );
    let _ = writeln!(
        s,
        "| scenario | primitive | mutex | ratio | peer | ours / peer |\n|---|---|---|---|---|---|"
    );
    semaphore_rows(&mut s, f);
    fair_rows(&mut s, f);
    peer_notes(&mut s, f);
    s
}

/// Ours over another figure, 0 when there is none.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// The semaphore's rows, and the read/write lock's.
fn semaphore_rows(s: &mut String, f: &FamilyFigures) {
    let _ = writeln!(
        s,
        "| 16 tasks, one permit each (semaphore of 4) vs one mutex: acquisitions/s | {:.0} | {:.0} | {:.2}× | {:.0} | {:.2}× |",
        f.sem_per_s,
        f.sem_mutex_per_s,
        ratio(f.sem_per_s, f.sem_mutex_per_s),
        f.peer_sem_per_s,
        ratio(f.sem_per_s, f.peer_sem_per_s)
    );
    let _ = writeln!(
        s,
        "| same: Jain's index across the 16 tasks | {:.3} | | | | |",
        f.sem_jain
    );
    let _ = writeln!(
        s,
        "| 4 processes × 4 tasks, one permit each (semaphore of 4): acquisitions/s; Jain's index across processes / tasks | {:.0}; {:.3} / {:.3} | | | | {:.2}× (16 tasks) |",
        f.sem_processes.0,
        f.sem_processes.1,
        f.sem_processes.2,
        ratio(f.sem_processes.0, f.peer_sem_per_s)
    );
    let _ = writeln!(
        s,
        "| 1 task, uncontended (semaphore): acquire + release pairs/s | {:.0} | {:.0} | {:.2}× | {:.0} | {:.2}× |",
        f.sem_uncontended,
        f.mutex_uncontended,
        ratio(f.sem_uncontended, f.mutex_uncontended),
        f.peer_sem_uncontended,
        ratio(f.sem_uncontended, f.peer_sem_uncontended)
    );
    let _ = writeln!(
        s,
        "| semaphore wake-up, release → waiter of another client holding, p50 / p99 µs | {:.0} / {:.0} | {:.0} / {:.0} | {:.2}× (p50) | {:.0} / {:.0} | {:.2}× (p50) |",
        f.sem_wake.0,
        f.sem_wake.1,
        f.mutex_wake.0,
        f.mutex_wake.1,
        ratio(f.sem_wake.0, f.mutex_wake.0),
        f.peer_sem_wake.0,
        f.peer_sem_wake.1,
        ratio(f.sem_wake.0, f.peer_sem_wake.0)
    );
    let _ = writeln!(
        s,
        "| read-heavy: 16 tasks, 9 reads : 1 write, 1 ms each (read/write lock vs mutex): operations/s | {:.0} | {:.0} | {:.2}× | {} |",
        f.rw_per_s,
        f.rw_mutex_per_s,
        ratio(f.rw_per_s, f.rw_mutex_per_s),
        match f.peer_rw {
            Some((per_s, _)) => format!("{per_s:.0} | {:.2}×", ratio(f.rw_per_s, per_s)),
            None => "no uncontended grant | ".to_string(),
        }
    );
}

/// The fair lock's rows: hand-overs, order, waits; redisson's beside them when it ran.
fn fair_rows(s: &mut String, f: &FamilyFigures) {
    let peer = f.peer_fair.as_ref().map(|(order, _)| order);
    let peer_cell = |value: Option<String>| value.unwrap_or_else(|| "not built |".to_string());
    let _ = writeln!(
        s,
        "| 4 clients × 2 tasks on one lock (fair lock vs mutex; peer: redisson): hand-overs/s | {:.0} | {:.0} | {:.2}× | {} |",
        f.fair.per_s,
        f.fair_mutex.per_s,
        ratio(f.fair.per_s, f.fair_mutex.per_s),
        peer_cell(peer.map(|p| format!("{:.0} | {:.2}×", p.per_s, ratio(f.fair.per_s, p.per_s))))
    );
    let _ = writeln!(
        s,
        "| same: grants in ask order (nobody who asked 1 ms earlier still waiting) | {:.1} % | {:.1} % | | {} |",
        100.0 * f.fair.in_order,
        100.0 * f.fair_mutex.in_order,
        peer_cell(peer.map(|p| format!("{:.1} % |", 100.0 * p.in_order)))
    );
    let _ = writeln!(
        s,
        "| same: wait p99 µs | {:.0} | {:.0} | | {} |",
        f.fair.wait_p99_us,
        f.fair_mutex.wait_p99_us,
        peer_cell(peer.map(|p| format!(
            "{:.0} | {:.2}×",
            p.wait_p99_us,
            ratio(f.fair.wait_p99_us, p.wait_p99_us)
        )))
    );
}

/// What the peers failed to do in their runs, or why they were not measured.
fn peer_notes(s: &mut String, f: &FamilyFigures) {
    match &f.peer_fair {
        Some((_, failed)) if *failed > 0 => {
            let _ = writeln!(
                s,
                "\nIn the fair-lock run, {failed} of redisson's `lock()` calls failed (its head of \
                 the queue gives up when the lock is still held) and were asked again; none of \
                 ours fails."
            );
        }
        None => {
            let _ = writeln!(
                s,
                "\nredisson's fair lock was not measured: its driver \
                 (`bench/peers/redisson-fair`) is built by `scripts/bench.sh`."
            );
        }
        Some(_) => {}
    }
    match f.peer_rw {
        Some((_, timeouts)) if timeouts > 0 => {
            let _ = writeln!(
                s,
                "\nIn the read-heavy run, {timeouts} of distributed-lock-redis' acquisitions gave \
                 up after waiting 2 s (not counted as operations); none of ours waits that long."
            );
        }
        None => {
            let _ = writeln!(
                s,
                "\nIn this run distributed-lock-redis' read/write lock did not grant even an \
                 uncontended read or write within 2 s, so its read-heavy figure is missing."
            );
        }
        Some(_) => {}
    }
}
