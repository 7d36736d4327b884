//! Redis Sentinel: find the master through the sentinels and follow it when it fails over.
//!
//! The client keeps its two connections (commands, pub/sub) to the master the sentinels name,
//! and the master's run id (`INFO server`). When a request to it fails in a way a failover
//! explains (connection refused or dropped, timeout, `READONLY` from a demoted master,
//! `NOREPLICAS` from one with `min-replicas-to-write` cut off from its replicas), the
//! master becomes *unconfirmed*: no request is sent to it until the sentinels have been asked
//! again, at most every [`RECHECK`] (one question at a time; a request waits for the question
//! in progress, or asks itself, and fails with an I/O error, which callers retry, if the master
//! is still unconfirmed after it). The master is confirmed again when the sentinels
//! still name its address, no failover of it is under way (`o_down`, `failover_in_progress`)
//! and its run id is the one the client knew, or, if it restarted (redis' connection manager
//! reconnects to the same address by itself, and a master restarted without persistence is
//! empty), once the sentinels report the new run id too: a restarted master is then treated
//! like a new one. Without that check, a master killed and restarted before the sentinels
//! demoted it would be granted on until the next periodic question. The sentinels are asked
//! anyway every [`LockClientBuilder::sentinel_recheck`](crate::LockClientBuilder::sentinel_recheck)
//! (default 1 s, over one kept sentinel connection: `SENTINEL MASTER`, the full lookup only
//! when the address changed), which also notices a new run id or a failover under way that
//! caused no error here. A reply that arrives from the old master after a switch counts as an
//! unknown outcome. Once they name another master (or a restarted one is confirmed), both
//! connections are replaced and the demux is told the pub/sub connection was lost, which wakes
//! every waiter (an unlock published during the switch may be gone) and resubscribes every
//! channel on the new master. Requests that failed meanwhile are retried by their callers: acquisitions ride out the failover within
//! [`LockClientBuilder::failover_grace`](crate::LockClientBuilder::failover_grace), and so do
//! explicit releases; the watchdog retries renewals until the lease would run out, the
//! background releaser retries releases.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Cmd, Pipeline, RedisFuture, Value};
use tokio::time::Instant;

use super::{Conn, Settings};
use crate::LockError;
use crate::demux::Demux;
use crate::retry::failover_symptom;
use crate::sync;

/// The shortest interval between two questions to the sentinels.
const RECHECK: Duration = Duration::from_millis(200);

/// One of the two connections to the current master.
#[derive(Clone)]
pub(crate) struct FailoverConn {
    shared: Arc<Shared>,
    pubsub: bool,
    /// Requests go only to the master of this generation (`pin`): a request built for one
    /// master (its epoch in the fencing argument) fails unsent once the client has switched.
    pinned: Option<u64>,
}

struct Shared {
    /// Held while asking the sentinels: one question at a time.
    resolver: tokio::sync::Mutex<Resolver>,
    /// A lookup is queued or running: failed requests do not queue another.
    pending: AtomicBool,
    /// The master failed a request (or the sentinels' view changed) and has not been confirmed
    /// since: requests are not sent to it.
    suspect: AtomicBool,
    master_name: String,
    current: Mutex<Current>,
    settings: Settings,
    demux: Demux,
    /// Tells the watchdog to renew at once after a switch.
    renew_now: Arc<tokio::sync::Notify>,
}

struct Resolver {
    sentinel: SentinelClient,
    last_check: Option<Instant>,
    /// A kept connection to one sentinel, for the cheap periodic question.
    sentinel_conn: Option<redis::aio::MultiplexedConnection>,
}

