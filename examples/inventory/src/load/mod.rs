//! The load driver: starts Redis (unless `REDIS_URL` is set), prepares the store (a SQLite
//! file in a temp dir of its own, or PostgreSQL at `DATABASE_URL`), starts the service
//! instances as separate processes, fires concurrent purchases and carts at them, and prints
//! what was sold — checked against the store's own rows. The table it prints is in
//! `table.rs`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use tokio::process::{Child, Command};

use crate::BoxError;
use crate::scrape::LockFigures;
use crate::service::{Cart, CartItem};
use crate::store::Store;

mod table;

use table::print_table;

const USAGE: &str =
    "usage: example-inventory [--no-lock] [--requests N] [--carts N] [--products N] \
[--stock N] [--instances N] [--in-flight N] [--stuck-after SECONDS] [--seed N]
environment: DATABASE_URL (postgres://…; default: a SQLite file in a temp dir), REDIS_URL";

#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub(crate) locked: bool,
    requests: usize,
    carts: usize,
    products: usize,
    stock: i64,
    instances: usize,
    /// A request not answered within this is counted as stuck (a deadlock, say).
    stuck_after: Duration,
    seed: Option<u64>,
    /// At most this many requests at once (as far as open files allow).
    in_flight: usize,
}

impl Config {
    /// Parses the command line; `Ok(None)` for `--help` (the usage is printed).
    pub(crate) fn parse(args: &[String]) -> Result<Option<Config>, BoxError> {
        let mut c = Config {
            locked: true,
            requests: 2000,
            carts: 500,
            products: 5,
            stock: 100,
            instances: 3,
            stuck_after: Duration::from_secs(30),
            seed: None,
            in_flight: 256,
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut num = || -> Result<u64, BoxError> {
                let v = it.next().ok_or(format!("{arg} needs a value"))?;
                Ok(v.parse()
                    .map_err(|_| format!("{arg}: {v:?} is not a number"))?)
            };
            match arg.as_str() {
                "--no-lock" => c.locked = false,
                "--requests" => c.requests = bounded(num()?, 1_000_000)?,
                "--carts" => c.carts = bounded(num()?, 1_000_000)?,
                "--products" => c.products = bounded(num()?, 10_000)?.max(1),
                "--stock" => c.stock = bounded(num()?, 1_000_000_000)? as i64,
                "--instances" => c.instances = bounded(num()?, 64)?.max(1),
                "--stuck-after" => {
                    c.stuck_after = Duration::from_secs(bounded(num()?, 3600)?.max(1) as u64)
                }
                "--seed" => c.seed = Some(num()?),
                "--in-flight" => c.in_flight = bounded(num()?, 1_000_000)?.max(1),
                "-h" | "--help" => {
                    println!("{USAGE}");
                    return Ok(None);
                }
                other => return Err(format!("unknown argument {other:?} (try --help)").into()),
            }
        }
        Ok(Some(c))
    }
}

fn bounded(n: u64, max: u64) -> Result<usize, BoxError> {
    if n > max {
        return Err(format!("{n} is too large (at most {max})").into());
    }
    Ok(n as usize)
}

/// What the run found; the process fails if, with the lock on, either is not 0.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Verdict {
    pub(crate) oversold: u64,
    pub(crate) stuck: usize,
}

/// One request of the load.
#[derive(Debug, Clone)]
enum Job {
    Purchase(String),
    Checkout(Cart),
}

/// How one request ended.
#[derive(Debug)]
enum Outcome {
    Answered(u16, String),
    /// Not answered within `stuck_after`.
    Stuck,
    /// The connection failed.
    Failed,
}

/// Where one purchase's time went: `lock` (arrival at the service to the handler: the lock
/// layer's wait), `store` (the load and the save's transaction), `rest` (the latency the
/// driver measured minus both: connecting, HTTP, the 1 ms think, scheduling).
#[derive(Debug, Clone, Copy)]
struct Split {
    lock: Duration,
    store: Duration,
    rest: Duration,
}

