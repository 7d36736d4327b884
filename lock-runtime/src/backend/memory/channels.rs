//! A client's subscription connection to the memory backend: unlock messages go to every
//! client; subscriptions are recorded for `PUBSUB NUMSUB`'s part.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use redis::aio::AsyncPushSender;
use tokio::sync::Notify;

use super::{MemoryBackend, MemoryChannels, Subscriber, ready};
use crate::backend::{BoxFuture, Channels, GroupDone};
use crate::sync;

impl MemoryBackend {
    /// Connects a client: its unlock messages go to `router` (its demultiplexer's), `renew_now`
    /// makes its watchdog renew at once. Returns its subscription connection.
    pub(crate) fn connect(
        &self,
        router: impl AsyncPushSender + 'static,
        renew_now: &Arc<Notify>,
    ) -> MemoryChannels {
        sync::lock(&self.shared.subscribers).push(Subscriber {
            router: Box::new(router),
            renew_now: Arc::downgrade(renew_now),
        });
        MemoryChannels {
            shared: self.shared.clone(),
            id: self.shared.next_connection.fetch_add(1, Ordering::Relaxed),
            subscribed: HashSet::new(),
        }
    }
}

impl MemoryChannels {
    fn change(&mut self, channels: &[String], subscribe: bool) {
        let mut state = sync::lock(&self.shared.state);
        for channel in channels {
            if subscribe {
                self.subscribed.insert(channel.clone());
                state
                    .subscriptions
                    .entry(channel.clone())
                    .or_default()
                    .insert(self.id);
            } else {
                self.subscribed.remove(channel);
                if let Some(set) = state.subscriptions.get_mut(channel) {
                    set.remove(&self.id);
                    if set.is_empty() {
                        state.subscriptions.remove(channel);
                    }
                }
            }
        }
    }
}

/// Subscriptions that are confirmed at once. Messages go to every client's router whether or
/// not it listens (the demultiplexer only routes those of channels with waiters); the
/// subscriptions are recorded for `PUBSUB NUMSUB`'s part (waiters in `info`, and whether
/// another process waits when a client would hand a lock on locally).
impl Channels for MemoryChannels {
    fn subscribe<'a>(
        &'a mut self,
        channels: &'a [String],
        done: GroupDone<'a>,
    ) -> BoxFuture<'a, ()> {
        self.change(channels, true);
        done(channels, Ok(()));
        ready(())
    }

    fn unsubscribe<'a>(
        &'a mut self,
        channels: &'a [String],
        done: GroupDone<'a>,
    ) -> BoxFuture<'a, ()> {
        self.change(channels, false);
        done(channels, Ok(()));
        ready(())
    }
}

/// A client that is gone is subscribed to nothing.
impl Drop for MemoryChannels {
    fn drop(&mut self) {
        let channels: Vec<String> = self.subscribed.drain().collect();
        self.change(&channels, false);
    }
}