struct Current {
    generation: u64,
    addr: String,
    /// The master's `run_id` when the connections were made (or its restart was confirmed);
    /// `None` if it could not be read.
    run_id: Option<String>,
    /// The master's failover epoch (`config-epoch`), from an answer of the sentinels that
    /// named this address and run id outside a failover; `None` until one did (also after a
    /// switch that no such answer confirmed: calls that issue a token wait for one,
    /// `Shared::epoch_confirmed`). A later look at the same master never lowers it
    /// (`take_epoch`).
    epoch: Option<u64>,
    /// The highest epoch confirmed for any master this client used: kept across switches (when
    /// `epoch` is unknown again), so no later answer naming an earlier epoch is taken
    /// (`take_epoch`) or followed (`follow`: a sentinel behind the others).
    highest_epoch: Option<u64>,
    commands: ConnectionManager,
    pubsub: ConnectionManager,
}

/// The redis-rs Sentinel client: which sentinels to ask, and how to reach the master they name
/// (credentials, TLS). The master's TLS is verified against the system's roots or the
/// builder's `tls_root_certificate`, which also verifies `rediss://` sentinels.
fn sentinel_client(
    sentinels: &[String],
    master: &str,
    (auth, tls): (Option<&(Option<String>, String)>, bool),
    settings: &Settings,
) -> Result<SentinelClient, LockError> {
    let bad =
        |e: redis::RedisError| LockError::InvalidConfig(format!("bad Sentinel settings: {e}"));
    #[cfg(feature = "tls")]
    if let Some(pem) = &settings.tls_root_certificate {
        return with_root_certificate(sentinels, master, (auth, tls), pem).map_err(bad);
    }
    #[cfg(not(feature = "tls"))]
    let _ = settings;
    let mut redis_info = redis::RedisConnectionInfo::default();
    if let Some((user, password)) = auth {
        if let Some(user) = user {
            redis_info = redis_info.set_username(user);
        }
        redis_info = redis_info.set_password(password);
    }
    let node_info = SentinelNodeConnectionInfo::default().set_redis_connection_info(redis_info);
    // Without the `tls` feature the builder cannot ask for TLS.
    #[cfg(feature = "tls")]
    let node_info = match tls {
        true => node_info.set_tls_mode(redis::TlsMode::Secure),
        false => node_info,
    };
    #[cfg(not(feature = "tls"))]
    let _ = tls;
    // `build` takes a `String` without TLS and `impl AsRef<str>` with it.
    #[allow(clippy::unnecessary_to_owned)]
    SentinelClient::build(
        sentinels.to_vec(),
        master.to_owned(),
        Some(node_info),
        SentinelServerType::Master,
    )
    .map_err(bad)
}

/// [`sentinel_client`] with a private CA: redis-rs takes the certificates only through its
/// builder, which takes the sentinels as addresses and one set of sentinel credentials.
#[cfg(feature = "tls")]
fn with_root_certificate(
    sentinels: &[String],
    master: &str,
    (auth, tls): (Option<&(Option<String>, String)>, bool),
    pem: &[u8],
) -> redis::RedisResult<SentinelClient> {
    use redis::sentinel::SentinelClientBuilder;
    use redis::{ConnectionAddr, IntoConnectionInfo, TlsCertificates, TlsMode};

    let infos = (sentinels.iter())
        .map(|url| url.as_str().into_connection_info())
        .collect::<redis::RedisResult<Vec<_>>>()?;
    let credentials = |info: &redis::ConnectionInfo| {
        let settings = info.redis_settings();
        (
            settings.username().map(str::to_owned),
            settings.password().map(str::to_owned),
        )
    };
    let (user, password) = credentials(&infos[0]);
    if infos
        .iter()
        .any(|info| credentials(info) != (user.clone(), password.clone()))
    {
        return Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "with a TLS root certificate every sentinel URL must carry the same credentials",
        )));
    }
    let certs = || TlsCertificates {
        client_tls: None,
        root_cert: Some(pem.to_vec()),
    };
    let addrs = infos.iter().map(|info| info.addr().clone());
    let mut builder = SentinelClientBuilder::new(addrs, master, SentinelServerType::Master)?;
    if let Some(user) = user {
        builder = builder.set_client_to_sentinel_username(user);
    }
    if let Some(password) = password {
        builder = builder.set_client_to_sentinel_password(password);
    }
    if (infos.iter()).any(|info| matches!(info.addr(), ConnectionAddr::TcpTls { .. })) {
        builder = builder.set_client_to_sentinel_certificates(certs());
    }
    if let Some((user, password)) = auth {
        if let Some(user) = user {
            builder = builder.set_client_to_redis_username(user);
        }
        builder = builder.set_client_to_redis_password(password);
    }
    if tls {
        builder = builder
            .set_client_to_redis_tls_mode(TlsMode::Secure)
            .set_client_to_redis_certificates(certs());
    }
    builder.build()
}

