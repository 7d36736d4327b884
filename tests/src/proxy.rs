//! A TCP proxy between clients and Redis that injects network faults: latency, cut
//! connections, black holes (half-open sockets: connections stay open, nothing passes), and
//! partitions of chosen peers ([`TcpProxy::isolate`]: only connections whose source matches go
//! silent, the others pass).

use std::io;
use std::net::{IpAddr, SocketAddr};
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
    /// The peers cut off now ([`TcpProxy::isolate`]), if any.
    isolated: watch::Sender<Option<Peers>>,
}

/// Which peers (by their source address) a partition cuts off.
#[derive(Clone)]
pub struct Peers(Arc<dyn Fn(SocketAddr) -> bool + Send + Sync>);

impl Peers {
    /// The peers for which `matches` says true (it is asked once per connection when the
    /// partition starts, and for each connection accepted while it lasts).
    pub fn matching(matches: impl Fn(SocketAddr) -> bool + Send + Sync + 'static) -> Peers {
        Peers(Arc::new(matches))
    }

    /// The peers whose source IP address is one of `ips` (a process can pick its source
    /// address on loopback, as redis-server does with `bind-source-addr`).
    pub fn from_ips(ips: impl IntoIterator<Item = IpAddr>) -> Peers {
        let ips: Vec<IpAddr> = ips.into_iter().collect();
        Peers::matching(move |peer| ips.contains(&peer.ip()))
    }

    /// The connections opened by process `pid` (Linux: the peer's socket is looked up in
    /// `/proc/net/tcp` and among the process's descriptors, so one worker process can be cut
    /// off while the others, from the same address, pass).
    pub fn of_process(pid: u32) -> Peers {
        Peers::matching(move |peer| socket_inodes(pid, peer).into_iter().any(|i| owns(pid, i)))
    }

    fn contains(&self, peer: SocketAddr) -> bool {
        (self.0)(peer)
    }
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Peers(..)")
    }
}

impl TcpProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> io::Result<TcpProxy> {
        TcpProxy::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), upstream).await
    }

    /// Listens on `listen` (a port chosen beforehand, e.g. one a Redis node announces) and
    /// forwards to `upstream`.
    pub async fn start_on(listen: SocketAddr, upstream: SocketAddr) -> io::Result<TcpProxy> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            latency_ms: AtomicU64::new(0),
            black_hole: AtomicBool::new(false),
            generation: watch::Sender::new(0),
            isolated: watch::Sender::new(None),
        });
        let task = tokio::spawn(accept(listener, shared.clone()));
        Ok(TcpProxy { addr, shared, task })
    }

    /// `redis://<proxy address>`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
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

    /// A partition of `peers` from the upstream: their open connections go silent at once
    /// (nothing more passes either way), and connections they open while it lasts are accepted
    /// but never reach the upstream, as behind a network that drops their packets. Other peers
    /// pass as before. [`heal`](TcpProxy::heal) ends it.
    pub fn isolate(&self, peers: Peers) {
        self.shared.isolated.send_replace(Some(peers));
    }

    /// Ends the partition of [`isolate`](TcpProxy::isolate): the connections it silenced are
    /// closed (their peers reconnect, as after a partition that outlived their timeouts), new
    /// ones pass.
    pub fn heal(&self) {
        self.shared.isolated.send_replace(None);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut_all();
        // Connections a partition silenced wait for its end: close them too.
        self.heal();
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    while let Ok((client, peer)) = listener.accept().await {
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut isolated = shared.isolated.subscribe();
            if is_isolated(&isolated.borrow_and_update(), peer) {
                // Accepted (the kernel did), never forwarded; closed when the partition ends.
                until_healed(&mut isolated, peer).await;
                drop(client);
                return;
            }
            let Ok(server) = TcpStream::connect(shared.upstream).await else {
                return;
            };
            let mut cut = shared.generation.subscribe();
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            // The cut first: `cut_all` then `set_black_hole(false)` must never let bytes the
            // hole held reach the server after the cut (a real cut connection delivers
            // nothing more), whichever branch a loaded runtime finds ready first.
            let partitioned = tokio::select! {
                biased;
                _ = cut.changed() => false,
                () = partition_starts(&mut isolated, peer) => true,
                _ = pipe(&mut cr, &mut sw, &shared) => false,
                _ = pipe(&mut sr, &mut cw, &shared) => false,
            };
            if partitioned {
                // Silent, both sockets open, until the partition ends; then closed.
                until_healed(&mut isolated, peer).await;
            }
        });
    }
}

/// The inodes of the IPv4 TCP sockets bound to `local`, from the network namespace of `pid`
/// (more than one when the port was used before: a closed socket lingers in `TIME_WAIT`, with
/// inode 0).
fn socket_inodes(pid: u32, local: SocketAddr) -> Vec<u64> {
    let SocketAddr::V4(local) = local else {
        return Vec::new();
    };
    // `/proc/net/tcp` writes the address as the in-memory u32 in hex, the port in hex.
    let wanted = format!(
        "{:08X}:{:04X}",
        u32::from_ne_bytes(local.ip().octets()),
        local.port()
    );
    let Ok(table) = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")) else {
        return Vec::new();
    };
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(1) != Some(&wanted.as_str()) {
                return None;
            }
            fields.get(9)?.parse().ok().filter(|&inode| inode != 0)
        })
        .collect()
}

/// Whether process `pid` has the socket `inode` open.
fn owns(pid: u32, inode: u64) -> bool {
    let wanted = format!("socket:[{inode}]");
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == wanted.as_str())
        })
    })
}

fn is_isolated(peers: &Option<Peers>, peer: SocketAddr) -> bool {
    peers.as_ref().is_some_and(|p| p.contains(peer))
}

/// Waits while a partition covers `peer`.
async fn until_healed(isolated: &mut watch::Receiver<Option<Peers>>, peer: SocketAddr) {
    while is_isolated(&isolated.borrow_and_update(), peer) {
        if isolated.changed().await.is_err() {
            return;
        }
    }
}

/// Resolves when a partition starts to cover `peer` (never, if the proxy is gone).
async fn partition_starts(isolated: &mut watch::Receiver<Option<Peers>>, peer: SocketAddr) {
    loop {
        if isolated.changed().await.is_err() {
            return std::future::pending().await;
        }
        if is_isolated(&isolated.borrow_and_update(), peer) {
            return;
        }
    }
}

async fn pipe(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
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
