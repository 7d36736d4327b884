//! `rediss://` against a TLS-enabled redis-server with a private CA (feature `tls`).
#![cfg(feature = "tls")]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lock_runtime::LockClient;
use lock_tests::{RedisServer, free_port};

fn openssl(dir: &Path, args: &[&str]) {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run openssl");
    assert!(status.success(), "openssl {args:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_urls_work_with_a_private_ca() {
    let dir = std::env::temp_dir().join(format!("lock-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "1",
            "-subj",
            "/CN=lock-test-ca",
        ],
    );
    openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "1",
            "-extfile",
            "san.ext",
        ],
    );
    let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let tls_port = free_port();
    let redis = RedisServer::start_with(&[
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &path("server.crt"),
        "--tls-key-file",
        &path("server.key"),
        "--tls-ca-cert-file",
        &path("ca.crt"),
        "--tls-auth-clients",
        "no",
    ]);
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let ca = std::fs::read(dir.join("ca.crt")).unwrap();

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
    let held = a.lock("tls").acquire().await.unwrap();
    let waiter = tokio::spawn(async move { b.lock("tls").acquire().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("woken over the TLS pub/sub connection")
        .unwrap()
        .unwrap();
    g.release().await.unwrap();
    drop(redis);
    let _ = std::fs::remove_dir_all(&dir);
}
