//! [`MultiLockLayer`]: several locks per request, named by the request body, taken together
//! (all or nothing, in one global order) with [`MultiLock`](lock_runtime::MultiLock).
//!
//! - `layer.rs`: the layer and its options (those it shares with `LockLayer` are kept in the
//!   crate's `config.rs`);
//! - `service.rs`: the service, which checks `Content-Length` and starts reading the body;
//! - `future.rs`: reading the body (bounded) → computing the names → the shared
//!   [`ResponseFuture`](crate::future::ResponseFuture) (acquiring → calling);
//! - `buffer.rs`: the body handed on, [`BufferedBody`].

mod buffer;
mod future;
mod layer;
mod service;

pub use self::buffer::BufferedBody;
pub use self::future::MultiResponseFuture;
pub use self::layer::{DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_NAMES, MultiLockLayer};
pub use self::service::MultiLockService;

/// What a [`MultiLockService`] reads and takes for one request at most, besides the settings
/// of every layer. Set by the layer, read by the service and by the future (kept here so that
/// the future does not import the service, which imports the future).
#[derive(Debug, Clone)]
pub(crate) struct Bounds {
    pub(crate) max_body_bytes: usize,
    pub(crate) max_names: usize,
}