/// The answers to one kind of request.
#[derive(Debug, Default)]
struct Tally {
    sent: usize,
    sold: usize,
    out_of_stock: usize,
    busy: usize,
    stale: usize,
    /// 500 from the store, 503 from the lock layer, anything else unexpected.
    errors: usize,
    stuck: usize,
    latencies: Vec<Duration>,
    /// The answers that carried the service's `Server-Timing` (the purchase handler's).
    splits: Vec<Split>,
}

impl Tally {
    /// Counts one request; `timing` is the service's (lock wait, store) when it sent them.
    fn count(
        &mut self,
        outcome: &Outcome,
        latency: Duration,
        timing: Option<(Duration, Duration)>,
    ) {
        if let Some((lock, store)) = timing {
            // Both were measured inside the service, within the driver's `latency`.
            let rest = latency.saturating_sub(lock + store);
            self.splits.push(Split { lock, store, rest });
        }
        self.sent += 1;
        match outcome {
            Outcome::Answered(200, _) => self.sold += 1,
            Outcome::Answered(409, body) if body == "out of stock" => self.out_of_stock += 1,
            Outcome::Answered(409, body) if body == "stale fencing token" => self.stale += 1,
            Outcome::Answered(423, _) => self.busy += 1,
            Outcome::Stuck => self.stuck += 1,
            Outcome::Answered(..) | Outcome::Failed => self.errors += 1,
        }
        if !matches!(outcome, Outcome::Stuck) {
            self.latencies.push(latency);
        }
    }
}

/// One product as the store sees it at the end.
#[derive(Debug)]
struct Account {
    sku: String,
    /// Units in the `inventory_sales` rows.
    sold: i64,
    left: i64,
}

