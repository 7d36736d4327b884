//! A TCP proxy between clients and Redis that injects network faults: latency, cut
//! connections, and black holes (half-open sockets: connections stay open, nothing passes).
//!
//! Faults can also be aimed at one class of peer: every loopback address (`127.0.0.0/8`) is
//! local on Linux, so peers that connect from their own source address (a replica's
//! `bind-source-addr`, a sentinel's) can be black-holed one way or both ways, or cut, while the
//! others pass ([`set_black_hole_from`](TcpProxy::set_black_hole_from),
//! [`cut_from`](TcpProxy::cut_from)). And a partition can cut off chosen peers by any rule
//! ([`isolate`](TcpProxy::isolate) with [`Peers`]: by source address, or the connections of one
//! process): their connections go silent, the others pass.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// Per source address: whether bytes toward the upstream, and toward the peer, are held.
    held_from: Mutex<HashMap<IpAddr, (bool, bool)>>,
    /// Per source address: the generation of its last cut (its connections opened before it
    /// close).
    cut_from: Mutex<HashMap<IpAddr, u64>>,
    /// The generation of the last `cut_all`.
    cut_all_at: AtomicU64,
    /// Source addresses of the connections accepted so far.
    sources: Mutex<Vec<IpAddr>>,
    /// The peers cut off now ([`TcpProxy::isolate`]), if any.
    isolated: watch::Sender<Option<Peers>>,
}

/// Which peers (by their address, and when their connection was accepted) a partition cuts
/// off.
#[derive(Clone)]
pub struct Peers(Arc<dyn Fn(SocketAddr, Instant) -> bool + Send + Sync>);

impl Peers {
    /// The peers for which `matches` says true (it is asked once per connection when the
    /// partition starts, and for each connection accepted while it lasts).
    pub fn matching(matches: impl Fn(SocketAddr) -> bool + Send + Sync + 'static) -> Peers {
        Peers(Arc::new(move |peer, _| matches(peer)))
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
    ///
    /// The process's sockets are read in one scan (its descriptors, then the TCP table once),
    /// kept, and read again only for a connection accepted after the last scan: when a
    /// partition starts, every open connection through the proxy asks at once, and a scan per
    /// connection (the whole table each time) held the proxy's runtime long enough, on a loaded
    /// machine, to stall every client's traffic through it for tens of seconds.
    pub fn of_process(pid: u32) -> Peers {
        let scanned: Mutex<Option<(Instant, std::collections::HashSet<SocketAddr>)>> =
            Mutex::new(None);
        Peers(Arc::new(move |peer, accepted| {
            let mut scanned = lock(&scanned);
            match &*scanned {
                // Every socket of the process open when the connection was accepted was seen.
                Some((at, addrs)) if *at > accepted => addrs.contains(&peer),
                _ => {
                    // Stamped before the scan: a socket opened during it may be missed, so it
                    // counts as seen only by a later scan.
                    let at = Instant::now();
                    let addrs = local_addrs(pid);
                    let found = addrs.contains(&peer);
                    *scanned = Some((at, addrs));
                    found
                }
            }
        }))
    }

    fn contains(&self, peer: SocketAddr, accepted: Instant) -> bool {
        (self.0)(peer, accepted)
    }
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Peers(..)")
    }
}

impl Shared {
    /// Whether a chunk from a peer at `source` is held: toward the upstream if `up`.
    fn held(&self, source: IpAddr, up: bool) -> bool {
        self.black_hole.load(Ordering::Relaxed)
            || lock(&self.held_from)
                .get(&source)
                .is_some_and(|&(to_up, to_peer)| if up { to_up } else { to_peer })
    }

