//! `LockLayer`: a tower middleware that locks per request (filled in by the lock-tower issue).
//!
//! This crate is a skeleton until the lock-tower issue lands; it re-exports the runtime so
//! that dependents can already name its types.

pub use lock_runtime::{LockClient, LockError};
