//! Looking at locks from the outside: [`Lock::info`] (who holds a lock, for how long, its last
//! fencing token, who waits) and [`LockClient::scan`] (the names of the locks under the
//! client's prefix, found with `SCAN`). What `lockctl` shows is read through these.
//!
//! Both read the layout the lock family writes (see `keys/`) and nothing
//! else: a key under the prefix that is not a lock's is reported, never touched, and data of
//! another type at a lock's key is [`LockError::ForeignData`].
//!
//! - `info.rs`: [`LockInfo`] and what it is made of, read from the backend's lock state;
//! - `scan.rs`: [`LockScan`], which tells a lock's key from its other keys and from keys of no
//!   lock, and matches names against a glob;
//! - `by_name.rs`: [`LockClient::info`] and [`LockClient::force_unlock`], a name read and
//!   freed as whatever kind of lock it holds, in either layout.
//!
//! [`Lock::info`]: crate::Lock::info
//! [`LockClient::scan`]: crate::LockClient::scan
//! [`LockClient::info`]: crate::LockClient::info
//! [`LockClient::force_unlock`]: crate::LockClient::force_unlock
//! [`LockError::ForeignData`]: crate::LockError::ForeignData

mod by_name;
mod info;
mod scan;

pub use self::by_name::ForceUnlock;
pub use self::info::{HoldMode, Holder, LockInfo, LockKind, MAX_LISTED_HOLDERS, Waiters};
pub use self::scan::LockScan;