/// A temp dir for the SQLite file, removed when dropped.
#[derive(Debug)]
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<TempDir> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path =
            std::env::temp_dir().join(format!("inventory-demo-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&path)?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Starts Redis (if needed), prepares the store, starts the instances, runs the load, prints
/// the table.
pub(crate) async fn drive(config: Config) -> Result<Verdict, BoxError> {
    let started = Instant::now();
    let (_redis, redis_url) = lock_tests::local_redis();
    let (_sqlite_dir, database_url) = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => (None, url),
        _ => {
            let dir = TempDir::new()?;
            let url = format!("sqlite://{}", dir.0.join("inventory.db").display());
            (Some(dir), url)
        }
    };
    let store = Store::connect(&database_url, 2, true).await?;
    let products: Vec<String> = (1..=config.products).map(|i| i.to_string()).collect();
    store.reset(&products, config.stock).await?;
    let (children, addrs) = start_instances(&config, &redis_url, &database_url).await?;

    let mut rng = Rng::new(config.seed);
    let mut jobs: Vec<Job> = (0..config.requests)
        .map(|i| Job::Purchase(products[i % products.len()].clone()))
        .chain((0..config.carts).map(|_| Job::Checkout(random_cart(&mut rng, &products))))
        .collect();
    rng.shuffle(&mut jobs);
    let in_flight = jobs.len().min(config.in_flight).clamp(1, fd_budget());
    print_banner(&config, in_flight, &database_url);

    let (purchases, carts, load_time) = run_load(&config, jobs, &addrs, in_flight).await?;
    let mut figures = LockFigures::default();
    for addr in &addrs {
        if let Ok(Answer {
            status: 200, body, ..
        }) = request(*addr, "GET", "/metrics", None).await
        {
            figures.add(&body);
        }
    }
    for mut child in children {
        let _ = child.kill().await;
    }

    let accounts = accounts(&store).await?;
    let oversold: u64 = accounts
        .iter()
        .map(|a| {
            let taken = config.stock - a.left;
            ((a.sold - taken).max(0) + (-a.left).max(0)) as u64
        })
        .sum();
    let verdict = Verdict {
        oversold,
        stuck: purchases.stuck + carts.stuck,
    };
    print_table(
        &config,
        &purchases,
        &carts,
        &accounts,
        verdict,
        figures,
        (load_time, started.elapsed()),
    );
    Ok(verdict)
}

/// The service instances, each a process of this binary (`serve`) on a free port, once they
/// answer their health check.
async fn start_instances(
    config: &Config,
    redis_url: &str,
    database_url: &str,
) -> Result<(Vec<Child>, Vec<SocketAddr>), BoxError> {
    let mode = if config.locked { "lock" } else { "nolock" };
    let exe = std::env::current_exe()?;
    let mut children: Vec<Child> = Vec::new();
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for _ in 0..config.instances {
        let port = lock_tests::free_port();
        let child = Command::new(&exe)
            .args(["serve", redis_url, database_url, &port.to_string(), mode])
            .stdin(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        children.push(child);
        addrs.push(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    for addr in &addrs {
        wait_healthy(*addr).await?;
    }
    Ok((children, addrs))
}

/// The run's first lines: the load, the instances, the stock, the protection, the store.
fn print_banner(config: &Config, in_flight: usize, database_url: &str) {
    let load = if config.carts > 0 {
        format!(
            "{} purchases and {} carts (2-4 products)",
            config.requests, config.carts
        )
    } else {
        format!("{} purchases", config.requests)
    };
    let protection = match (config.locked, config.carts > 0) {
        (true, true) => {
            "\x1b[32mLockLayer + MultiLockLayer on\x1b[0m (names stock:<id>, fenced saves)"
        }
        (true, false) => "\x1b[32mLockLayer on\x1b[0m (name stock:<id>, fenced saves)",
        (false, _) => "\x1b[31mno lock\x1b[0m (--no-lock: no lock, no fence)",
    };
    println!(
        "\n\x1b[1minventory demo\x1b[0m: {load} over HTTP, {in_flight} in flight, to {} instances (separate processes); {} products x {} in stock; {protection}",
        config.instances, config.products, config.stock,
    );
    println!("  store: {}", Store::describe(database_url));
}

/// Sends every job, at most `in_flight` at once, spread over the instances; the answers
/// tallied, purchases and carts apart, and the time the load took.
async fn run_load(
    config: &Config,
    jobs: Vec<Job>,
    addrs: &[SocketAddr],
    in_flight: usize,
) -> Result<(Tally, Tally, Duration), BoxError> {
    let total = jobs.len();
    let done = Arc::new(AtomicUsize::new(0));
    let progress = tokio::spawn(progress_bar(done.clone(), total));
    let gate = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let load_started = Instant::now();
    let mut tasks = Vec::with_capacity(total);
    for (i, job) in jobs.into_iter().enumerate() {
        let addr = addrs[i % addrs.len()];
        let gate = gate.clone();
        let done = done.clone();
        let stuck_after = config.stuck_after;
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await;
            let t = Instant::now();
            let (path, body) = match &job {
                Job::Purchase(sku) => (format!("/stock/{sku}/purchase"), None),
                Job::Checkout(cart) => ("/checkout".to_owned(), serde_json::to_vec(cart).ok()),
            };
            let (outcome, timing) =
                match tokio::time::timeout(stuck_after, request(addr, "POST", &path, body)).await {
                    Ok(Ok(answer)) => {
                        (Outcome::Answered(answer.status, answer.body), answer.timing)
                    }
                    Ok(Err(_)) => (Outcome::Failed, None),
                    Err(_) => (Outcome::Stuck, None),
                };
            let latency = t.elapsed();
            done.fetch_add(1, Ordering::Relaxed);
            (matches!(job, Job::Checkout(_)), outcome, latency, timing)
        }));
    }
    let (mut purchases, mut carts) = (Tally::default(), Tally::default());
    for task in tasks {
        let (is_cart, outcome, latency, timing) = task.await?;
        let tally = if is_cart { &mut carts } else { &mut purchases };
        tally.count(&outcome, latency, timing);
    }
    let load_time = load_started.elapsed();
    progress.await?;
    Ok((purchases, carts, load_time))
}

/// The store's own view: per product, what the sales rows say was sold against how far the
/// stock went down. Every unit sold but not taken off the stock was sold twice.
async fn accounts(store: &Store) -> Result<Vec<Account>, BoxError> {
    let accounts: Vec<Account> = store
        .account()
        .await?
        .into_iter()
        .map(|(sku, sold, left)| Account { sku, sold, left })
        .collect();
    store.close().await;
    Ok(accounts)
}

/// 2 to 4 different products (fewer if there are fewer), in random order, 1 or 2 of each.
fn random_cart(rng: &mut Rng, products: &[String]) -> Cart {
    let mut skus: Vec<&String> = products.iter().collect();
    rng.shuffle(&mut skus);
    let len = (2 + rng.below(3)).min(skus.len());
    Cart {
        items: skus[..len]
            .iter()
            .map(|sku| CartItem {
                sku: (*sku).clone(),
                qty: 1 + rng.below(2) as i64,
            })
            .collect(),
    }
}

/// A small pseudo-random generator (splitmix64): carts and the order of the requests.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: Option<u64>) -> Rng {
        Rng(seed.unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        }))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform enough in `0..n` for a demo; 0 when `n` is 0.
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

