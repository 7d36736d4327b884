//! The layers in the stacks they serve, against a real `redis-server` (one per test, on a free
//! loopback port): `LockLayer` in axum (exclusive and read/write), `KeyedConcurrencyLimitLayer`,
//! `MultiLockLayer` over HTTP and gRPC, the fencing token on demand and with the grant, the layers in tonic, `LockService`'s `Service` contract
//! and the cancellation of its futures, and a Rust service sharing stock with Java services
//! running Redisson (`redisson_stock`). Each module was a test binary of its own.

mod axum;
mod cancel;
mod common;
mod limit;
mod multi;
mod read_write;
mod redisson_stock;
mod service;
mod tokens;
mod tonic;
