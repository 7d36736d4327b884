//! `#[distributed_lock]` without `client = …` uses the process-wide default client.
//!
//! The default is process-global and this test installs and removes it while the other tests
//! of this binary run, so it must stay the only one here that relies on it: every other
//! `#[distributed_lock]` of this binary names its `client = …`. Another test of the default
//! would need a binary of its own.

use crate::common;

use lock_runtime::{LockClient, LockError, distributed_lock};
use lock_tests::RedisServer;

use common::AppError;

#[distributed_lock(name = "default:<id>", wait = "100ms")]
async fn with_default(id: u32) -> Result<u32, AppError> {
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_default_client_is_a_typed_error_and_an_installed_one_is_used() {
    LockClient::uninstall_default();
    match with_default(1).await {
        Err(AppError::Lock(LockError::NoDefaultClient)) => {}
        other => panic!("expected NoDefaultClient, got {other:?}"),
    }

    let server = RedisServer::start();
    let locks = LockClient::connect(&server.url()).await.unwrap();
    locks.install_default();
    assert_eq!(with_default(2).await.unwrap(), 2);

    // It really locks on that server: a lock held there makes the call time out.
    let other = LockClient::connect(&server.url()).await.unwrap();
    let held = other.lock("default:3").acquire().await.unwrap();
    match with_default(3).await {
        Err(AppError::Lock(LockError::WaitTimeout { .. })) => {}
        other => panic!("expected a wait timeout, got {other:?}"),
    }
    held.release().await.unwrap();
    assert_eq!(with_default(3).await.unwrap(), 3);

    LockClient::uninstall_default();
    assert!(matches!(
        with_default(4).await,
        Err(AppError::Lock(LockError::NoDefaultClient))
    ));
}
