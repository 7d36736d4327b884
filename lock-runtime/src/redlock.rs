//! `RedLock`: one lock over N independent Redis masters, held while a majority holds it.
//!
//! Built on the per-node machinery: one [`LockClient`] per master, each with its own watchdog,
//! pub/sub connection, background releaser and fencing counter. A round asks every node at
//! once for a single attempt ([`Lock::acquire_with`] with a zero wait), each bounded by the node
//! timeout; the round succeeds when a quorum granted it and validity is left. Otherwise every
//! partial hold is given back at once (dropping a guard or an in-flight attempt releases it in
//! the background) and the next round starts after a jittered delay.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::{Lock, LockClient, LockError, LockGuard, LockOptions, LossReason};

/// The default [`RedLock::node_timeout`].
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// The default [`RedLock::drift_factor`], as in the RedLock description.
const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
/// Added to `lease × drift_factor`: the RedLock description's 2 ms for the granularity of
/// Redis' expiry.
const DRIFT_FLOOR: Duration = Duration::from_millis(2);
/// The default [`RedLock::retry_delay`].
const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// A lock held on a majority of N independent Redis masters (the RedLock algorithm).
///
/// Each node is a [`LockClient`] on its own Redis master (not replicas of one another, not one
/// server reached twice: that is your deployment's job). The lock is held while at least a
/// *quorum* of `N / 2 + 1` nodes hold it, so it survives up to `N - quorum` nodes being down or
/// slow. Use an odd `N`: an even `N` tolerates no more failures than `N - 1` nodes do.
///
/// Acquisition works in rounds. A round sends one attempt to every node **at once**, each
/// bounded by the [node timeout](RedLock::node_timeout), and waits until every node has
/// answered (or timed out), or until a quorum has become impossible. It succeeds when at least
/// a quorum granted the lock **and** validity is left: `lease − elapsed − drift > 0`, where
/// `lease` is the explicit lease of the options or else the smallest watchdog timeout of the
/// clients, `elapsed` is how long the round took, and `drift = lease × drift_factor + 2 ms`.
/// A failed round gives back every node it took at once (in the background, nodes whose attempt
/// timed out included) and the next round starts after a jittered
/// [retry delay](RedLock::retry_delay), until the wait runs out.
///
/// Unlike [`Lock`], waiting is by polling, not by pub/sub: a release on one node says nothing
/// about the others. A `RedLock` is not reentrant: acquiring it again while holding it waits
/// for yourself (until the wait runs out).
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_runtime::LockError> {
/// use std::time::Duration;
/// use lock_runtime::{LockClient, LockError, RedLock};
///
/// let mut nodes = Vec::new();
/// for url in ["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"] {
///     nodes.push(LockClient::connect(url).await?);
/// }
/// let lock = RedLock::new(nodes, "report:daily")?.retry_delay(Duration::from_millis(50));
/// match lock.try_acquire(Duration::from_secs(2)).await {
///     Ok(guard) => {
///         // Renewed by each node's watchdog; dropped here if a majority lets go.
///         guard.run(async { /* … */ }).await?;
///         guard.release().await?;
///     }
///     Err(e) if e.is_busy() => println!("someone else has it"),
///     Err(e) => return Err(e), // e.g. `NoQuorum`: too many nodes are down
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedLock {
    /// One per node, in the order the clients were given.
    locks: Vec<Lock>,
    quorum: usize,
    /// The smallest watchdog timeout of the clients: the lease assumed without an explicit one.
    watchdog_lease: Duration,
    node_timeout: Duration,
    drift_factor: f64,
    retry_delay: Duration,
}

impl RedLock {
    /// A RedLock named `name` over one node per client.
    ///
    /// Errors: [`LockError::InvalidConfig`] for no clients or a client given twice (the same
    /// [`id`](LockClient::id), e.g. two clones of one client); [`LockError::InvalidName`] for a
    /// name [`Lock`] would reject. Any number of clients from one up is accepted; the quorum is
    /// `N / 2 + 1`.
    pub fn new(
        clients: impl IntoIterator<Item = LockClient>,
        name: impl AsRef<str>,
    ) -> Result<RedLock, LockError> {
        let clients: Vec<LockClient> = clients.into_iter().collect();
        if clients.is_empty() {
            return Err(LockError::InvalidConfig(
                "a RedLock needs at least one client".into(),
            ));
        }
        for (i, client) in clients.iter().enumerate() {
            if clients[..i].iter().any(|c| c.id() == client.id()) {
                return Err(LockError::InvalidConfig(format!(
                    "client {} is given twice to one RedLock; each node needs its own client",
                    client.id()
                )));
            }
        }
        let name = name.as_ref();
        let locks: Vec<Lock> = clients.iter().map(|c| c.lock(name)).collect();
        for lock in &locks {
            lock.validated()?;
        }
        let watchdog_lease = clients
            .iter()
            .map(LockClient::watchdog_timeout)
            .min()
            .unwrap_or(crate::DEFAULT_WATCHDOG_TIMEOUT);
        Ok(RedLock {
            quorum: locks.len() / 2 + 1,
            locks,
            watchdog_lease,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            drift_factor: DEFAULT_DRIFT_FACTOR,
            retry_delay: DEFAULT_RETRY_DELAY,
        })
    }

    /// The longest one node may take to answer one attempt (default 100 ms). A node that has not
    /// answered by then counts as failed for that round; a hold it may still take is released in
    /// the background.
    ///
    /// Why 100 ms: it is two orders of magnitude above a healthy round trip in one data centre
    /// (well under 1 ms; a few ms across zones), and leaves room for a first-use script load or
    /// a reconnect, which take two round trips; yet it costs only 1/300 of the default 30 s lease
    /// in validity, and it is how long a round waits for a node that hangs (all nodes are asked
    /// at once, so a round lasts at most this long). Lower it for short leases; raise it for
    /// nodes that are far away. Must be greater than zero.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// How much the clocks of the nodes and of this process may drift apart, as a fraction of
    /// the lease (default 0.01). The drift, `lease × drift_factor + 2 ms`, is taken off every
    /// validity. Must be at least 0 and below 0.5 (a larger drift would leave less than half the
    /// lease, and would outrun the watchdog, which renews every third of it).
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// The base delay between two rounds (default 100 ms). Each delay is drawn at random between
    /// half and one and a half times this, so that competing clients that split the nodes
    /// between them in one round do not collide again in the next one. At least 1 ms.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.locks.first().map_or("", Lock::name)
    }

    /// How many nodes (clients) the lock spans.
    pub fn nodes(&self) -> usize {
        self.locks.len()
    }

    /// How many nodes must hold the lock: `nodes() / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// Waits as long as it takes, then holds with the nodes' watchdogs.
    pub async fn acquire(&self) -> Result<RedLockGuard, LockError> {
        self.acquire_with(LockOptions::new()).await
    }

    /// Waits at most `wait`; `Duration::ZERO` makes exactly one round.
    pub async fn try_acquire(&self, wait: Duration) -> Result<RedLockGuard, LockError> {
        self.acquire_with(LockOptions::new().wait(wait)).await
    }

    /// Acquires with explicit options: `wait` bounds the whole acquisition (a round that has
    /// started is finished, so it may overrun by up to one node timeout); `lease` and
    /// `max_hold` apply to every node.
    ///
    /// Errors, from the last round:
    /// - [`LockError::WaitTimeout`]: contention; nodes answered that someone else holds it.
    ///   [`retry_after`](LockError::retry_after) is when enough of those holds run out.
    /// - [`LockError::NoQuorum`]: more than `nodes − quorum` nodes failed (down, too slow, or an
    ///   error), carrying the last node error; or a quorum granted it but the round took so
    ///   long that no validity was left.
    /// - [`LockError::InvalidConfig`]: a bad setting or option (for example a lease no longer
    ///   than the drift).
    ///
    /// Cancellation-safe: dropping the future leaves no hold on any node (holds already taken or
    /// possibly taken are released in the background).
    pub async fn acquire_with(&self, opts: LockOptions) -> Result<RedLockGuard, LockError> {
        opts.validate()?;
        self.validate()?;
        let lease = opts.lease.unwrap_or(self.watchdog_lease);
        let drift = self.drift(lease);
        if lease <= drift {
            return Err(LockError::InvalidConfig(format!(
                "a RedLock lease must be longer than the clock drift allowed for it ({drift:?}), got {lease:?}"
            )));
        }
        let span = tracing::debug_span!(
            "redlock.acquire",
            lock = %self.name(),
            nodes = self.locks.len(),
            quorum = self.quorum,
            wait = ?opts.wait,
        );
        tracing::Instrument::instrument(self.acquire_rounds(opts, lease, drift), span).await
    }

    async fn acquire_rounds(
        &self,
        opts: LockOptions,
        lease: Duration,
        drift: Duration,
    ) -> Result<RedLockGuard, LockError> {
        let start = Instant::now();
        // A wait too long to represent (`Duration::MAX`) is a wait without a deadline.
        let deadline = opts.wait.and_then(|w| start.checked_add(w));
        let node_opts = LockOptions {
            wait: Some(Duration::ZERO),
            ..opts
        };
        let mut rounds = 0u32;
        loop {
            rounds = rounds.saturating_add(1);
            let round = self.round(node_opts).await;
            let elapsed = round.finished.saturating_duration_since(round.started);
            let validity = lease.checked_sub(elapsed + drift).unwrap_or_default();
            let failure = Failure {
                granted: round.granted,
                failed: round.failed,
                busy_ttls: round.busy_ttls,
                last_error: round.last_error,
            };
            if failure.granted >= self.quorum && !validity.is_zero() {
                let guard = RedLockGuard {
                    name: self.name().to_owned(),
                    quorum: self.quorum,
                    nodes: self.locks.len(),
                    drift,
                    node_timeout: self.node_timeout,
                    guards: round.guards.into_iter().flatten().collect(),
                    lost: AtomicBool::new(false),
                };
                // A node lost between its grant and now counts against the quorum; then the
                // round failed after all, and dropping the guard gives back what it holds.
                if !guard.is_lost() {
                    tracing::debug!(
                        rounds,
                        held = guard.guards.len(),
                        ?validity,
                        "redlock acquired"
                    );
                    return Ok(guard);
                }
            } else {
                tracing::debug!(
                    rounds,
                    granted = failure.granted,
                    busy = failure.busy_ttls.len(),
                    failed = failure.failed,
                    ?elapsed,
                    "redlock round failed; releasing partial holds"
                );
                // Dropping the round's guards releases every partial hold in the background, on
                // every node at once.
                drop(round.guards);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(self.error(failure, start.elapsed()));
            }
            let wake = now + jittered(self.retry_delay);
            tokio::time::sleep_until(deadline.map_or(wake, |d| d.min(wake))).await;
        }
    }

    /// One round: an attempt on every node at once, each bounded by the node timeout.
    async fn round(&self, opts: LockOptions) -> Round {
        type Attempt<'a> = Pin<
            Box<
                dyn Future<
                        Output = Result<Result<LockGuard, LockError>, tokio::time::error::Elapsed>,
                    > + Send
                    + 'a,
            >,
        >;
        let nodes = self.locks.len();
        let started = Instant::now();
        let mut attempts: Vec<Option<Attempt<'_>>> = self
            .locks
            .iter()
            .map(|lock| {
                Some(Box::pin(tokio::time::timeout(
                    self.node_timeout,
                    lock.acquire_with(opts),
                )) as Attempt<'_>)
            })
            .collect();
        let mut round = Round {
            guards: (0..nodes).map(|_| None).collect(),
            granted: 0,
            failed: 0,
            busy_ttls: Vec::new(),
            last_error: None,
            started,
            finished: started,
        };
        std::future::poll_fn(|cx| {
            for (i, slot) in attempts.iter_mut().enumerate() {
                let Some(attempt) = slot else { continue };
                let Poll::Ready(outcome) = attempt.as_mut().poll(cx) else {
                    continue;
                };
                *slot = None;
                match outcome {
                    Ok(Ok(guard)) => {
                        round.granted += 1;
                        round.guards[i] = Some(guard);
                    }
                    Ok(Err(LockError::WaitTimeout { remaining_ttl, .. })) => {
                        round.failed += 1;
                        round.busy_ttls.push(remaining_ttl);
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(node = i, error = %e, "redlock node failed");
                        round.failed += 1;
                        round.last_error = Some(e);
                    }
                    Err(_) => {
                        tracing::debug!(node = i, timeout = ?self.node_timeout, "redlock node timed out");
                        round.failed += 1;
                        round.last_error = Some(LockError::ResponseTimeout {
                            op: "acquire",
                            timeout: self.node_timeout,
                        });
                    }
                }
            }
            let open = attempts.iter().filter(|a| a.is_some()).count();
            // Done when every node has answered, or as soon as a quorum is out of reach (the
            // nodes still open could not change the outcome).
            if open == 0 || round.failed > nodes - self.quorum {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        round.finished = Instant::now();
        // Attempts still open are dropped here: a hold they may take is released in the
        // background.
        drop(attempts);
        round
    }

    fn error(&self, failure: Failure, waited: Duration) -> LockError {
        let nodes = self.locks.len();
        let errors = failure.failed - failure.busy_ttls.len();
        if failure.granted >= self.quorum || errors > nodes - self.quorum {
            return LockError::NoQuorum {
                name: self.name().to_owned(),
                acquired: failure.granted,
                quorum: self.quorum,
                nodes,
                last_error: failure.last_error.map(Box::new),
            };
        }
        // Contention: with the busy nodes free the quorum would have been reached. It may be,
        // once `need` more of them let go.
        let need = self.quorum - failure.granted;
        let mut ttls: Vec<Duration> = failure.busy_ttls.into_iter().flatten().collect();
        ttls.sort_unstable();
        LockError::WaitTimeout {
            name: self.name().to_owned(),
            waited,
            remaining_ttl: need.checked_sub(1).and_then(|i| ttls.get(i).copied()),
        }
    }

    fn drift(&self, lease: Duration) -> Duration {
        lease.mul_f64(self.drift_factor) + DRIFT_FLOOR
    }

    fn validate(&self) -> Result<(), LockError> {
        if self.node_timeout.is_zero() || self.node_timeout > crate::options::MAX_LEASE {
            return Err(LockError::InvalidConfig(format!(
                "a RedLock node timeout must be greater than zero and at most {:?}, got {:?}",
                crate::options::MAX_LEASE,
                self.node_timeout
            )));
        }
        if !(0.0..0.5).contains(&self.drift_factor) {
            return Err(LockError::InvalidConfig(format!(
                "a RedLock drift factor must be at least 0 and below 0.5, got {}",
                self.drift_factor
            )));
        }
        if self.retry_delay < Duration::from_millis(1)
            || self.retry_delay > crate::options::MAX_LEASE
        {
            return Err(LockError::InvalidConfig(format!(
                "a RedLock retry delay must be at least 1 ms and at most {:?}, got {:?}",
                crate::options::MAX_LEASE,
                self.retry_delay
            )));
        }
        Ok(())
    }
}

impl fmt::Debug for RedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLock")
            .field("name", &self.name())
            .field("nodes", &self.locks.len())
            .field("quorum", &self.quorum)
            .field("node_timeout", &self.node_timeout)
            .field("drift_factor", &self.drift_factor)
            .field("retry_delay", &self.retry_delay)
            .finish()
    }
}

/// What one round got.
struct Round {
    /// By node index; `Some` where the node granted the lock.
    guards: Vec<Option<LockGuard>>,
    granted: usize,
    /// Nodes that answered "busy", failed or timed out.
    failed: usize,
    /// The holder's remaining lease on each node that answered "busy".
    busy_ttls: Vec<Option<Duration>>,
    last_error: Option<LockError>,
    started: Instant,
    finished: Instant,
}

/// A failed round, without its guards.
struct Failure {
    granted: usize,
    failed: usize,
    busy_ttls: Vec<Option<Duration>>,
    last_error: Option<LockError>,
}

/// `base` scaled by a random factor in [0.5, 1.5).
fn jittered(base: Duration) -> Duration {
    // A v4 UUID is 122 random bits from the OS; 52 of them make a uniform f64 in [0, 1).
    let bits = uuid::Uuid::new_v4().as_u128() as u64 & ((1 << 52) - 1);
    let unit = bits as f64 / (1u64 << 52) as f64;
    base.mul_f64(0.5 + unit)
}

/// Proof of holding a [`RedLock`] on at least a quorum of its nodes.
///
/// - [`valid_until`](RedLockGuard::valid_until): until when a quorum is confirmed to hold it.
///   With the watchdog (no explicit lease) each node's client renews its own node, and this
///   moves forward; with an explicit lease it runs out.
/// - [`lost`](RedLockGuard::lost): resolves with [`LossReason::QuorumLost`] once fewer than a
///   quorum of node locks are held, or the validity ran out. [`run`](RedLockGuard::run) races a
///   critical section against it.
/// - [`release`](RedLockGuard::release) releases every node at once and reports the outcome.
///   Dropping the guard releases every node in the background and never blocks.
///
/// # No fencing token
///
/// A `RedLock` has no fencing token, on purpose. Each node's [`LockGuard`] has one
/// ([`node_guards`](RedLockGuard::node_guards)), but the counters of different nodes are
/// independent, so their tokens are not comparable, and no function of them (maximum, sum, a
/// vector) increases across holders: the next holder may win a different majority, whose
/// counters never saw this acquisition. As Martin Kleppmann argued ("How to do distributed
/// locking", 2016), without such a token RedLock cannot stop a holder that was paused (GC, a
/// stalled runtime, a slow network) past its validity from writing after another holder took
/// over; RedLock's timing assumptions (bounded pauses, drift and delays) are what keeps it
/// safe. Where correctness depends on mutual exclusion, protect the storage with a token from a
/// single linearizable source (for example one [`Lock`] on one primary, and its
/// [`fencing_token`](LockGuard::fencing_token)) rather than from a RedLock.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct RedLockGuard {
    name: String,
    quorum: usize,
    nodes: usize,
    drift: Duration,
    /// How long `release` waits for the nodes beyond a quorum.
    node_timeout: Duration,
    /// The node locks taken, in the order of the clients.
    guards: Vec<LockGuard>,
    /// Set once the loss has been seen; a loss is final.
    lost: AtomicBool,
}

impl RedLockGuard {
    /// The lock name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many node locks must be held: the RedLock's quorum.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// How many node locks are still held (taken and not known to be lost).
    pub fn nodes_held(&self) -> usize {
        self.guards.iter().filter(|g| !g.is_lost()).count()
    }

    /// The guards of the node locks taken (at least a quorum of them), in the order the clients
    /// were given to [`RedLock::new`], skipping nodes that did not grant the lock. Some may have
    /// been lost since ([`LockGuard::is_lost`]).
    ///
    /// Their fencing tokens come from independent counters and are not comparable across nodes;
    /// see [the type docs](RedLockGuard#no-fencing-token).
    pub fn node_guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Until when a quorum is confirmed to hold the lock: the quorum-th latest
    /// [`LockGuard::valid_until`] of the nodes, minus the clock drift. `None` once the lock is
    /// lost.
    ///
    /// Local clocks only: this process's monotonic clock, measured from when each node's last
    /// confirmation was *sent*.
    pub fn valid_until(&self) -> Option<Instant> {
        if self.check_lost() {
            None
        } else {
            self.quorum_until()
        }
    }

    /// How much longer a quorum is confirmed to hold the lock
    /// ([`valid_until`](RedLockGuard::valid_until) minus now); zero once it is lost.
    pub fn remaining_validity(&self) -> Duration {
        self.valid_until().map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(Instant::now())
        })
    }

    /// Whether the lock is known to be lost: fewer than a quorum of node locks are held, or the
    /// validity ran out. Final once true.
    pub fn is_lost(&self) -> bool {
        self.check_lost()
    }

    /// Resolves with [`LockError::Lost`] ([`LossReason::QuorumLost`]) once the lock is lost;
    /// pending while it is held.
    ///
    /// With the watchdog it fires when a node's loss leaves fewer than a quorum (each node's
    /// watchdog declares its own loss before that node's lease could expire); with an explicit
    /// lease it fires when the quorum's validity ends. The node locks still held stay held (and
    /// renewed) until the guard is released or dropped.
    pub async fn lost(&self) -> LockError {
        loop {
            if self.check_lost() {
                return self.lost_error();
            }
            // Not lost, so a quorum is held and this is `Some`.
            let Some(until) = self.quorum_until() else {
                continue;
            };
            let any_node_lost = crate::guard::first_loss(
                self.guards
                    .iter()
                    .filter(|g| !g.is_lost())
                    .map(|g| Box::pin(g.lost()) as crate::guard::LossFuture<'_>),
            );
            // Wake on a node's loss, or when the validity as known now ends (renewals may have
            // moved it by then: look again).
            tokio::select! {
                _ = any_node_lost => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }

    /// Runs `fut`; if the lock is lost meanwhile, `fut` is dropped and [`LockError::Lost`]
    /// returned. (No reentrancy scope: a `RedLock` is not reentrant.)
    pub async fn run<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        if self.check_lost() {
            return Err(self.lost_error());
        }
        tokio::select! {
            biased;
            lost = self.lost() => Err(lost),
            out = fut => Ok(out),
        }
    }

    /// Releases every node at once and reports the outcome.
    ///
    /// - `Ok(())`: a quorum of nodes released it cleanly. The rest are given up to one node
    ///   timeout more, then left to finish in the background.
    /// - [`LockError::Lost`] ([`LossReason::QuorumLost`]): it had been lost before; whatever was
    ///   left of it is released.
    /// - Otherwise the error of a node that failed (for example a backend error: that node is
    ///   retried by its background releaser and otherwise left to expire), or
    ///   [`LockError::NotOwner`] when too many nodes no longer held it.
    pub async fn release(self) -> Result<(), LockError> {
        let lost_before = self.check_lost();
        let RedLockGuard {
            name,
            quorum,
            guards,
            node_timeout,
            ..
        } = self;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for guard in guards {
            let tx = tx.clone();
            // Spawned, so that a slow node finishes (or hands over to its background releaser)
            // even after we stop waiting for it.
            tokio::spawn(async move {
                let _ = tx.send(guard.release().await);
            });
        }
        drop(tx);
        let mut released = 0;
        let mut not_ours = 0;
        let mut failed: Option<LockError> = None;
        let mut give_up: Option<Instant> = None;
        loop {
            let next = match give_up {
                Some(at) => match tokio::time::timeout_at(at, rx.recv()).await {
                    Ok(next) => next,
                    Err(_) => break,
                },
                None => rx.recv().await,
            };
            let Some(result) = next else { break };
            match result {
                // Released on that node's master, only not acknowledged by its replicas.
                Ok(()) | Err(LockError::UnacknowledgedRelease { .. }) => released += 1,
                Err(LockError::NotOwner { .. } | LockError::Lost { .. }) => not_ours += 1,
                Err(e) => failed = Some(e),
            }
            if released >= quorum && give_up.is_none() {
                give_up = Some(Instant::now() + node_timeout);
            }
        }
        tracing::debug!(lock = %name, released, not_ours, failed = failed.is_some(), "redlock released");
        if lost_before {
            return Err(LockError::Lost {
                name,
                reason: LossReason::QuorumLost,
            });
        }
        if released >= quorum {
            return Ok(());
        }
        Err(failed.unwrap_or(LockError::NotOwner { name }))
    }

    /// The quorum-th latest node validity minus drift; `None` with fewer than a quorum held.
    fn quorum_until(&self) -> Option<Instant> {
        let mut untils: Vec<Instant> = self
            .guards
            .iter()
            .filter_map(LockGuard::confirmed_until)
            .collect();
        untils.sort_unstable_by(|a, b| b.cmp(a));
        let nth = untils.get(self.quorum.checked_sub(1)?)?;
        nth.checked_sub(self.drift)
    }

    /// Whether the lock is lost; records (and logs) the loss the first time it is seen.
    fn check_lost(&self) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return true;
        }
        let lost = self.quorum_until().is_none_or(|t| t <= Instant::now());
        if lost && !self.lost.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                lock = %self.name,
                held = self.nodes_held(),
                quorum = self.quorum,
                nodes = self.nodes,
                "redlock lost: fewer than a quorum of nodes hold it, or its validity ran out"
            );
        }
        lost
    }

    fn lost_error(&self) -> LockError {
        LockError::Lost {
            name: self.name.clone(),
            reason: LossReason::QuorumLost,
        }
    }
}

impl fmt::Debug for RedLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLockGuard")
            .field("name", &self.name)
            .field("quorum", &self.quorum)
            .field("nodes", &self.nodes)
            .field("nodes_held", &self.nodes_held())
            .field("lost", &self.lost.load(Ordering::Acquire))
            .finish()
    }
}
