//! The tower scenario: an axum handler bare, locking itself (`acquire`/`release` in the
//! handler), and under `LockLayer`, under a small HTTP/1.1 keep-alive load generator (no client
//! library, so the client costs as little as possible).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::post;
use lock_runtime::{LockClient, LockOptions};
use lock_tower::LockLayer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::stats::{self, quantile};

/// One load run.
#[derive(Debug, Clone, Default)]
pub(crate) struct TowerRun {
    pub(crate) req_per_s: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) non_2xx: usize,
}

/// The three runs of one scenario.
#[derive(Debug, Clone, Default)]
pub(crate) struct TowerRuns {
    pub(crate) bare: TowerRun,
    pub(crate) manual: TowerRun,
    pub(crate) layer: TowerRun,
}

/// How the route is served.
pub(crate) enum Mode {
    /// No lock: the HTTP stack alone.
    Bare,
    /// The handler builds `stock:<id>` and calls `acquire` / `release` itself.
    Manual(LockClient),
    /// `LockLayer::new(locks, "stock:<id>")` around the bare handler.
    Layer(LockClient),
}

/// The longest a request waits for its lock, in every mode.
const WAIT: Duration = Duration::from_secs(10);

async fn handler() -> &'static str {
    "ok"
}

async fn locking_handler(
    State(locks): State<LockClient>,
    Path(id): Path<String>,
) -> Result<&'static str, axum::http::StatusCode> {
    let guard = locks
        .lock(format!("stock:{id}"))
        .acquire_with(LockOptions::new().wait(WAIT))
        .await
        .map_err(|_| axum::http::StatusCode::SERVICE_UNAVAILABLE)?;
    let body = handler().await;
    guard
        .release()
        .await
        .map_err(|_| axum::http::StatusCode::INTERNAL_SERVER_ERROR)?;
    Ok(body)
}

/// The client every locking mode of the scenario uses, its own.
pub(crate) async fn client(url: &str) -> LockClient {
    LockClient::builder(url)
        .prefix("bench-tower")
        .build()
        .await
        .expect("connect")
}

/// Serves the app on a free loopback port; returns its address.
async fn serve(app: Router) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

pub(crate) async fn app(mode: Mode) -> std::net::SocketAddr {
    let route = "/stock/{id}/reserve";
    let router = match mode {
        Mode::Bare => Router::new().route(route, post(handler)),
        Mode::Manual(locks) => Router::new()
            .route(route, post(locking_handler))
            .with_state(locks),
        Mode::Layer(locks) => Router::new()
            .route(route, post(handler))
            .route_layer(LockLayer::new(locks, "stock:<id>").wait(WAIT)),
    };
    serve(router).await
}

/// `connections` keep-alive connections post as fast as they can for `run`; `hot` sends every
/// request to one id, otherwise every request has its own id.
pub(crate) async fn load(
    addr: std::net::SocketAddr,
    connections: usize,
    run: Duration,
    hot: bool,
) -> TowerRun {
    let samples = Arc::new(Mutex::new(Vec::new()));
    let failures = Arc::new(Mutex::new(0usize));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..connections {
        let samples = samples.clone();
        let failures = failures.clone();
        tasks.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let mut buf = vec![0u8; 4096];
            let mut local = Vec::new();
            let mut n = 0u64;
            while start.elapsed() < run {
                n += 1;
                let id = if hot {
                    "hot".to_string()
                } else {
                    format!("{c}-{n}")
                };
                let req = format!(
                    "POST /stock/{id}/reserve HTTP/1.1\r\nhost: bench\r\ncontent-length: 0\r\n\r\n"
                );
                let t = Instant::now();
                stream.write_all(req.as_bytes()).await.unwrap();
                let status = read_response(&mut stream, &mut buf).await;
                local.push(t.elapsed());
                if !(200..300).contains(&status) {
                    *failures.lock().unwrap() += 1;
                }
            }
            samples.lock().unwrap().extend(local);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = start.elapsed();
    let mut s = std::mem::take(&mut *samples.lock().unwrap());
    let non_2xx = *failures.lock().unwrap();
    TowerRun {
        req_per_s: s.len() as f64 / elapsed.as_secs_f64(),
        p50_us: stats::us(quantile(&mut s, 0.5)),
        p99_us: stats::us(quantile(&mut s, 0.99)),
        non_2xx,
    }
}

/// Reads one HTTP/1.1 response with a `content-length`; returns its status.
async fn read_response(stream: &mut TcpStream, buf: &mut [u8]) -> u16 {
    let mut have = 0;
    loop {
        let n = stream.read(&mut buf[have..]).await.unwrap();
        assert!(n > 0, "server closed the connection");
        have += n;
        let Some(end) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let status: u16 = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while have < end + 4 + len {
            let n = stream.read(&mut buf[have..]).await.unwrap();
            assert!(n > 0, "server closed the connection");
            have += n;
        }
        return status;
    }
}

/// `lock-bench tower <url> <seconds> <rounds>`: the one-hot-id scenario alone against a server
/// of your own, the handler locking itself and `LockLayer` taking turns for `rounds` rounds,
/// one line per run and the median of each with their ratio (for comparing two builds of the
/// library run after run: `BENCHMARKS.md` has it once per run).
pub(crate) async fn tower_only(args: &[String]) {
    let [url, secs, rounds] = args else {
        panic!("usage: lock-bench tower <url> <seconds> <rounds>");
    };
    let run = Duration::from_secs_f64(secs.parse().expect("seconds"));
    let rounds: usize = rounds.parse().expect("rounds");
    let manual = app(Mode::Manual(client(url).await)).await;
    let layered = app(Mode::Layer(client(url).await)).await;
    let (mut manuals, mut layers) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let m = load(manual, 64, run, true).await.req_per_s;
        let l = load(layered, 64, run, true).await.req_per_s;
        println!("round {round}: handler locking itself {m:.0} req/s, LockLayer {l:.0} req/s");
        manuals.push(m);
        layers.push(l);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (m, l) = (median(&mut manuals), median(&mut layers));
    println!(
        "one hot id, 64 connections: handler locking itself {m:.0} req/s, LockLayer {l:.0} req/s, {:.2}x",
        l / m
    );
}
