//! The layers in the stacks they serve, against a real `redis-server` (one per test, on a free
//! loopback port): `LockLayer` in axum (exclusive and read/write), `KeyedConcurrencyLimitLayer`,
//! `MultiLockLayer` over HTTP and gRPC, the layers in tonic, `LockService`'s `Service` contract
//! and the cancellation of its futures. Each module was a test binary of its own.

#[path = "../common/mod.rs"]
mod common;

mod axum;
mod cancel;
mod limit;
mod multi;
mod read_write;
mod service;
mod tonic;
