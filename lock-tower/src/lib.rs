//! [tower] middleware that serves each request while holding a distributed lock or permit
//! named after the request, with [`lock_runtime`]:
//!
//! | layer | requests per name at a time, across every instance | when busy |
//! |---|---|---|
//! | [`LockLayer`] | one (a mutex) | 423 Locked / `ABORTED` |
//! | [`LockLayer`]`::read_write()` | any number of reads (`GET`, `HEAD`, …), or one write | 423 Locked / `ABORTED` |
//! | [`KeyedConcurrencyLimitLayer`] | at most *N* (a semaphore): tower's `ConcurrencyLimitLayer`, per key and distributed | 429 Too Many Requests / `RESOURCE_EXHAUSTED` |
//! | [`MultiLockLayer`] | one, for each of several names read from the request body (a cart's products), all taken together | 423 Locked / `ABORTED` |
//!
//! Requests for the same lock name (the same product, account, document, tenant) are served
//! one at a time (or as the table says) across every instance of a service; requests for
//! different names run in parallel. The lock (or permit) is taken before the inner service is
//! called, renewed by the watchdog while it runs, and released when the response is ready (or,
//! opt-in, when its body has ended), when the inner service fails, or when the client goes
//! away (the response future is dropped).
//!
//! # axum
//!
//! ```no_run
//! # #[cfg(feature = "axum")] {
//! use std::time::Duration;
//! use axum::{Extension, Router, extract::Path, routing::post};
//! use lock_tower::{HeldLock, LockClient, LockLayer};
//!
//! async fn reserve(Path(id): Path<String>, Extension(lock): Extension<HeldLock>) -> String {
//!     // Only one request per `id` runs here at a time, across all instances.
//!     format!("reserved {id} under {}", lock.name())
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let locks = LockClient::connect("redis://127.0.0.1:6379").await?;
//! let app = Router::new()
//!     .route("/stock/{id}/reserve", post(reserve))
//!     // `route_layer`: unknown paths stay 404 instead of being locked.
//!     .route_layer(LockLayer::new(locks.clone(), "stock:<id>").wait(Duration::from_secs(5)));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! # }
//! ```
//!
//! `"stock:<id>"` fills `<id>` from the matched route's path parameter `{id}` (feature `axum`,
//! on by default). A route without that parameter passes through unlocked (logged at debug
//! level), or with [`require_name`](LockLayer::require_name) is rejected with 400.
//!
//! # tonic
//!
//! gRPC metadata are HTTP/2 headers, so take the lock name from them with [`name::Headers`]:
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_tower::{LockClient, LockLayer, name::Headers};
//! use tonic::{service::Routes, transport::Server};
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let locks = LockClient::connect("redis://127.0.0.1:6379").await?;
//! let layer = LockLayer::new(locks, Headers::new("stock:<x-product-id>"))
//!     .wait(Duration::from_secs(2));
//! # let routes = Routes::default();
//! Server::builder()
//!     .layer(layer)
//!     .add_routes(routes) // or `.add_service(InventoryServer::new(…))`
//!     .serve("127.0.0.1:50051".parse()?)
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! Calls without the metadata pass through unlocked, or with
//! [`require_name`](LockLayer::require_name) get `INVALID_ARGUMENT`. A rejected call gets a proper gRPC status
//! (`ABORTED` when busy, `RESOURCE_EXHAUSTED` when a [`KeyedConcurrencyLimitLayer`] has no
//! permit free, `UNAVAILABLE` when Redis is down, `INVALID_ARGUMENT` for a bad value), never an
//! HTTP error page.
//!
//! # Read/write mode
//!
//! [`LockLayer::read_write`] serves reads of one name side by side and writes alone, with a
//! read/write lock ([`RwLock`](lock_runtime::RwLock)): safe methods (`GET`, `HEAD`, `OPTIONS`,
//! `TRACE`) take the read side, every other method the write side. Writers go first: a waiting
//! write holds new reads back, so reads cannot starve it.
//!
//! ```no_run
//! # #[cfg(feature = "axum")] {
//! use std::time::Duration;
//! use axum::{Extension, Router, extract::Path, routing::get};
//! use lock_tower::{Access, HeldLock, LockClient, LockLayer};
//!
//! async fn show(Path(id): Path<String>) -> String {
//!     format!("document {id}") // runs alongside other reads of this document
//! }
//!
//! async fn update(Extension(held): Extension<HeldLock>) -> String {
//!     assert_eq!(held.access(), Some(Access::Write)); // alone: no reader, no other writer
//!     match held.fencing_token().await {
//!         Ok(token) => format!("saved with token {token}"), // came with the grant
//!         Err(lost) => format!("not saved: {lost}"),
//!     }
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let locks = LockClient::connect("redis://127.0.0.1:6379").await?;
//! let app = Router::new()
//!     .route("/docs/{id}", get(show).put(update))
//!     .route_layer(LockLayer::new(locks, "doc:<id>").read_write().wait(Duration::from_secs(2)));
//! # let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! # axum::serve(listener, app).await?;
//! # Ok(()) }
//! # }
//! ```
//!
//! Override the classification with [`LockLayer::access`] (a closure over the request head
//! returning an [`Access`]). gRPC calls are all `POST`s, which the default takes as writes:
//! with tonic, classify by path (`/package.Service/Method`).
//!
//! # Keyed concurrency limit
//!
//! [`KeyedConcurrencyLimitLayer`] lets at most *N* requests per key run at once across every
//! instance, with one permit of a distributed semaphore ([`Semaphore`](lock_runtime::Semaphore))
//! per request; the key comes from the same [name sources](name) as a lock name. A request
//! that finds no permit free waits up to [`wait`](KeyedConcurrencyLimitLayer::wait) for one,
//! then is answered 429 with `Retry-After` (gRPC: `RESOURCE_EXHAUSTED`); 503 / `UNAVAILABLE`
//! when Redis is down.
//!
//! ```
//! use std::time::Duration;
//! use lock_tower::{KeyedConcurrencyLimitLayer, name::Headers};
//!
//! # fn demo(locks: lock_tower::LockClient) {
//! // At most 8 requests per API key at a time, over all instances; no queueing.
//! let limit = KeyedConcurrencyLimitLayer::new(locks, Headers::new("api-key:<x-api-key>"), 8)
//!     .wait(Duration::ZERO)
//!     .require_name();
//! # let _ = limit; }
//! ```
//!
//! # Several names from the body: a cart
//!
//! A checkout must lock every product in the cart, all or nothing, and write each product's
//! stock fenced by that product's token. [`MultiLockLayer`] reads the request body (bounded:
//! [`max_body_bytes`](MultiLockLayer::max_body_bytes), 64 KiB by default, else 413), takes
//! one lock per distinct name it finds there, in one global order (so carts listing the same
//! products in different orders never deadlock), and hands the body on unchanged. The handler
//! finds each name's fencing token in [`HeldLocks`].
//!
//! ```no_run
//! # #[cfg(all(feature = "axum", feature = "json"))] {
//! use std::time::Duration;
//! use axum::{Extension, Json, Router, routing::post};
//! use lock_tower::{HeldLocks, LockClient, MultiLockLayer, name::JsonNames};
//!
//! #[derive(serde::Deserialize)]
//! struct Cart {
//!     items: Vec<Item>,
//! }
//!
//! #[derive(serde::Deserialize)]
//! struct Item {
//!     sku: String,
//!     qty: u32,
//! }
//!
//! async fn checkout(Extension(held): Extension<HeldLocks>, Json(cart): Json<Cart>) -> String {
//!     // Every SKU of the cart is ours, across all instances, until this returns.
//!     for item in &cart.items {
//!         let name = format!("stock:{}", lock_tower::name::escape(&item.sku));
//!         let token = held.fencing_token(&name).expect("every SKU is locked");
//!         // UPDATE stock SET qty = qty - item.qty, fence = token
//!         //  WHERE sku = item.sku AND fence <= token (lock-fence checks it for you)
//!         # let _ = (token, item.qty);
//!     }
//!     format!("checked out {} products", held.len())
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let locks = LockClient::connect("redis://127.0.0.1:6379").await?;
//! let app = Router::new().route("/checkout", post(checkout)).route_layer(
//!     // {"items": [{"sku": "A-1", "qty": 2}, …]} locks stock:A-1, …
//!     MultiLockLayer::new(locks, JsonNames::new("stock:<items[].sku>"))
//!         .wait(Duration::from_secs(5))
//!         .max_names(32),
//! );
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! # }
//! ```
//!
//! A body that is not JSON, lacks the field, has a value that is neither a string nor an
//! integer, names no lock (an empty cart) or more than [`max_names`](MultiLockLayer::max_names)
//! distinct ones (default 64) is answered 400 / `INVALID_ARGUMENT` and nothing is locked. The
//! body is read before any lock is taken, so a slow client holds no lock while it sends. For
//! other formats, such as a gRPC call's protobuf message, compute the names with a closure,
//! [`name::BodyNames::from_fn`] (see [`MultiLockLayer`]). The JSON source needs the feature
//! `json` (on by default).
//!
//! # Lock names
//!
//! The *lock name* is what a request locks (`stock:42`); the runtime derives the Redis *key*
//! from it (`lock:{stock:42}`). A [`NameSource`](name::NameSource) computes the name from the
//! request:
//!
//! | source | for |
//! |---|---|
//! | `"stock:<id>"` / `name::PathParams` | axum path parameters |
//! | [`name::Headers`]`::new("stock:<x-product-id>")` | headers, gRPC metadata |
//! | [`name::UriPattern`]`::new("/stock/{id}/reserve", "stock:<id>")` | any tower stack |
//! | [`name::from_fn`] | anything else |
//!
//! Values taken from requests are untrusted: they are bounded
//! ([`max_name_value_len`](LockLayer::max_name_value_len), default 128 bytes) and
//! [escaped](name::escape), so a value can neither alias another name (`1:x`), nor choose a
//! Redis Cluster slot (`{…}`), nor smuggle control bytes; an unusable value is answered with
//! 400 / `INVALID_ARGUMENT`. Only ASCII letters and digits stay as they are, and templates must
//! separate placeholders (`"<a>:<b>"`, not `"<a><b>"`), so different values never name the same
//! lock.
//!
//! # Responses
//!
//! The layers never fail on their own: lock failures become responses ([`rejection`]): 423
//! Locked with `Retry-After` (at most [`retry_after`](LockLayer::retry_after), default 1 s,
//! less when the holder's lease ends sooner) when the lock stays busy for the whole [`wait`](LockLayer::wait)
//! (409 or anything else with [`busy_status`](LockLayer::busy_status)); 429 Too Many Requests
//! with `Retry-After` when no permit of a [`KeyedConcurrencyLimitLayer`] comes free
//! ([`limited_status`](KeyedConcurrencyLimitLayer::limited_status)); 503 when Redis is
//! unavailable; 503 when the lock is lost while the handler runs (the handler is dropped first;
//! [`lost_status`](LockLayer::lost_status)). Replace them with
//! [`with_rejection_response`](LockLayer::with_rejection_response). Rejection responses carry
//! a [`LockRejection`] (with the [`LockError`]) in their extensions.
//!
//! Handlers find the lock (or permit) they run under, with its fencing token, in the request
//! extensions as [`HeldLock`] ([`HeldLocks`] under a [`MultiLockLayer`]). A [`LockLayer`]'s
//! token is issued on demand (the handler's first `held.fencing_token().await` costs one round
//! trip; a handler that never asks costs Redis no token, and a hot name's requests in one
//! process take turns in memory); a layer made [`fenced`](LockLayer::fenced) takes it with
//! the grant, for services that fence every write. Handlers run inside the
//! guard's reentrancy scope: taking the same
//! lock again with the same client (for example through `#[distributed_lock]`) re-enters
//! instead of deadlocking.
//!
//! # Caveats
//!
//! - Put the layer where routing has happened: `Router::route_layer` (or `Router::layer`) in
//!   axum, so path parameters are known; `route_layer` also keeps unknown paths at 404.
//! - By default the lock covers the handler, not the streaming of the response body; use
//!   [`hold_until_body_end`](LockLayer::hold_until_body_end) when the body does the work
//!   (the body then runs in the reentrancy scope and fails with an error frame if the lock is
//!   lost mid-stream).
//! - Waiting requests hold a connection and a ready inner service. Keep
//!   [`wait`](LockLayer::wait) short (default [`DEFAULT_WAIT`], 10 s) and let clients retry
//!   after `Retry-After`.
//! - A lock on one Redis primary is only as safe as that primary; pass the fencing token to
//!   the storage you protect.
//! - A mutex, a read/write lock and a semaphore of the same name share one Redis key, as
//!   different data types: use each name (each template prefix) for one kind only. A name
//!   taken as two kinds is answered 500 ([`LockError::ForeignData`]) while the other is held.
//!
//! # Which crate do I need
//!
//! | you want | crate |
//! |---|---|
//! | a distributed lock, semaphore, read/write or fair lock from code | [`lock-runtime`](https://docs.rs/lock-runtime) |
//! | `#[distributed_lock]` on an `async fn` | [`lock-macros`](https://docs.rs/lock-macros), through `lock-runtime`'s default `macros` feature |
//! | a lock (or *N* permits) per request in axum, tonic or any tower stack | [`lock-tower`](https://docs.rs/lock-tower) |
//! | the store to refuse a stale holder's write (PostgreSQL, SQLite, Redis) | [`lock-fence`](https://docs.rs/lock-fence) |
//! | to list, inspect or force-unlock locks from a shell | [`lockctl`](https://crates.io/crates/lockctl) (`cargo install lockctl`) |
//!
//! [tower]: https://docs.rs/tower

#![cfg_attr(docsrs, feature(doc_cfg))]

#[macro_use]
mod macros;

mod access;
mod body;
mod config;
mod extension;
pub mod future;
mod grpc;
mod hold;
#[deprecated(since = "0.2.0", note = "renamed to `lock_tower::name`")]
pub mod key;
mod layer;
mod limit;
mod multi;
pub mod name;
pub mod rejection;
mod response;
mod service;

pub use access::Access;
pub use body::{BoxError, ResponseBody};
pub use config::DEFAULT_WAIT;
pub use extension::{HeldLock, HeldLocks};
pub use layer::LockLayer;
pub use limit::KeyedConcurrencyLimitLayer;
pub use lock_runtime::{LockClient, LockError, LockOptions};
pub use multi::{
    BufferedBody, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_NAMES, MultiLockLayer, MultiLockService,
};
pub use rejection::{DefaultRejection, LockRejection, RejectionKind, RejectionResponse};
pub use service::LockService;
