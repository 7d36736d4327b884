//! The pub/sub demultiplexer: one subscription connection shared by every waiting task.
//!
//! Waiters register interest in a lock's unlock channel with [`Demux::subscribe`], which
//! returns a reference-counted [`Subscription`]. One task and one callback serve all of them:
//!
//! - the **subscriber** task turns changes of the registry into `SUBSCRIBE` / `UNSUBSCRIBE`
//!   commands, batched (one command with many channels, never a zero-argument unsubscribe) and
//!   ordered, and marks channels ready once Redis has confirmed them;
//! - the **router** callback ([`PushRouter`], called by the connection itself as each push arrives, so a
//!   wake-up costs no extra task hop) routes pushes. An unlock message says whom to wake
//!   ([`Wake`]): `0`/`1` (a mutex) wakes **one** local waiter of that channel (no thundering
//!   herd inside a process), `n` (a semaphore's freed permits) up to `n`, `*` (a free read/write
//!   lock) all of them, and an owner id (a fair lock's next turn) only that waiter, if it waits
//!   here. A lost connection marks every channel unconfirmed, wakes **every** waiter (messages
//!   sent during the gap are lost, so they must retry) and asks the subscriber to resubscribe
//!   everything.
//!
//! redis 1.8's automatic resubscription is deliberately not used (it corrupts replies after a
//! reconnect); the `ConnectionManager` still reconnects with backoff.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use redis::aio::{AsyncPushSender, SendError};
use redis::{PushInfo, PushKind, Value};
use tokio::sync::Notify;
use tokio::task::AbortHandle;
#[cfg(test)]
use tokio::time::Instant;
use tokio::time::Sleep;

use crate::backend::Channels;
use crate::metrics;
use crate::sync;

#[derive(Clone)]
pub(crate) struct Demux {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the subscriber when `dirty` gained channels.
    work: Notify,
    /// Wakes every waiter of [`Subscription::ready_by`] whenever channels became ready, so they
    /// re-check their channel. (A `Notify` rather than a `watch` channel: each waiter listening
    /// keeps its future in its task, and a `watch` receiver's is twice as large.)
    confirmed: Notify,
    /// Channels per `SUBSCRIBE` or `UNSUBSCRIBE` command: with the command's name, within the
    /// client's argument limit ([`LockClientBuilder::max_request_arguments`](crate::LockClientBuilder::max_request_arguments)).
    batch: usize,
    /// How long to let the connection repair itself after a loss before resubscribing (zero:
    /// at once). A Redis Cluster connection sends a request for a slot whose node it is still
    /// reconnecting to another node (a replica of the slot if it knows one, else any node),
    /// and a `MOVED` from there makes it refresh its slot map, which holds up every request
    /// until each node has answered, a hanging one too.
    settle: Duration,
}

#[derive(Default)]
struct State {
    /// Channels with at least one waiter.
    /// Keyed by a shared name: each waiter's subscription holds the same one.
    channels: HashMap<Arc<str>, Registered>,
    /// Channels whose wanted state may differ from the server's.
    ///
    /// This set and the next keep the registry's shared names (each a reference, not a copy
    /// of the name): a client waiting on a hundred thousand names keeps one copy of each.
    dirty: HashSet<Arc<str>>,
    /// Channels Redis confirmed on the current connection.
    subscribed: HashSet<Arc<str>>,
    /// Bumped on every lost connection; a confirmation from an older epoch is stale.
    epoch: u64,
}

impl Drop for State {
    fn drop(&mut self) {
        // The client is gone, and with it its subscriptions.
        metrics::subscribed_channels(-(self.subscribed.len() as f64));
    }
}

struct Registered {
    /// The channel's name, as keyed: handed to each of its subscriptions.
    name: Arc<str>,
    refs: usize,
    channel: Arc<Channel>,
    /// How its messages are read; given by its first subscriber (a channel's name says which
    /// lock family and layout it serves, so every subscriber gives the same).
    rule: WakeRule,
    /// Waiters woken by name (a fair lock's), by owner id.
    directed: HashMap<Arc<str>, Arc<Notify>>,
}

