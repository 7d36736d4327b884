//! A TCP proxy between clients and Redis that injects network faults: latency, cut
//! connections, and black holes (half-open sockets: connections stay open, nothing passes).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy; stops when dropped.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    latency_ms: AtomicU64,
    black_hole: AtomicBool,
    /// Bumped to cut every open connection.
    generation: watch::Sender<u64>,
}

impl TcpProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> io::Result<TcpProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            latency_ms: AtomicU64::new(0),
            black_hole: AtomicBool::new(false),
            generation: watch::Sender::new(0),
        });
        let task = tokio::spawn(accept(listener, shared.clone()));
        Ok(TcpProxy { addr, shared, task })
    }

    /// `redis://<proxy address>`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Delays every chunk in both directions by this much.
    pub fn set_latency(&self, latency: Duration) {
        self.shared
            .latency_ms
            .store(latency.as_millis() as u64, Ordering::Relaxed);
    }

    /// While on, connections stay open but nothing passes (a half-open network).
    pub fn set_black_hole(&self, on: bool) {
        self.shared.black_hole.store(on, Ordering::Relaxed);
    }

    /// Closes every open connection at once (new ones are accepted).
    pub fn cut_all(&self) {
        self.shared.generation.send_modify(|g| *g += 1);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut_all();
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    while let Ok((client, _)) = listener.accept().await {
        let shared = shared.clone();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(shared.upstream).await else {
                return;
            };
            let mut cut = shared.generation.subscribe();
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            // The cut first: `cut_all` then `set_black_hole(false)` must never let bytes the
            // hole held reach the server after the cut (a real cut connection delivers
            // nothing more), whichever branch a loaded runtime finds ready first.
            tokio::select! {
                biased;
                _ = cut.changed() => {}
                _ = pipe(cr, sw, &shared) => {}
                _ = pipe(sr, cw, &shared) => {}
            }
        });
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: &Shared,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let latency = shared.latency_ms.load(Ordering::Relaxed);
        if latency > 0 {
            tokio::time::sleep(Duration::from_millis(latency)).await;
        }
        // A black hole holds the bytes: the peer waits for an answer that does not come
        // (until the hole closes, or the connection is cut).
        while shared.black_hole.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