/// Asks the sentinels for the master and connects both connections to it.
pub(crate) async fn connect(
    sentinels: &[String],
    master: &str,
    (auth, tls): (Option<&(Option<String>, String)>, bool),
    settings: &Settings,
    demux: &Demux,
    renew_now: Arc<tokio::sync::Notify>,
) -> Result<(Conn, Conn), LockError> {
    if sentinels.is_empty() {
        return Err(LockError::InvalidConfig(
            "Sentinel needs at least one sentinel URL".into(),
        ));
    }
    if master.is_empty() {
        return Err(LockError::InvalidConfig(
            "Sentinel needs the master's name".into(),
        ));
    }
    let mut sentinel = sentinel_client(sentinels, master, (auth, tls), settings)?;

    let client = settings
        .within_connect_timeout(sentinel.async_get_client())
        .await?;
    let info = client.get_connection_info().clone();
    let addr = info.addr().to_string();
    let (mut commands, pubsub) = settings.managers(info, demux).await?;
    let run_id = run_id(&mut commands, settings).await;
    tracing::debug!(master = %addr, "Sentinel named the master");
    let shared = Arc::new(Shared {
        resolver: tokio::sync::Mutex::new(Resolver {
            sentinel,
            last_check: Some(Instant::now()),
            sentinel_conn: None,
        }),
        pending: AtomicBool::new(false),
        suspect: AtomicBool::new(false),
        master_name: master.to_owned(),
        current: Mutex::new(Current {
            generation: 0,
            addr,
            run_id,
            epoch: None,
            highest_epoch: None,
            commands,
            pubsub,
        }),
        settings: settings.clone(),
        demux: demux.clone(),
        renew_now,
    });
    shared.first_look().await;
    tokio::spawn(scan(Arc::downgrade(&shared), settings.sentinel_recheck));
    Ok((
        Conn::Sentinel(FailoverConn {
            shared: shared.clone(),
            pubsub: false,
            pinned: None,
        }),
        Conn::Sentinel(FailoverConn {
            shared,
            pubsub: true,
            pinned: None,
        }),
    ))
}

impl FailoverConn {
    /// The master of the moment, once confirmed (as a request waits for it): its generation,
    /// to pin requests to, and its failover epoch if the sentinels confirmed it (see
    /// `Conn::pin`). With `epoch`, for a call that issues a token: the epoch too, waited for
    /// (see `Shared::epoch_confirmed`).
    pub(crate) async fn pin(&self, epoch: bool) -> redis::RedisResult<(u64, Option<u64>)> {
        self.confirmed().await?;
        if epoch {
            let (generation, epoch) = self.shared.clone().epoch_confirmed().await?;
            return Ok((generation, Some(epoch)));
        }
        let current = self.shared.lock();
        Ok((current.generation, current.epoch))
    }

    /// The generation of the master of the moment.
    pub(crate) fn generation(&self) -> u64 {
        self.shared.lock().generation
    }

    /// This connection, sending only to the master of `generation` (see `pinned`).
    pub(crate) fn pinned(&self, generation: u64) -> FailoverConn {
        FailoverConn {
            pinned: Some(generation),
            ..self.clone()
        }
    }

