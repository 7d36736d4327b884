//! `rediss://` against a TLS-enabled redis-server with a private CA (feature `tls`).
#![cfg(feature = "tls")]

mod common;

use std::time::Duration;

use lock_runtime::LockClient;
use lock_tests::TlsRedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_urls_work_with_a_private_ca() {
    let tls = TlsRedisServer::start();
    let url = tls.url();
    let ca = tls.ca_pem();

    // Without trusting the CA the handshake fails: a typed error, not a panic.
    let err = LockClient::builder(&url)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");

    let client = |ca: Vec<u8>| LockClient::builder(&url).tls_root_certificate(ca).build();
    let a = client(ca.clone()).await.unwrap();
    let b = client(ca).await.unwrap();
    // b is woken over its TLS pub/sub connection.
    common::contend_and_wake(&a, &b, "tls").await;
}
