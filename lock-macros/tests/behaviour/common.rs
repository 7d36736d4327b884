//! What the `#[distributed_lock]` tests against a real `redis-server` share: the error type of
//! their fns and a client.
// Each module uses part of it.
#![allow(dead_code, unreachable_pub)]

use lock_runtime::{LockClient, LockError};
use lock_tests::RedisServer;

/// The error type of the locked fns: the lock's error is the only one they return.
#[derive(Debug)]
pub enum AppError {
    Lock(LockError),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

/// A client of `server` with default settings.
pub async fn connect(server: &RedisServer) -> LockClient {
    lock_tests::client(server).await
}