impl Registered {
    /// Wakes every waiter of the channel.
    fn wake_all(&self) {
        self.channel.notify.notify_waiters();
        for notify in self.directed.values() {
            notify.notify_one();
        }
    }

    /// Routes one unlock message.
    fn wake(&self, wake: Wake<'_>) {
        match wake {
            Wake::All => self.wake_all(),
            Wake::Some(n) => {
                // Each call wakes one registered waiter (or leaves one wake-up for the next to
                // register); never more calls than waiters.
                for _ in 0..n.clamp(1, self.refs) {
                    self.channel.notify.notify_one();
                }
                for notify in self.directed.values().take(n.max(1)) {
                    notify.notify_one();
                }
            }
            Wake::Owner(owner) => {
                if let Some(notify) = self.directed.get(owner) {
                    notify.notify_one();
                }
            }
        }
    }
}

/// How a channel's unlock messages are read, given at subscribe time by the family and layout
/// of the lock whose channel it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum WakeRule {
    /// As [`Wake::parse`] reads them: this crate's payloads, and Redisson's mutex's `0`.
    #[default]
    Counted,
    /// Redisson's `RReadWriteLock` (`redisson_rwlock:{N}`): `1` is a write unlock (or a force
    /// unlock), after which every waiting reader can go, so it wakes every waiter, as it wakes
    /// every waiting Java thread; `0` (a read unlock that freed the lock) wakes one, as in
    /// Redisson (a reader it wakes wakes the others once it is in: see `acquire/mod.rs`).
    WriteUnlockWakesAll,
}

/// Whom an unlock message wakes in each process, from its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake<'a> {
    /// Up to this many waiters (`0` and `1`: one).
    Some(usize),
    /// Every waiter of the channel.
    All,
    /// The waiter with this owner id, wherever it waits.
    Owner(&'a str),
}

impl<'a> Wake<'a> {
    fn parse(payload: &'a [u8], rule: WakeRule) -> Wake<'a> {
        if rule == WakeRule::WriteUnlockWakesAll && payload == b"1" {
            return Wake::All;
        }
        match std::str::from_utf8(payload) {
            Ok("*") => Wake::All,
            Ok(text) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
                Wake::Some(text.parse().unwrap_or(usize::MAX))
            }
            Ok(owner) if !owner.is_empty() => Wake::Owner(owner),
            _ => Wake::Some(1),
        }
    }
}

/// One channel's waiters.
pub(crate) struct Channel {
    notify: Notify,
    ready: AtomicBool,
    /// Unlock messages received so far.
    messages: AtomicU64,
}

/// A waiter's interest in one channel; unsubscribes when the last one drops.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    /// The registry's key, shared: a thousand waiters on one lock keep one copy of the name.
    name: Arc<str>,
    channel: Arc<Channel>,
    /// `Some` for a waiter woken by name: its owner id and its own wake-up.
    directed: Option<(Arc<str>, Arc<Notify>)>,
}

