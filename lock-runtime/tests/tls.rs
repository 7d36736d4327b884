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

/// A master reached over TLS through a sentinel that monitors its TLS port: the client asks the
/// sentinel (plain), then opens both connections to the master with TLS and the private CA.
#[cfg(feature = "sentinel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_master_behind_sentinel_over_tls() {
    use lock_tests::topology::Sentinel;

    let tls = TlsRedisServer::start();
    let sentinel = Sentinel::start_with("tlsmaster", tls.tls_port(), 1, &tls.tls_client_conf());
    let reachable = common::eventually(Duration::from_secs(5), || {
        sentinel
            .master_state("tlsmaster")
            .is_ok_and(|s| s.get("flags").is_some_and(|f| f == "master"))
    })
    .await;
    assert!(
        reachable,
        "the sentinel reaches the master over TLS: {:?}",
        sentinel.master_state("tlsmaster")
    );
    let builder = || LockClient::sentinel_builder([sentinel.url()], "tlsmaster");

    // Without master_tls, the client speaks plain text to a TLS port: a typed error.
    let err = builder()
        .connect_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    // With it but without the private CA the handshake fails.
    let err = builder()
        .master_tls()
        .connect_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");

    let client = || {
        builder()
            .master_tls()
            .tls_root_certificate(tls.ca_pem())
            .build()
    };
    let a = client().await.unwrap();
    let b = client().await.unwrap();
    common::contend_and_wake(&a, &b, "tls-sentinel").await;

    // master_tls on a builder that is not Sentinel's is a configuration error.
    let err = LockClient::builder(&tls.url())
        .master_tls()
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(err, lock_runtime::LockError::InvalidConfig(_)),
        "{err:?}"
    );
}