    /// Whether a request picked for the master of `generation` may go: not if it was pinned
    /// to another (the client switched since it was built).
    fn unsent_if_moved(&self, generation: u64) -> redis::RedisResult<()> {
        match self.pinned {
            Some(pinned) if pinned != generation => Err(super::moved_before_sent()),
            _ => Ok(()),
        }
    }

    /// The connection to the master of the moment, confirmed or not.
    pub(crate) fn current(&self) -> ConnectionManager {
        self.pick().1
    }

    fn pick(&self) -> (u64, ConnectionManager) {
        let current = self.shared.lock();
        let conn = if self.pubsub {
            current.pubsub.clone()
        } else {
            current.commands.clone()
        };
        (current.generation, conn)
    }

    /// After a failed request: if a failover explains it, the master is unconfirmed until the
    /// sentinels have been asked again (in the background).
    fn check<T>(&self, generation: u64, result: &redis::RedisResult<T>) {
        if let Err(e) = result
            && failover_symptom(e)
        {
            if self.shared.lock().generation == generation {
                self.shared.suspect.store(true, Ordering::Release);
            }
            if !self.shared.pending.swap(true, Ordering::AcqRel) {
                tokio::spawn(self.shared.clone().rediscover(Some(generation)));
            }
        }
    }

    /// Before a request: an unconfirmed master is confirmed (or replaced) first; while it is
    /// not, the request fails at once with an I/O error (a failover symptom, which callers
    /// retry) instead of reaching a master that may have restarted empty or be deposed.
    async fn confirmed(&self) -> redis::RedisResult<()> {
        if !self.shared.suspect.load(Ordering::Acquire) {
            return Ok(());
        }
        // Boxed: inline, the lookup's future (near 7 KB) would be part of every request's
        // future, and through `Conn::pin` of every acquire's and release's in flight, on every
        // client built with the feature (one server's too), whether the master is suspect or not.
        Box::pin(self.shared.clone().rediscover(None)).await;
        if !self.shared.suspect.load(Ordering::Acquire) {
            return Ok(());
        }
        Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "the master is not confirmed by the sentinels yet",
        )))
    }

    /// A reply from a master we switched away from while the request was in flight does not
    /// count (a grant there may not exist on the new master): report an unknown outcome, which
    /// callers reconcile on the new master with the same owner id.
    fn settled<T>(&self, generation: u64, result: redis::RedisResult<T>) -> redis::RedisResult<T> {
        if self.shared.lock().generation == generation {
            return result;
        }
        Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "the master changed while the request was in flight",
        )))
    }

    pub(crate) async fn subscribe(
        &self,
        channels: &[String],
        subscribe: bool,
    ) -> redis::RedisResult<()> {
        self.confirmed().await?;
        let (generation, mut conn) = self.pick();
        let result = if subscribe {
            conn.subscribe(channels).await
        } else {
            conn.unsubscribe(channels).await
        };
        self.check(generation, &result);
        result
    }
}