impl Demux {
    /// A demultiplexer whose (un)subscribe commands carry at most `max_arguments` arguments,
    /// and which resubscribes `settle` after a lost connection (zero: at once).
    pub(crate) fn new(max_arguments: usize, settle: Duration) -> Demux {
        Demux {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                work: Notify::new(),
                confirmed: Notify::new(),
                batch: max_arguments.saturating_sub(1).max(1),
                settle,
            }),
        }
    }

    /// The push sender to configure on the subscription connection.
    pub(crate) fn router(&self) -> PushRouter {
        PushRouter {
            shared: Arc::downgrade(&self.shared),
        }
    }

    /// Starts the subscriber on the connection that delivers pushes to [`Demux::router`].
    pub(crate) fn start(&self, conn: Box<dyn Channels>) -> AbortHandle {
        tokio::spawn(subscribe_loop(self.shared.clone(), conn)).abort_handle()
    }

    /// Registers interest in `name`. Cheap and synchronous; wait for the server's confirmation
    /// with [`Subscription::ready`].
    // The acquire loop says which rule with `subscribe_with`.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn subscribe(&self, name: &str) -> Subscription {
        self.subscribe_as(name, None, WakeRule::Counted)
    }

    /// [`Demux::subscribe`] to a channel whose messages are read by `rule`.
    pub(crate) fn subscribe_with(&self, name: &str, rule: WakeRule) -> Subscription {
        self.subscribe_as(name, None, rule)
    }

    /// Registers interest in `name` as a waiter that only a message naming `owner` (or one
    /// that wakes everybody) wakes: a fair lock's waiter, whose turn the message announces.
    pub(crate) fn subscribe_directed(&self, name: &str, owner: &Arc<str>) -> Subscription {
        self.subscribe_as(name, Some(owner), WakeRule::Counted)
    }

    fn subscribe_as(&self, name: &str, owner: Option<&Arc<str>>, rule: WakeRule) -> Subscription {
        let mut state = self.shared.lock();
        let directed = owner.map(|owner| (owner.clone(), Arc::new(Notify::new())));
        let (name, channel) = match state.channels.get_mut(name) {
            Some(reg) => {
                debug_assert_eq!(reg.rule, rule, "{name}: subscribed with two wake rules");
                reg.refs += 1;
                if let Some((owner, notify)) = &directed {
                    reg.directed.insert(owner.clone(), notify.clone());
                }
                (reg.name.clone(), reg.channel.clone())
            }
            None => {
                let channel = Arc::new(Channel {
                    notify: Notify::new(),
                    ready: AtomicBool::new(false),
                    messages: AtomicU64::new(0),
                });
                let name: Arc<str> = name.into();
                state.channels.insert(
                    name.clone(),
                    Registered {
                        name: name.clone(),
                        refs: 1,
                        channel: channel.clone(),
                        rule,
                        directed: directed.iter().cloned().collect(),
                    },
                );
                // Still subscribed from an earlier waiter whose UNSUBSCRIBE is pending: the
                // subscriber will simply not send it.
                if state.subscribed.contains(&*name) {
                    channel.ready.store(true, Ordering::Release);
                }
                state.dirty.insert(name.clone());
                self.shared.work.notify_one();
                (name, channel)
            }
        };
        Subscription {
            shared: self.shared.clone(),
            name,
            channel,
            directed,
        }
    }

    /// Whether any task of this client waits on `name` right now.
    pub(crate) fn has_waiters(&self, name: &str) -> bool {
        self.shared.lock().channels.contains_key(name)
    }

    /// Channels confirmed on the current connection.
    pub(crate) fn subscribed_len(&self) -> usize {
        self.shared.lock().subscribed.len()
    }

    /// The subscription connection was replaced (Sentinel failover): same as losing it.
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    pub(crate) fn connection_lost(&self) {
        self.shared.connection_lost();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent at every unlock point, so a panic elsewhere cannot
        // poison it into something unusable.
        sync::lock(&self.state)
    }

    /// Every subscription is gone: mark all channels unconfirmed, wake every waiter (messages
    /// sent during the gap are lost, so they must retry) and resubscribe everything.
    fn connection_lost(&self) {
        tracing::debug!("pub/sub connection lost; waking all waiters and resubscribing");
        let mut state = self.lock();
        state.epoch += 1;
        metrics::subscribed_channels(-(state.subscribed.len() as f64));
        state.subscribed.clear();
        let names: Vec<Arc<str>> = state.channels.keys().cloned().collect();
        for reg in state.channels.values() {
            reg.channel.ready.store(false, Ordering::Release);
            reg.wake_all();
        }
        state.dirty.extend(names);
        drop(state);
        self.work.notify_one();
    }

    /// The server dropped one shard channel (its slot moved to another node): resubscribe it
    /// if anyone still waits on it, and wake them, since an unlock may have been missed.
    fn channel_dropped(&self, name: &str) {
        let mut state = self.lock();
        if state.subscribed.remove(name) {
            metrics::subscribed_channels(-1.0);
        }
        let Some((name, reg)) = state.channels.get_key_value(name) else {
            return;
        };
        reg.channel.ready.store(false, Ordering::Release);
        reg.wake_all();
        let name = name.clone();
        state.dirty.insert(name);
        drop(state);
        self.work.notify_one();
    }
}

