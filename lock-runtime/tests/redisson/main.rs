//! `Layout::Redisson`: the bytes Redisson keeps on Redis, checked without a JVM (`layout`), and
//! Rust and Java clients sharing the same locks, semaphores, read/write and fair locks
//! (`interop`, JVMs running Redisson). Each module was a test binary of its own.

#[path = "../common/mod.rs"]
mod common;

mod cost;
mod interop;
mod layout;