impl ConnectionLike for FailoverConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            self.confirmed().await?;
            let (generation, mut conn) = self.pick();
            self.unsent_if_moved(generation)?;
            let result = conn.req_packed_command(cmd).await;
            self.check(generation, &result);
            self.settled(generation, result)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            self.confirmed().await?;
            let (generation, mut conn) = self.pick();
            self.unsent_if_moved(generation)?;
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            self.check(generation, &result);
            self.settled(generation, result)
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        sync::lock(&self.current)
    }

    /// Asks the sentinels about the master; confirms it, or switches both connections when it
    /// moved (or restarted, once the sentinels know its new run id). `seen`: the generation a
    /// failed request used (nothing to do if we switched since, or if it is not unconfirmed);
    /// `None` for the periodic check and for a request waiting on an unconfirmed master. The
    /// first question is `SENTINEL MASTER` on one kept sentinel connection; the full lookup
    /// (which connects to the master to check its role) runs only if the address moved.
    async fn rediscover(self: Arc<Self>, seen: Option<u64>) {
        let mut resolver = self.resolver.lock().await;
        self.pending.store(false, Ordering::Release);
        let suspect = self.suspect.load(Ordering::Acquire);
        if seen.is_some_and(|g| self.lock().generation != g || !suspect)
            || resolver.last_check.is_some_and(|t| t.elapsed() < RECHECK)
        {
            return;
        }
        let view = self.sentinel_view(&mut resolver).await;
        resolver.last_check = Some(Instant::now());
        let Some(view) = view else {
            // No sentinel answered: an unconfirmed master stays unconfirmed; a confirmed one
            // is kept (the sentinels may be the ones cut off).
            tracing::trace!(suspect, "no answer from the kept sentinel");
            return;
        };
        tracing::trace!(
            named = %view.addr,
            run_id = %view.run_id,
            epoch = ?view.epoch,
            failing_over = view.failing_over,
            suspect,
            "the kept sentinel's view"
        );
        let (addr, known_run_id) = {
            let current = self.lock();
            (current.addr.clone(), current.run_id.clone())
        };
        if view.addr != addr {
            self.suspect.store(true, Ordering::Release);
            self.follow(&mut resolver, &view).await;
            return;
        }
        if view.failing_over {
            // The sentinels agree it is down, or are replacing it: do not use it meanwhile.
            self.suspect.store(true, Ordering::Release);
            return;
        }
        if !suspect && (view.run_id.is_empty() || Some(&view.run_id) == known_run_id.as_ref()) {
            self.lock().take_epoch(&view);
            return;
        }
        // Unconfirmed, or the sentinels report another run id: ask the master itself.
        let (generation, mut commands) = {
            let current = self.lock();
            (current.generation, current.commands.clone())
        };
        let Some(now) = run_id(&mut commands, &self.settings).await else {
            tracing::trace!(master = %addr, "the master did not answer INFO");
            self.suspect.store(true, Ordering::Release);
            return;
        };
        if known_run_id.as_ref() == Some(&now) {
            if view.run_id.is_empty() || view.run_id == now {
                self.lock().take_epoch(&view);
            }
            tracing::trace!(master = %addr, "the master confirmed by its run id");
            self.suspect.store(false, Ordering::Release);
            return;
        }
        if view.run_id != now {
            // Restarted (perhaps empty), and the sentinels have not seen it yet: it may be
            // demoted any moment, so nothing is granted on it meanwhile.
            self.suspect.store(true, Ordering::Release);
            tracing::debug!(master = %addr, "the master restarted; waiting for the sentinels to see it");
            return;
        }
        {
            let mut current = self.lock();
            if current.generation != generation {
                return;
            }
            current.generation += 1;
            current.run_id = Some(now);
            current.take_epoch(&view);
        }
        self.suspect.store(false, Ordering::Release);
        tracing::warn!(master = %addr, "the master restarted (new run id, confirmed by the sentinels); grants made before are checked at once");
        self.switched();
    }

    /// The master of the moment and its failover epoch, for a call that issues a token. After
    /// a switch that no sentinel's answer confirmed yet, the epoch is unknown: a token issued
    /// then would be ordered by the clock alone, below every token of an epoch, so a new
    /// master whose counter lagged (asynchronous replication) would issue one below a token
    /// its deposed predecessor issued last. So the call waits: the sentinels are asked (at most
    /// every [`RECHECK`]) until one names this master, in the run it has now, outside a
    /// failover, for up to the response timeout; then it fails unsent with an I/O error (a
    /// failover symptom, which callers ride out within the failover grace).
    async fn epoch_confirmed(self: Arc<Self>) -> redis::RedisResult<(u64, u64)> {
        let deadline = Instant::now() + self.settings.response_timeout;
        loop {
            {
                let current = self.lock();
                if let (Some(epoch), false) = (current.epoch, self.suspect.load(Ordering::Acquire))
                {
                    return Ok((current.generation, epoch));
                }
            }
            if Instant::now() >= deadline {
                return Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    "the master's failover epoch is not confirmed by the sentinels yet",
                )));
            }
            let next_look = {
                let resolver = self.resolver.lock().await;
                resolver.last_check.map(|t| t + RECHECK)
            };
            if let Some(at) = next_look.filter(|&at| at > Instant::now()) {
                tokio::time::sleep_until(at.min(deadline)).await;
            }
            // Boxed, as in `confirmed`.
            Box::pin(self.clone().rediscover(None)).await;
        }
    }

    /// A new client's first look at the sentinels, before its first request. It has not seen
    /// the master's earlier runs, so the sentinels' view is the reference: a master they last
    /// saw under another run id restarted (perhaps empty, within `down-after-milliseconds`)
    /// after their last look, and may be demoted any moment. It stays unconfirmed, so nothing
    /// is granted on it, until the sentinels report the run id it has now (`rediscover`). No
    /// sentinel answering: as before, the master the lookup named is used.
    async fn first_look(&self) {
        let mut resolver = self.resolver.lock().await;
        let Some(view) = self.sentinel_view(&mut resolver).await else {
            return;
        };
        let mut current = self.lock();
        if view.addr == current.addr
            && (view.run_id.is_empty() || current.run_id.as_ref() == Some(&view.run_id))
        {
            current.take_epoch(&view);
            return;
        }
        current.run_id = None;
        self.suspect.store(true, Ordering::Release);
        resolver.last_check = None;
        tracing::debug!(master = %current.addr, "the master's run id is not the one the sentinels saw; waiting for them to see it");
    }

    /// The full lookup through the sentinels (which checks the named server's role); switches
    /// both connections to the master it finds if that is another address. Its epoch comes
    /// from `view` when that answer names the same address, in the run it has now, with no
    /// failover under way; else it stays unknown (calls carry none) until a later look
    /// confirms it (`Current::take_epoch`). A view naming it under an earlier epoch than the
    /// master's of the moment is a sentinel behind the others: not followed.
    async fn follow(&self, resolver: &mut Resolver, view: &SentinelView) {
        let lookup = self
            .settings
            .within_connect_timeout(resolver.sentinel.async_get_client())
            .await;
        resolver.last_check = Some(Instant::now());
        let client = match lookup {
            Ok(client) => client,
            Err(e) => {
                tracing::debug!(error = %e, "no master from the sentinels yet");
                return;
            }
        };
        let info = client.get_connection_info().clone();
        let addr = info.addr().to_string();
        if addr == self.lock().addr {
            return;
        }
        let named = addr == view.addr && !view.failing_over;
        if named
            && let (Some(seen), Some(epoch)) = (self.lock().highest_epoch, view.epoch)
            && epoch < seen
        {
            tracing::debug!(master = %addr, epoch, seen, "a sentinel names a master of an earlier epoch; not followed");
            return;
        }
        let (mut commands, pubsub) = match self.settings.managers(info, &self.demux).await {
            Ok(conns) => conns,
            Err(e) => {
                tracing::warn!(master = %addr, error = %e, "cannot connect to the new master yet");
                return;
            }
        };
        let run_id = run_id(&mut commands, &self.settings).await;
        // The view's epoch is this master's if the view named it, in the run it has now.
        let known = named && (view.run_id.is_empty() || run_id.as_ref() == Some(&view.run_id));
        let old = {
            let mut current = self.lock();
            current.generation += 1;
            current.commands = commands;
            current.pubsub = pubsub;
            current.run_id = run_id;
            let old = std::mem::replace(&mut current.addr, addr.clone());
            current.epoch = None;
            if known {
                current.take_epoch(view);
            }
            old
        };
        self.suspect.store(false, Ordering::Release);
        tracing::warn!(old = %old, new = %addr, "Sentinel failed over to a new master; switched connections");
        self.switched();
    }

    /// After a switch to another master (or a restarted one): wakes every waiter (they may have
    /// missed an unlock during the switch, and the channels must be subscribed again) and has
    /// the watchdog renew at once (grants the old master took with it show up as "gone").
    fn switched(&self) {
        self.demux.connection_lost();
        self.renew_now.notify_one();
    }

    /// `SENTINEL MASTER` on the kept sentinel connection (made on first use, dropped on
    /// error): the address the sentinel names, the run id it last saw there, and whether a
    /// failover of it is under way.
    async fn sentinel_view(&self, resolver: &mut Resolver) -> Option<SentinelView> {
        if resolver.sentinel_conn.is_none() {
            let client = self
                .settings
                .within_connect_timeout(resolver.sentinel.async_get_sentinel_client())
                .await
                .ok()?;
            resolver.sentinel_conn = self
                .settings
                .within_connect_timeout(client.get_multiplexed_async_connection())
                .await
                .ok();
        }
        let conn = resolver.sentinel_conn.as_mut()?;
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("MASTER").arg(&self.master_name);
        let question = cmd.query_async::<HashMap<String, String>>(conn);
        match tokio::time::timeout(self.settings.response_timeout, question).await {
            Ok(Ok(fields)) => SentinelView::read(&fields),
            Ok(Err(e)) if e.code().is_some() => {
                // Refused (an ACL without `sentinel|master`, …): the master is still found
                // through the lookup, but its epoch stays unknown, and tokens wait for it.
                tracing::warn!(error = %e, "a sentinel refused SENTINEL MASTER; fencing tokens wait for an answer naming the master's epoch");
                None
            }
            _ => {
                resolver.sentinel_conn = None;
                None
            }
        }
    }
}

