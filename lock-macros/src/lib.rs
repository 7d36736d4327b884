//! The `#[distributed_lock]` attribute for [lock-runtime]: run an `async fn` while holding a
//! Redis-backed distributed lock.
//!
//! Use it through `lock_runtime::distributed_lock` (re-exported behind lock-runtime's default
//! `macros` feature); this crate is its implementation. See [`distributed_lock`] for the
//! options.
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
//! [lock-runtime]: https://docs.rs/lock-runtime

#![cfg_attr(docsrs, feature(doc_cfg))]

mod attr;
mod expand;
mod template;

use proc_macro::TokenStream;

/// Runs the annotated `async fn` while holding a distributed lock.
///
/// ```ignore
/// use lock_runtime::{distributed_lock, LockError};
///
/// #[distributed_lock(name = "stock:<id>", wait = "5s")]
/// async fn reserve(id: u64, qty: u32) -> Result<Reservation, AppError> {
///     // Only one caller, in any process, runs this for a given `id` at a time.
///     # todo!()
/// }
/// ```
///
/// Each call formats the lock [name](#name) from the arguments, acquires the lock of that name
/// (a mutex by default; the read or write side of a read/write lock, a fair lock, or permits of
/// a semaphore with [`mode`](#mode) and [`permits`/`capacity`](#permits-and-capacity)),
/// runs the body inside the guard's reentrancy scope, and releases the lock when the body is
/// done. While the body runs, the lock's lease is renewed by the client's watchdog (unless a
/// fixed [`lease`](#lease) is given), and if the lock is lost anyway, the body is dropped and
/// `LockError::Lost` returned ([`on_lost`](#on_lost)).
///
/// # Requirements
///
/// The fn must be `async` and return `Result<T, E>` where `E: From<lock_runtime::LockError>`:
/// lock errors (a [wait](#wait) that timed out, a lost lock, Redis unavailable, no default
/// client) reach the caller through `E`, just like the body's own errors. Type aliases such as
/// `AppResult<T>` work. Anything else is a compile error:
///
/// ```ignore
/// #[derive(Debug)]
/// enum AppError {
///     Lock(LockError),
///     OutOfStock,
/// }
///
/// impl From<LockError> for AppError {
///     fn from(e: LockError) -> Self {
///         AppError::Lock(e)
///     }
/// }
///
/// #[distributed_lock(name = "stock:<id>")]
/// async fn reserve(id: u64) -> Result<(), AppError> {
///     Err(AppError::OutOfStock)
/// }
///
/// match reserve(42).await {
///     Err(AppError::Lock(e)) if e.is_busy() => { /* someone else holds it */ }
///     other => { /* the body ran */ }
/// }
/// ```
///
/// Everything else about the fn stays as written: visibility, attributes and doc comments,
/// generics, lifetimes and where-clauses, `impl Trait` arguments, patterns in parameters, and
/// methods taking `&self`, `&mut self` or `self: Arc<Self>`. The returned future is `Send`
/// whenever the body's future (and its output) is, so locked fns work as axum handlers and
/// with `tokio::spawn`.
///
/// # Options
///
/// | option | default | |
/// |---|---|---|
/// | [`name = "…"`](#name) | required | the lock name, a template over the parameters |
/// | [`mode = "read" \| "write" \| "fair"`](#mode) | a mutex | a read/write lock's side, or a fair lock |
/// | [`permits = N`](#permits-and-capacity) | `1` | permits of a semaphore taken per call |
/// | [`capacity = M`](#permits-and-capacity) | not a semaphore | makes the lock a semaphore of `M` permits |
/// | [`max_names = N`](#several-names-a-cart) | `64` | the most distinct names of a template over a collection |
/// | [`wait = "…"`](#wait) | wait indefinitely | how long to wait for a busy lock |
/// | [`lease = "…"`](#lease) | watchdog renewal | a fixed lease instead of renewal |
/// | [`max_hold = "…"`](#max_hold) | no limit | stop renewing and give the lock up after this long |
/// | [`fenced`](#fenced) | tokens on demand | a mutex takes its fencing token with the grant |
/// | [`client = <expr>`](#client) | the process-wide default | which `LockClient` to use |
/// | [`on_lost = abort \| ignore`](#on_lost) | `abort` | what a lost lock does to the body |
/// | [`crate = "…"`](#crate) | `"::lock_runtime"` | where `lock_runtime` is |
///
/// ## `name`
///
/// The lock name: literal text with placeholders. `<name>` is the parameter `name`,
/// `<name.field.subfield>` a field of it (tuple fields too: `<pair.0>`), and `<self.field>` a
/// field of the receiver; each is formatted with `Display`. Names bound by patterns in the
/// parameter list can be used too. Write `<<` and `>>` for a literal `<` and `>`.
///
/// Names in placeholders are Rust identifiers, Unicode ones included (`<café>`). A keyword
/// names what Rust writes as a raw identifier, with or without the `r#`: `<item.type>` and
/// `<item.r#type>` are both the field `r#type`, `<type>` the parameter `r#type`.
///
/// ```ignore
/// #[distributed_lock(name = "order:<order.customer.id>:<order.id>")]
/// async fn ship(order: &Order) -> Result<(), AppError> { /* … */ }
///
/// #[distributed_lock(name = "stock:<self.warehouse>:<sku>")]
/// async fn restock(&self, sku: &str, qty: u32) -> Result<(), AppError> { /* … */ }
///
/// // A fixed name: one lock for every call.
/// #[distributed_lock(name = "nightly-report")]
/// async fn nightly_report() -> Result<(), AppError> { /* … */ }
/// ```
///
/// An empty name, an empty (`<>`) or unclosed (`<id`) placeholder, a placeholder that is not
/// an identifier (`<id.a²>`, `<x.>`, `<x.self>`, `<pair.01>`), or one that names no parameter
/// is a compile error pointing at the name. A name that formats to an invalid lock name
/// (empty, too long, control characters) fails at run time with `LockError::InvalidName`.
/// The formatted name is the lock name as `LockClient::lock` takes it, so other code can use
/// the same lock: `locks.lock("stock:42").force_unlock()`. (The Redis key the lock lives
/// under is derived from the name by the client.)
///
/// A placeholder with a `[]` step, like `<cart.items[].sku>`, makes one lock name per element
/// of a collection and takes them all: see [Several names](#several-names-a-cart).
///
/// `key = "…"` is the deprecated spelling of `name = "…"` (before 0.2.0): it still works, with
/// a deprecation warning at `key`. Giving both is an error.
///
/// ## `mode`
///
/// Which lock of that name the call takes. Without `mode` (or `permits`/`capacity`) it is a
/// plain mutex (`LockClient::lock`): one caller at a time.
///
/// - `"read"`: the read side of a read/write lock (`LockClient::rw_lock(name).read()`). Any
///   number of read-mode calls run at once, in every process; a write-mode call excludes them.
/// - `"write"`: the write side of the same read/write lock: one caller at a time, and no
///   readers meanwhile. A waiting writer goes before readers that arrive after it.
/// - `"fair"`: a fair lock (`LockClient::fair_lock`): one caller at a time, granted in the order
///   the callers first asked, across processes.
///
/// Any other value is a compile error, as is `mode` together with `permits` or `capacity`.
///
/// ```ignore
/// // Many readers of a stock level at once…
/// #[distributed_lock(name = "stock:<sku>", mode = "read")]
/// async fn stock_level(sku: &str) -> Result<u32, AppError> { /* … */ }
///
/// // …and a restock holds it alone.
/// #[distributed_lock(name = "stock:<sku>", mode = "write", wait = "5s")]
/// async fn restock(sku: &str, qty: u32) -> Result<(), AppError> { /* … */ }
///
/// // Ticket sales in arrival order.
/// #[distributed_lock(name = "drop:<item>", mode = "fair")]
/// async fn buy(item: u64) -> Result<(), AppError> { /* … */ }
/// ```
///
/// Nested calls follow the read/write lock's reentrancy: inside a write-mode body, a read-mode
/// or write-mode call of the same name re-enters; inside a read-mode body a read-mode call
/// re-enters, but a write-mode call fails at once with `LockError::WouldDeadlock` (the upgrade
/// would wait for itself). A name taken in a scope as one kind of lock (mutex, fair lock,
/// read/write lock, semaphore) and then as another also fails with `LockError::WouldDeadlock`.
///
/// ## `permits` and `capacity`
///
/// `capacity = M` makes the lock a counting semaphore (`LockClient::semaphore(name, M)`): up to
/// `M` permits are held at once, by every process together. Each call takes `permits = N`
/// of them (1 when `permits` is not given), all at once, and gives them back when the body is
/// done. Both are integer literals of at least 1, with `permits` at most `capacity`; `permits`
/// without `capacity` is a compile error.
///
/// ```ignore
/// // At most 10 calls to the supplier at a time, across every instance.
/// #[distributed_lock(name = "supplier:<name>", capacity = 10, wait = "2s")]
/// async fn call_supplier(name: &str) -> Result<Reply, AppError> { /* … */ }
///
/// // A bulk import counts for 4 of those 10.
/// #[distributed_lock(name = "supplier:<name>", permits = 4, capacity = 10)]
/// async fn bulk_import(name: &str) -> Result<(), AppError> { /* … */ }
/// ```
///
/// `capacity` is the semaphore's size while none is stored in Redis: an operator's
/// `Semaphore::set_capacity` overrides it for every client. If that stored capacity is below
/// `permits`, the call fails with `LockError::InvalidPermits` instead of waiting forever.
/// A nested call of the same semaphore inside the body re-enters without taking more permits.
///
/// ## Several names: a cart
///
/// A placeholder whose path has a `[]` step runs over a collection: the part before `[]` is
/// the collection (a parameter, or a field of one), the part after it a field of each element.
/// The call takes one lock for every distinct name, all of them or none, and runs the body
/// while holding them all:
///
/// ```ignore
/// struct Item { sku: String, qty: u32 }
/// struct Cart { items: Vec<Item> }
///
/// // Reserves every product of the cart: `stock:<sku>` for each item, taken together.
/// #[distributed_lock(name = "stock:<cart.items[].sku>", wait = "5s")]
/// async fn checkout(cart: &Cart) -> Result<Order, AppError> { /* … */ }
///
/// #[distributed_lock(name = "stock:<skus[]>", mode = "write")]
/// async fn restock(skus: &[String]) -> Result<(), AppError> { /* … */ }
///
/// // Scalar placeholders may stand next to it.
/// #[distributed_lock(name = "stock:<self.warehouse>:<cart.items[].sku>", client = self.locks)]
/// async fn reserve(&self, cart: &Cart) -> Result<(), AppError> { /* … */ }
/// ```
///
/// - **Collections.** Anything iterated by reference: `&path` or `&*path` must implement
///   `IntoIterator`, so `Vec<T>`, `[T; N]`, `&[T]`, `HashSet<T>`, `BTreeSet<T>`, `VecDeque<T>`,
///   `&mut Vec<T>`, `Arc<Vec<T>>`… Each element (or its field after `[]`) is formatted with
///   `Display`. A map iterates as `(key, value)` pairs: `<prices[].0>` is a name per key,
///   `<prices[].1>` one per value. Anything else is a compile error naming the path ("`cart.id`
///   in the lock name template is not a collection").
/// - **One `[]` per name**, after a path: `<[]>`, `<skus[0]>`, `<skus[ ]>`, `<skus[]sku>` and
///   a second `[]` (`<a[]>:<b[]>`, `<orders[].skus[]>`) are compile errors pointing at the name.
/// - **Deduplicated.** Elements that give the same name take it once: a cart listing a product
///   twice locks it once.
/// - **No deadlock.** The locks are taken through `lock_runtime::MultiLock`: one at a time in
///   one global order (by Redis key), whatever order the collection lists them in, so two
///   calls whose carts share products in different orders never wait for each other in a
///   cycle. [`wait`](#wait) bounds the whole acquisition; if one lock cannot be had in time,
///   those already taken are released and the call returns `LockError::WaitTimeout`.
/// - **Reentrancy.** The body runs inside the scope of every lock: a nested call that takes one
///   of the names (`#[distributed_lock(name = "stock:<sku>")]` for a product of the cart)
///   re-enters instead of deadlocking.
/// - **Loss.** With `on_lost = abort` (the default), losing *any* of the locks drops the body
///   and the call returns `LockError::Lost` naming that lock; all are released after the body
///   either way.
/// - **`max_names = N`** (default 64, at most 1000): more distinct names than that fail with
///   `LockError::TooManyNames { count, max }` before anything is taken, so a huge cart cannot
///   tie up a thousand locks one round trip at a time. Only allowed with a `[]` name.
/// - **Empty collections** fail with `LockError::InvalidName` (the template as the name, the
///   reason saying the collection is empty): a call never runs its body without a lock.
///
/// The mutex, `mode = "fair"`, `"read"` and `"write"` work over a collection (every name taken
/// in that mode); a semaphore ([`capacity`/`permits`](#permits-and-capacity)) is a compile
/// error. [`lease`](#lease), [`max_hold`](#max_hold), [`client`](#client),
/// [`on_lost`](#on_lost) and [`crate`](#crate) apply to every lock. The span's `lock` field is
/// the distinct names, sorted, separated by `, `.
///
/// ## `wait`
///
/// How long to wait for a lock someone else holds before giving up with
/// `LockError::WaitTimeout` (through your error type). Durations are parsed at compile time:
/// whole numbers with the units `h`, `m`, `s`, `ms`, largest first (`"250ms"`, `"5s"`,
/// `"1m30s"`, `"1h"`). `"0s"` makes a single attempt. Without `wait`, the call waits as long
/// as it takes (woken by the holder's unlock message, not by polling).
///
/// ```ignore
/// // Try once; if the report is already running elsewhere, fail fast.
/// #[distributed_lock(name = "nightly-report", wait = "0s")]
/// async fn nightly_report() -> Result<(), AppError> { /* … */ }
///
/// #[distributed_lock(name = "stock:<id>", wait = "1m30s")]
/// async fn reserve(id: u64) -> Result<(), AppError> { /* … */ }
/// ```
///
/// ## `lease`
///
/// A fixed lease: the lock expires this long after it was taken, with no renewal. A body still
/// running when the lease is about to end (a margin of a tenth of it, at least 5 ms, before
/// Redis lets the lock go) has lost the lock (see [`on_lost`](#on_lost)). Without
/// `lease`, the client's watchdog renews the lock for as long as the body runs, and a crashed
/// process's locks expire one watchdog timeout (30 s by default) after its last renewal.
/// At least `"1ms"`.
///
/// ```ignore
/// // Must finish within 10 s; the lock cannot outlive that even if this process hangs.
/// #[distributed_lock(name = "payout:<account>", lease = "10s")]
/// async fn payout(account: u64) -> Result<(), AppError> { /* … */ }
/// ```
///
/// ## `max_hold`
///
/// The longest the body may hold the lock. The watchdog renews the lock while the body runs,
/// but stops once `max_hold` has passed since the lock was taken: it releases the lock and the
/// body has lost it (see [`on_lost`](#on_lost): by default the body is dropped and the call
/// returns `LockError::Lost` with `LossReason::MaxHoldExceeded`). This protects against a
/// holder that is alive but stuck, which the watchdog alone would keep renewing forever.
/// Same duration syntax as [`wait`](#wait); at least `"1ms"` and at most `"87600h"` (10 years).
/// It works with every kind of lock ([`mode`](#mode), [semaphores](#permits-and-capacity)).
///
/// ```ignore
/// // A nightly job may hold the lock for 30 minutes at most.
/// #[distributed_lock(name = "nightly-report", max_hold = "30m")]
/// async fn nightly_report() -> Result<(), AppError> { /* … */ }
/// ```
///
/// With a fixed [`lease`](#lease) too, whichever ends first ends the hold (a `max_hold` shorter
/// than the lease releases the lock early).
///
/// ## `fenced`
///
/// A mutex is taken without a fencing token by default (tokens on demand: an uncontended grant
/// is one `SET NX PX`). A body that writes a fenced store asks for the token by re-entering the
/// lock it runs under: the re-entrant guard shares the hold, so the token is that hold's, issued
/// by Redis only while it is ours (one round trip the first time, then cached). With the bare
/// flag `fenced`, the token is issued with the grant instead, in the acquire's own round trip,
/// and asking for it costs nothing. (A fair lock, a read/write lock and a semaphore always take
/// theirs with the grant; `fenced` with `mode`, `permits` or `capacity` is a compile error. A
/// client built with `fenced_by_default(true)` takes every mutex fenced.)
///
/// ```no_run
/// # use lock_macros::distributed_lock;
/// # use lock_runtime::{LockClient, LockError};
/// #[distributed_lock(name = "stock:<sku>", fenced)]
/// async fn restock(sku: &str, qty: i64) -> Result<(), LockError> {
///     // Re-enters the hold this call runs under: no acquisition, and its token came with it.
///     let held = LockClient::default_client()?.lock(format!("stock:{sku}")).acquire().await?;
///     let token = held.fencing_token().await?;
///     // UPDATE stock SET qty = qty + $2, lock_token = $3 WHERE sku = $1 AND lock_token < $3
///     # let _ = (qty, token);
///     Ok(())
/// }
/// ```
///
/// ## `client`
///
/// Which `LockClient` to lock with: any expression, evaluated in the fn's scope before the body
/// runs, whose value is a `LockClient` or derefs to one (`&LockClient`, `Arc<LockClient>`). It
/// is borrowed, not moved, and cloned (a cheap `Arc` clone), so `client = self.locks` leaves
/// `self` intact.
///
/// ```ignore
/// struct Inventory {
///     locks: LockClient,
/// }
///
/// impl Inventory {
///     #[distributed_lock(name = "stock:<sku>", client = self.locks)]
///     async fn reserve(&self, sku: &str) -> Result<(), AppError> { /* … */ }
/// }
///
/// // In an axum handler: `state.locks` where `state: State<AppState>`.
/// #[distributed_lock(name = "stock:<id>", client = state.locks)]
/// async fn reserve_handler(state: AppState, id: u64) -> Result<(), AppError> { /* … */ }
/// ```
///
/// Without `client`, the process-wide default client is used, installed at start-up with
/// `LockClient::install_default`. If none is installed, the call returns
/// `LockError::NoDefaultClient` through your error type; it never panics.
///
/// ```ignore
/// let locks = LockClient::connect("redis://127.0.0.1:6379").await?;
/// locks.install_default();
/// reserve(42).await?; // uses `locks`
/// ```
///
/// ## `on_lost`
///
/// What happens when the lock is lost while the body runs (the watchdog found it deleted or
/// could not renew it in time, a fixed `lease` ran out, or [`max_hold`](#max_hold) passed):
///
/// - `abort` (the default): the body's future is dropped at its next `.await` and the call
///   returns `LockError::Lost` through your error type. Code after the loss does not run.
/// - `ignore`: the body runs to completion and its result is returned; the loss is logged.
///
/// ```ignore
/// // The body is idempotent and cheap to finish: let it run even if the lock is lost.
/// #[distributed_lock(name = "cache-refresh", on_lost = ignore)]
/// async fn refresh_cache() -> Result<(), AppError> { /* … */ }
/// ```
///
/// ## `crate`
///
/// The path to `lock_runtime` in the generated code, for crates that re-export it under another
/// name (like tokio's `crate = "…"`).
///
/// ```ignore
/// // In a crate that depends on `my_platform`, which re-exports `lock_runtime`:
/// #[distributed_lock(name = "job:<id>", crate = "my_platform::lock_runtime")]
/// async fn run_job(id: u64) -> Result<(), AppError> { /* … */ }
/// ```
///
/// # Behaviour
///
/// - **Reentrancy.** The body runs inside the guard's reentrancy scope: a locked fn that calls
///   another locked fn (or `LockClient::lock(…).acquire()`) with the same name and the same
///   client re-enters at once instead of deadlocking (for read/write locks and semaphores, see
///   [`mode`](#mode) and [`permits`](#permits-and-capacity)). Two `join!`ed calls, or a call in
///   a spawned task, are different owners and exclude each other.
/// - **Release.** When the body returns (`Ok` or `Err`), the lock is released before the call
///   returns, so the next waiter can proceed at once. If the body panics or the call's future
///   is dropped, the guard's drop releases the lock in the background within milliseconds.
/// - **Release errors** never replace the body's result: the body's effects have happened, and
///   reporting a failure would invite a retry that repeats them. They are logged with
///   `tracing` at `WARN` (a lock that could not be released expires with its lease; the client
///   keeps retrying the release in the background). A loss detected during the body is
///   reported as described under [`on_lost`](#on_lost).
/// - **Tracing.** The acquisition and the body run in an `INFO` span named `distributed_lock`,
///   with the fn's module as its target and the fields `function` (the fn's name) and `lock`
///   (the formatted name; over a collection, the names separated by `, `).
///
/// # Expansion
///
/// Roughly (names simplified):
///
/// ```ignore
/// async fn reserve(id: u64, qty: u32) -> Result<Reservation, AppError> {
///     let name: String = format!("stock:{}", id);
///     let client = LockClient::default_client(); // or `Ok(LockClient::clone(&(<expr>)))`
///     let span = info_span!("distributed_lock", function = "reserve", lock = %name);
///     let options = LockOptions::new().wait(5 s); // and `.lease(…)`, `.max_hold(…)`
///     run_locked(client, name, Kind::Mutex, "stock:<id>", options, OnLost::Abort, async move {
///         /* the body, unchanged */
///     })
///     .instrument(span)
///     .await
/// }
/// ```
///
/// where `Kind` is `Mutex`, `FencedMutex` ([`fenced`](#fenced)), `Fair`, `Read`, `Write` or
/// `Semaphore { permits, capacity }` (from [`mode`](#mode),
/// [`permits` and `capacity`](#permits-and-capacity)), and `run_locked` (in
/// `lock_runtime::__private`) takes the lock of that kind, runs the body with `LockGuard::run`
/// (or `LockGuard::scope` for `on_lost = ignore`) and releases. If the arguments are wrong,
/// the fn is emitted unchanged next to the compile error.
///
/// With a name over a collection, the name is instead a set of names, one inserted per element,
/// and `run_locked_all` takes them through a `MultiLock`:
///
/// ```ignore
/// let mut names = LockNameSet::new("stock:<cart.items[].sku>", 64); // `max_names`
/// for item in &cart.items {
///     names.insert(format!("stock:{}", item.sku));
/// }
/// // …
/// run_locked_all(client, names, Kind::Mutex, "stock:<cart.items[].sku>", options, OnLost::Abort, async move { /* … */ })
///     .instrument(span)
///     .await
/// ```
///
/// (The collection is iterated through helper traits, so that `&[T]` parameters work and
/// anything that is not a collection is a clear compile error.)
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}