impl Subscription {
    /// Waits until Redis confirmed the subscription, or `until` passes. Returns whether it is
    /// confirmed.
    #[cfg(test)]
    pub(crate) async fn ready(&self, until: Instant) -> bool {
        let timer = tokio::time::sleep_until(until);
        tokio::pin!(timer);
        self.ready_by(timer).await
    }

    /// [`Subscription::ready`] with the caller's timer, set to when to give up: a waiter keeps
    /// one timer for this and for its retries, rather than a second one in its future.
    pub(crate) async fn ready_by(&self, mut timer: Pin<&mut Sleep>) -> bool {
        loop {
            // Listening before the look, so a confirmation between the two still wakes us.
            let confirmed = self.shared.confirmed.notified();
            tokio::pin!(confirmed);
            confirmed.as_mut().enable();
            if self.is_ready() {
                return true;
            }
            tokio::select! {
                _ = confirmed => {}
                _ = timer.as_mut() => return self.is_ready(),
            }
        }
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.channel.ready.load(Ordering::Acquire)
    }

    /// This waiter's wake-up: the channel's, shared by its waiters (an unlock message wakes
    /// as many as it says, a lost connection all), or its own for a waiter woken by name.
    pub(crate) fn notify(&self) -> &Notify {
        match &self.directed {
            Some((_, notify)) => notify,
            None => &self.channel.notify,
        }
    }

    /// How many unlock messages the channel has received so far.
    pub(crate) fn messages(&self) -> u64 {
        self.channel.messages.load(Ordering::Relaxed)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        let last = match state.channels.get_mut(&*self.name) {
            Some(reg) => {
                reg.refs -= 1;
                if let Some((owner, _)) = &self.directed {
                    reg.directed.remove(owner);
                }
                reg.refs == 0
            }
            None => false,
        };
        if last {
            state.channels.remove(&*self.name);
            state.dirty.insert(self.name.clone());
            drop(state);
            self.shared.work.notify_one();
        }
    }
}

/// Routes pushes as the subscription connection receives them. It runs inside the connection's
/// driver, so it only takes a short lock and wakes tasks; it never blocks.
pub(crate) struct PushRouter {
    shared: Weak<Shared>,
}

impl AsyncPushSender for PushRouter {
    fn send(&self, push: PushInfo) -> Result<(), SendError> {
        let shared = self.shared.upgrade().ok_or(SendError)?;
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                let Some(msg) = redis::Msg::from_push_info(push) else {
                    return Ok(());
                };
                let state = shared.lock();
                if let Some(reg) = state.channels.get(msg.get_channel_name()) {
                    let wake = Wake::parse(msg.get_payload_bytes(), reg.rule);
                    tracing::trace!(channel = msg.get_channel_name(), ?wake, "unlock message");
                    reg.channel.messages.fetch_add(1, Ordering::Relaxed);
                    reg.wake(wake);
                }
            }
            PushKind::Disconnection => shared.connection_lost(),
            // Sent by the server when a shard channel's slot migrates or its node fails over,
            // and as the confirmation of our own SUNSUBSCRIBE. The latter can arrive after a
            // waiter came back and the channel was subscribed again (redis forwards cluster
            // pushes through its own task): then it costs a spurious wake-up and resubscribe.
            PushKind::SUnsubscribe => {
                if let Some(Value::BulkString(name)) = push.data.first()
                    && let Ok(name) = std::str::from_utf8(name)
                {
                    shared.channel_dropped(name);
                }
            }
            // Subscribe/unsubscribe confirmations are copied here too; the subscriber learns
            // of them from its own commands.
            _ => {}
        }
        Ok(())
    }
}