impl Current {
    /// The epoch `view` gives the master of the moment (which it names, under the run id it
    /// has): taken unless it is earlier than the one known (a sentinel behind the others).
    fn take_epoch(&mut self, view: &SentinelView) {
        // During a failover its leader reports the new epoch before the new address.
        // `highest_epoch` is never below `epoch`: one comparison covers both.
        if view.addr == self.addr && !view.failing_over && view.epoch >= self.highest_epoch {
            self.epoch = view.epoch;
            self.highest_epoch = view.epoch;
        }
    }
}

/// What one sentinel says of the master (`SENTINEL MASTER <name>`).
#[derive(Debug, PartialEq, Eq)]
struct SentinelView {
    /// `host:port`.
    addr: String,
    /// The run id the sentinel last read from it (empty before its first `INFO`).
    run_id: String,
    /// Its failover epoch (`config-epoch`: 0 until its first failover; grows with each).
    epoch: Option<u64>,
    /// The sentinels agree it is down (`o_down`) or are replacing it (`failover_in_progress`).
    failing_over: bool,
}

impl SentinelView {
    fn read(fields: &HashMap<String, String>) -> Option<SentinelView> {
        let flags = fields.get("flags")?;
        Some(SentinelView {
            addr: format!("{}:{}", fields.get("ip")?, fields.get("port")?),
            run_id: fields.get("runid").cloned().unwrap_or_default(),
            epoch: fields.get("config-epoch").and_then(|e| e.parse().ok()),
            failing_over: flags
                .split(',')
                .any(|f| f == "o_down" || f == "failover_in_progress"),
        })
    }
}

/// The `run_id` of the server behind `conn` (`INFO server`), within the response timeout.
async fn run_id(conn: &mut ConnectionManager, settings: &Settings) -> Option<String> {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("server");
    let info = tokio::time::timeout(settings.response_timeout, cmd.query_async::<String>(conn))
        .await
        .ok()?
        .ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
}

/// Asks the sentinels every `interval` until the client is gone.
async fn scan(shared: std::sync::Weak<Shared>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared.rediscover(None).await;
    }
}