async fn wait_healthy(addr: SocketAddr) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(Ok(Answer { status: 200, .. })) = tokio::time::timeout(
            Duration::from_secs(1),
            request(addr, "GET", "/health", None),
        )
        .await
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("instance at {addr} did not come up").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An answer of the service.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: String,
    /// The service's `Server-Timing`, `lock;dur=<ms>, store;dur=<ms>` (purchases only):
    /// (lock wait, store).
    timing: Option<(Duration, Duration)>,
}

/// The (lock, store) durations of a `Server-Timing` header value such as
/// `lock;dur=12.5, store;dur=3.25` (milliseconds); `None` unless both are there.
fn parse_server_timing(value: &str) -> Option<(Duration, Duration)> {
    let (mut lock, mut store) = (None, None);
    for metric in value.split(',') {
        let mut params = metric.trim().split(';');
        let name = params.next()?.trim();
        let ms = params
            .find_map(|p| p.trim().strip_prefix("dur="))
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|ms| ms.is_finite() && *ms >= 0.0)?;
        let d = Duration::from_secs_f64(ms / 1000.0);
        match name {
            "lock" => lock = Some(d),
            "store" => store = Some(d),
            _ => {}
        }
    }
    Some((lock?, store?))
}

/// One request on its own HTTP/1.1 connection (a minimal hyper client); `json` is the body.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    json: Option<Vec<u8>>,
) -> Result<Answer, BoxError> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    if json.is_some() {
        request = request.header("content-type", "application/json");
    }
    let request = request.body(Full::new(Bytes::from(json.unwrap_or_default())))?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let timing = response
        .headers()
        .get("server-timing")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_server_timing);
    let body = response.into_body().collect().await?.to_bytes();
    Ok(Answer {
        status,
        body: String::from_utf8_lossy(&body).trim().to_owned(),
        timing,
    })
}

/// How many connections we can keep open at once, judging by the open-files limit.
fn fd_budget() -> usize {
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|n| n.parse::<usize>().ok())
        })
        .unwrap_or(1024);
    limit.saturating_sub(128).max(64)
}

async fn progress_bar(done: Arc<AtomicUsize>, total: usize) {
    const WIDTH: usize = 40;
    let mut stderr = std::io::stderr();
    loop {
        let n = done.load(Ordering::Relaxed);
        let filled = (n * WIDTH).checked_div(total).unwrap_or(WIDTH).min(WIDTH);
        let _ = write!(
            stderr,
            "\r  \x1b[36m[{}{}]\x1b[0m {n}/{total} requests",
            "#".repeat(filled),
            ".".repeat(WIDTH - filled)
        );
        let _ = stderr.flush();
        if n >= total {
            let _ = writeln!(stderr);
            return;
        }
        tokio::time::sleep(Duration::from_millis(80)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_timing_header_is_read_as_lock_wait_and_store() {
        let ms = |ms: f64| Duration::from_secs_f64(ms / 1000.0);
        assert_eq!(
            parse_server_timing("lock;dur=12.5, store;dur=3.25"),
            Some((ms(12.5), ms(3.25)))
        );
        // Any order, other metrics and parameters ignored.
        assert_eq!(
            parse_server_timing("store;desc=\"db\";dur=1,app;dur=9, lock;dur=0.000"),
            Some((Duration::ZERO, ms(1.0)))
        );
        assert_eq!(parse_server_timing("lock;dur=1"), None);
        assert_eq!(parse_server_timing("lock;dur=-1, store;dur=1"), None);
        assert_eq!(parse_server_timing(""), None);
    }
}