/// Brings the server's subscriptions in line with the registry.
async fn subscribe_loop(shared: Arc<Shared>, mut conn: Box<dyn Channels>) {
    let mut backoff = Duration::from_millis(10);
    let mut seen_epoch = 0;
    loop {
        shared.work.notified().await;
        loop {
            let lost = shared.lock().epoch;
            if lost != seen_epoch {
                seen_epoch = lost;
                if !shared.settle.is_zero() {
                    tokio::time::sleep(shared.settle).await;
                }
            }
            let (epoch, subscribe, unsubscribe) = {
                let mut state = shared.lock();
                let mut subscribe = Vec::new();
                let mut unsubscribe = Vec::new();
                let dirty: Vec<Arc<str>> = state.dirty.drain().collect();
                for name in dirty {
                    let wanted = state.channels.contains_key(&name);
                    let actual = state.subscribed.contains(&name);
                    match (wanted, actual) {
                        (true, false) => subscribe.push(name.to_string()),
                        (false, true) => unsubscribe.push(name.to_string()),
                        _ => {}
                    }
                }
                (state.epoch, subscribe, unsubscribe)
            };
            if subscribe.is_empty() && unsubscribe.is_empty() {
                break;
            }
            let result = sync(&shared, &mut conn, epoch, subscribe, unsubscribe).await;
            match result {
                Ok(()) => backoff = Duration::from_millis(10),
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "pub/sub (un)subscribe failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
    }
}

async fn sync(
    shared: &Shared,
    conn: &mut Box<dyn Channels>,
    epoch: u64,
    subscribe: Vec<String>,
    unsubscribe: Vec<String>,
) -> redis::RedisResult<()> {
    // Each group of channels is settled as soon as Redis answers for it: failed ones are queued
    // again, the others take effect at once. On a cluster a group is one slot, so one hanging
    // node does not hold up the channels of the others.
    let mut first_error = None;
    for chunk in unsubscribe.chunks(shared.batch) {
        let mut done = |names: &[String], result: redis::RedisResult<()>| {
            let Some(mut state) = settled(shared, epoch, &mut first_error, names, result) else {
                return;
            };
            for name in names {
                if state.subscribed.remove(name.as_str()) {
                    metrics::subscribed_channels(-1.0);
                }
                // A waiter came back for this channel while we unsubscribed it: it is not
                // confirmed any more (it is already queued to be subscribed again).
                // Wake its waiters so they re-check after the resubscription.
                if let Some(reg) = state.channels.get(name.as_str()) {
                    reg.channel.ready.store(false, Ordering::Release);
                    reg.wake_all();
                }
            }
        };
        conn.unsubscribe(chunk, &mut done).await;
    }
    for chunk in subscribe.chunks(shared.batch) {
        let mut done = |names: &[String], result: redis::RedisResult<()>| {
            let Some(mut state) = settled(shared, epoch, &mut first_error, names, result) else {
                return;
            };
            for name in names {
                // The registry's name when a waiter still wants the channel (the common case),
                // else a copy.
                let (name, wanted) = match state.channels.get_key_value(name.as_str()) {
                    Some((name, reg)) => {
                        reg.channel.ready.store(true, Ordering::Release);
                        (name.clone(), true)
                    }
                    None => (Arc::from(name.as_str()), false),
                };
                if !wanted {
                    // The last waiter left while we subscribed: undo it on the next round.
                    state.dirty.insert(name.clone());
                }
                if state.subscribed.insert(name) {
                    metrics::subscribed_channels(1.0);
                }
            }
            drop(state);
            shared.confirmed.notify_waiters();
        };
        conn.subscribe(chunk, &mut done).await;
    }
    first_error.map_or(Ok(()), Err)
}

/// The common part of settling a group of channels: a failed group is queued again (and the
/// first error kept); a confirmation from before a lost connection is stale (the router already
/// queued everything again). Otherwise returns the state to apply the group to.
fn settled<'a>(
    shared: &'a Shared,
    epoch: u64,
    first_error: &mut Option<redis::RedisError>,
    names: &[String],
    result: redis::RedisResult<()>,
) -> Option<MutexGuard<'a, State>> {
    let mut state = shared.lock();
    if let Err(e) = result {
        first_error.get_or_insert(e);
        state
            .dirty
            .extend(names.iter().map(|name| Arc::from(name.as_str())));
        return None;
    }
    (state.epoch == epoch).then_some(state)
}

#[cfg(test)]
mod tests;