    /// Whether a connection from `source` opened at generation `opened` has been cut.
    fn is_cut(&self, source: IpAddr, opened: u64) -> bool {
        self.cut_all_at.load(Ordering::Relaxed) > opened
            || lock(&self.cut_from)
                .get(&source)
                .is_some_and(|&at| at > opened)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl TcpProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> io::Result<TcpProxy> {
        TcpProxy::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), upstream).await
    }

    /// Listens on `listen` (a port chosen beforehand, e.g. one a Redis node announces) and
    /// forwards to `upstream`.
    pub async fn start_on(listen: SocketAddr, upstream: SocketAddr) -> io::Result<TcpProxy> {
        TcpProxy::start_with(TcpListener::bind(listen).await?, upstream)
    }

    /// Forwards what `listener` accepts to `upstream`: a port bound before the upstream was
    /// known (announced by a node started after it), so nobody else can take it meanwhile.
    pub fn start_with(listener: TcpListener, upstream: SocketAddr) -> io::Result<TcpProxy> {
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            latency_ms: AtomicU64::new(0),
            black_hole: AtomicBool::new(false),
            generation: watch::Sender::new(0),
            held_from: Mutex::new(HashMap::new()),
            cut_from: Mutex::new(HashMap::new()),
            cut_all_at: AtomicU64::new(0),
            sources: Mutex::new(Vec::new()),
            isolated: watch::Sender::new(None),
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
        self.shared.generation.send_modify(|g| {
            *g += 1;
            self.shared.cut_all_at.store(*g, Ordering::Relaxed);
        });
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// For connections from `source` (their peer address): while `to_upstream` is on, nothing
    /// they send reaches the upstream; while `to_peer` is on, nothing the upstream answers
    /// reaches them (both off: they pass again, with what was held). Connections stay open,
    /// as in a partition that TCP has not noticed yet; other sources pass.
    pub fn set_black_hole_from(&self, source: IpAddr, to_upstream: bool, to_peer: bool) {
        let mut held = lock(&self.shared.held_from);
        if to_upstream || to_peer {
            held.insert(source, (to_upstream, to_peer));
        } else {
            held.remove(&source);
        }
    }

    /// Closes every open connection from `source` (new ones are accepted), dropping what a
    /// black hole held for them.
    pub fn cut_from(&self, source: IpAddr) {
        self.shared.generation.send_modify(|g| {
            *g += 1;
            lock(&self.shared.cut_from).insert(source, *g);
        });
    }

    /// The source addresses of every connection accepted so far, in order (repeats included).
    pub fn sources(&self) -> Vec<IpAddr> {
        lock(&self.shared.sources).clone()
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
        let accepted = Instant::now();
        let shared = shared.clone();
        let source = peer.ip();
        lock(&shared.sources).push(source);
        tokio::spawn(async move {
            let mut cut = shared.generation.subscribe();
            let opened = *cut.borrow_and_update();
            let mut isolated = shared.isolated.subscribe();
            if is_isolated(&isolated.borrow_and_update(), peer, accepted) {
                // Accepted (the kernel did), never forwarded; closed when the partition ends.
                until_healed(&mut isolated, peer, accepted).await;
                drop(client);
                return;
            }
            let Ok(server) = TcpStream::connect(shared.upstream).await else {
                return;
            };
            // As Redis does on its own sockets: no Nagle delay on small writes (a proxy that
            // waits for the peer's delayed ACK adds tens of milliseconds to each round trip).
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            let up = pipe(cr, sw, &shared, source, true);
            let down = pipe(sr, cw, &shared, source, false);
            tokio::pin!(up, down);
            // The cut first: `cut_all` then `set_black_hole(false)` must never let bytes the
            // hole held reach the server after the cut (a real cut connection delivers
            // nothing more), whichever branch a loaded runtime finds ready first.
            let partitioned = loop {
                tokio::select! {
                    biased;
                    changed = cut.changed() => {
                        if changed.is_err() || shared.is_cut(source, opened) {
                            break false;
                        }
                    }
                    () = partition_starts(&mut isolated, peer, accepted) => break true,
                    _ = &mut up => break false,
                    _ = &mut down => break false,
                }
            };
            if partitioned {
                // Silent, both sockets open (the pipes are not polled), until the partition
                // ends; then closed.
                until_healed(&mut isolated, peer, accepted).await;
            }
        });
    }
}

/// The local addresses of process `pid`'s IPv4 TCP sockets: the inodes of its socket
/// descriptors, then those inodes' addresses in the TCP table of its network namespace.
fn local_addrs(pid: u32) -> std::collections::HashSet<SocketAddr> {
    let inodes: std::collections::HashSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| {
            let target = std::fs::read_link(fd.path()).ok()?;
            let target = target.to_str()?;
            target
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect();
    let Ok(table) = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")) else {
        return Default::default();
    };
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let inode: u64 = fields.get(9)?.parse().ok()?;
            if inode == 0 || !inodes.contains(&inode) {
                return None;
            }
            // `/proc/net/tcp` writes the address as the in-memory u32 in hex, the port in hex.
            let (ip, port) = fields.get(1)?.split_once(':')?;
            let ip = u32::from_str_radix(ip, 16).ok()?.to_ne_bytes();
            let port = u16::from_str_radix(port, 16).ok()?;
            Some(SocketAddr::from((ip, port)))
        })
        .collect()
}

fn is_isolated(peers: &Option<Peers>, peer: SocketAddr, accepted: Instant) -> bool {
    peers.as_ref().is_some_and(|p| p.contains(peer, accepted))
}

/// Waits while a partition covers `peer`.
async fn until_healed(
    isolated: &mut watch::Receiver<Option<Peers>>,
    peer: SocketAddr,
    accepted: Instant,
) {
    while is_isolated(&isolated.borrow_and_update(), peer, accepted) {
        if isolated.changed().await.is_err() {
            return;
        }
    }
}

/// Resolves when a partition starts to cover `peer` (never, if the proxy is gone).
async fn partition_starts(
    isolated: &mut watch::Receiver<Option<Peers>>,
    peer: SocketAddr,
    accepted: Instant,
) {
    loop {
        if isolated.changed().await.is_err() {
            return std::future::pending().await;
        }
        if is_isolated(&isolated.borrow_and_update(), peer, accepted) {
            return;
        }
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: &Shared,
    source: IpAddr,
    up: bool,
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
        while shared.held(source, up) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
