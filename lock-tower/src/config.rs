//! What a layer is configured with, shared by the layer and the services it makes: the lock
//! client, the name source, the lock options and the rejection response, and the options
//! [`LockLayer`](crate::LockLayer) and [`MultiLockLayer`](crate::MultiLockLayer) have in
//! common (each layer documents them and hands them on here).

use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{LockClient, LockOptions};

use crate::name::DEFAULT_MAX_NAME_VALUE_LEN;
use crate::rejection::{DEFAULT_RETRY_AFTER, DefaultRejection};

/// How long a request waits for a busy lock unless [`LockLayer::wait`](crate::LockLayer::wait)
/// says otherwise.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// What a layer and its services share: the settings of every layer, and `E`, those of its
/// kind of layer.
#[derive(Debug, Clone)]
pub(crate) struct Shared<N, E> {
    pub(crate) client: LockClient,
    pub(crate) names: N,
    pub(crate) options: LockOptions,
    pub(crate) hold_body: bool,
    pub(crate) max_value_len: usize,
    pub(crate) own: E,
}

/// A layer's configuration: the shared settings and the rejection response, each behind an
/// `Arc`, so that cloning the layer and wrapping services in it copies nothing; and the retry
/// hint of busy and limited rejections, which a custom rejection response keeps.
pub(crate) struct Config<N, E, R> {
    pub(crate) shared: Arc<Shared<N, E>>,
    pub(crate) rejection: Arc<R>,
    pub(crate) retry_hint: Duration,
}

impl<N, E> Config<N, E, DefaultRejection> {
    /// The default configuration: wait [`DEFAULT_WAIT`], release when the response head is
    /// ready, the default rejection.
    pub(crate) fn new(client: LockClient, names: N, own: E) -> Self {
        Config {
            shared: Arc::new(Shared {
                client,
                names,
                options: LockOptions::new().wait(DEFAULT_WAIT),
                hold_body: false,
                max_value_len: DEFAULT_MAX_NAME_VALUE_LEN,
                own,
            }),
            rejection: Arc::new(DefaultRejection::new()),
            retry_hint: DEFAULT_RETRY_AFTER,
        }
    }

    /// The longest wait busy and limited rejections suggest: the default rejection's
    /// `Retry-After`, and [`LockRejection::retry_after`](crate::LockRejection::retry_after)
    /// for a custom one set later.
    pub(crate) fn retry_after(self, hint: Duration) -> Self {
        let mut config = self.map_rejection(|r| r.retry_after(hint));
        config.retry_hint = hint;
        config
    }

    /// Changes the default rejection (its statuses, its `Retry-After` hint).
    pub(crate) fn map_rejection(
        mut self,
        f: impl FnOnce(DefaultRejection) -> DefaultRejection,
    ) -> Self {
        let r = Arc::make_mut(&mut self.rejection);
        *r = f(*r);
        self
    }
}

impl<N: Clone, E: Clone, R> Config<N, E, R> {
    /// Changes the shared settings (a copy of them, if services made earlier share them).
    pub(crate) fn map_shared(mut self, f: impl FnOnce(&mut Shared<N, E>)) -> Self {
        f(Arc::make_mut(&mut self.shared));
        self
    }

    pub(crate) fn wait(self, wait: Duration) -> Self {
        self.map_shared(|s| s.options.wait = Some(wait))
    }

    pub(crate) fn lease(self, lease: Duration) -> Self {
        self.map_shared(|s| s.options.lease = Some(lease))
    }

    pub(crate) fn max_hold(self, max_hold: Duration) -> Self {
        self.map_shared(|s| s.options.max_hold = Some(max_hold))
    }

    pub(crate) fn options(self, options: LockOptions) -> Self {
        self.map_shared(|s| s.options = options)
    }

    pub(crate) fn hold_until_body_end(self) -> Self {
        self.map_shared(|s| s.hold_body = true)
    }

    pub(crate) fn max_name_value_len(self, max: usize) -> Self {
        self.map_shared(|s| s.max_value_len = max)
    }
}

impl<N, E, R> Config<N, E, R> {
    /// The same settings with another rejection response.
    pub(crate) fn with_rejection_response<R2>(self, rejection: R2) -> Config<N, E, R2> {
        Config {
            shared: self.shared,
            rejection: Arc::new(rejection),
            retry_hint: self.retry_hint,
        }
    }
}

impl<N, E, R> Clone for Config<N, E, R> {
    fn clone(&self) -> Self {
        Config {
            shared: self.shared.clone(),
            rejection: self.rejection.clone(),
            retry_hint: self.retry_hint,
        }
    }
}
