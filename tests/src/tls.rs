//! A redis-server that also listens for TLS on a free loopback port, with a certificate from a
//! private CA made for the test with `openssl` (which `scripts/ensure-deps.sh openssl`
//! installs).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{RedisServer, free_port};

/// A redis-server with a TLS port whose certificate only the test's private CA vouches for.
/// The certificates live in a temp dir removed on drop.
#[derive(Debug)]
pub struct TlsRedisServer {
    // Kept running for as long as this lives.
    _server: RedisServer,
    tls_port: u16,
    ca: Vec<u8>,
    dir: PathBuf,
}

impl TlsRedisServer {
    /// Makes a CA and a server certificate for `127.0.0.1`, and starts the server.
    pub fn start() -> TlsRedisServer {
        let dir =
            std::env::temp_dir().join(format!("lock-tls-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        openssl(
            &dir,
            "req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1 -subj /CN=lock-test-ca",
        );
        openssl(
            &dir,
            "req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1",
        );
        openssl(
            &dir,
            "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 1 -extfile san.ext",
        );
        let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
        // Chosen afresh with the server's own port on every try of `start_with`, then read back.
        let server = RedisServer::start_with(&[
            "--tls-port",
            RedisServer::FREE_PORT,
            "--tls-cert-file",
            &path("server.crt"),
            "--tls-key-file",
            &path("server.key"),
            "--tls-ca-cert-file",
            &path("ca.crt"),
            "--tls-auth-clients",
            "no",
        ]);
        let tls_port = server
            .cmd(&["CONFIG", "GET", "tls-port"])
            .items()
            .get(1)
            .and_then(crate::Resp::text)
            .and_then(|p| p.parse().ok())
            .expect("CONFIG GET tls-port");
        let ca = std::fs::read(dir.join("ca.crt")).unwrap();
        TlsRedisServer {
            _server: server,
            tls_port,
            ca,
            dir,
        }
    }

    /// `rediss://127.0.0.1:<tls port>`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }

    /// The TLS port.
    pub fn tls_port(&self) -> u16 {
        self.tls_port
    }

    /// The private CA's certificate (PEM): the only root that verifies the server.
    pub fn ca_pem(&self) -> Vec<u8> {
        self.ca.clone()
    }

    /// Config lines with which another redis process (a sentinel) reaches this server over TLS:
    /// `tls-replication yes` and the test's certificates.
    pub fn tls_client_conf(&self) -> String {
        let path = |f: &str| self.dir.join(f).to_string_lossy().into_owned();
        format!(
            "tls-replication yes\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n",
            path("server.crt"),
            path("server.key"),
            path("ca.crt")
        )
    }
}

impl Drop for TlsRedisServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn openssl(dir: &Path, args: &str) {
    let status = Command::new("openssl")
        .args(args.split(' '))
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run openssl");
    assert!(status.success(), "openssl {args}");
}
