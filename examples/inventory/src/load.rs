//! The load driver: starts Redis (unless `REDIS_URL` is set) and the service instances as
//! separate processes, fires concurrent purchases at them and prints what was sold.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use tokio::process::{Child, Command};

use crate::BoxError;
use crate::service::{fence_key, sold_key, stock_key};

#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub(crate) locked: bool,
    requests: usize,
    products: usize,
    stock: i64,
    instances: usize,
}

impl Config {
    pub(crate) fn parse(args: &[String]) -> Result<Config, BoxError> {
        let mut c = Config {
            locked: true,
            requests: 2000,
            products: 5,
            stock: 100,
            instances: 3,
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut num = || -> Result<usize, BoxError> {
                let v = it.next().ok_or(format!("{arg} needs a value"))?;
                Ok(v.parse()
                    .map_err(|_| format!("{arg}: {v:?} is not a number"))?)
            };
            match arg.as_str() {
                "--no-lock" => c.locked = false,
                "--requests" => c.requests = num()?,
                "--products" => c.products = num()?.max(1),
                "--stock" => c.stock = num()? as i64,
                "--instances" => c.instances = num()?.max(1),
                "-h" | "--help" => {
                    println!(
                        "usage: example-inventory [--no-lock] [--requests N] [--products N] [--stock N] [--instances N]"
                    );
                    std::process::exit(0);
                }
                other => return Err(format!("unknown argument {other:?} (try --help)").into()),
            }
        }
        Ok(c)
    }
}

#[derive(Default)]
struct Tally {
    sold: usize,
    out_of_stock: usize,
    stale: usize,
    busy: usize,
    unavailable: usize,
    errors: usize,
    latencies: Vec<Duration>,
}

/// Starts Redis (if needed) and the instances, runs the load, prints the table; returns the
/// number of units oversold.
pub(crate) async fn drive(config: Config) -> Result<u64, BoxError> {
    let started = Instant::now();
    let (_redis, url) = lock_tests::local_redis();
    let mut redis = ConnectionManager::new(redis::Client::open(url.as_str())?).await?;
    let products: Vec<String> = (1..=config.products).map(|i| format!("p{i}")).collect();
    for id in &products {
        let () = redis.set(stock_key(id), config.stock).await?;
        let () = redis.del(&[fence_key(id), sold_key(id)]).await?;
    }

    let mode = if config.locked { "lock" } else { "nolock" };
    let exe = std::env::current_exe()?;
    let mut children: Vec<Child> = Vec::new();
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for _ in 0..config.instances {
        let port = lock_tests::free_port();
        let child = Command::new(&exe)
            .args(["serve", &url, &port.to_string(), mode])
            .stdin(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        children.push(child);
        addrs.push(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    for addr in &addrs {
        wait_healthy(*addr).await?;
    }

    let in_flight = config.requests.min(fd_budget());
    println!(
        "\n\x1b[1minventory demo\x1b[0m: {} purchase requests over HTTP, {} in flight, to {} instances (separate processes); {} products x {} in stock; {}",
        config.requests,
        in_flight,
        config.instances,
        config.products,
        config.stock,
        if config.locked {
            "\x1b[32mLockLayer on\x1b[0m (key stock:<id>, fenced saves)"
        } else {
            "\x1b[31mno lock\x1b[0m (--no-lock)"
        }
    );

    let done = Arc::new(AtomicUsize::new(0));
    let progress = tokio::spawn(progress_bar(done.clone(), config.requests));
    let gate = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let load_started = Instant::now();
    let mut tasks = Vec::with_capacity(config.requests);
    for i in 0..config.requests {
        let addr = addrs[i % addrs.len()];
        let path = format!("/stock/{}/purchase", products[i % products.len()]);
        let gate = gate.clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await;
            let t = Instant::now();
            let status = post_purchase(addr, &path).await;
            done.fetch_add(1, Ordering::Relaxed);
            (status, t.elapsed())
        }));
    }
    let mut tally = Tally::default();
    for task in tasks {
        let (status, latency) = task.await?;
        tally.latencies.push(latency);
        match status {
            Ok((200, _)) => tally.sold += 1,
            Ok((409, body)) if body == "out of stock" => tally.out_of_stock += 1,
            Ok((409, _)) => tally.stale += 1,
            Ok((423, _)) => tally.busy += 1,
            Ok((503, _)) => tally.unavailable += 1,
            _ => tally.errors += 1,
        }
    }
    let load_time = load_started.elapsed();
    progress.await?;
    drop(children);

    // The store's own view: units sold per product against what was in stock.
    let mut per_product = BTreeMap::new();
    let mut oversold = 0u64;
    for id in &products {
        let sold: Option<i64> = redis.get(sold_key(id)).await?;
        let left: Option<i64> = redis.get(stock_key(id)).await?;
        let sold = sold.unwrap_or(0);
        oversold += (sold - config.stock).max(0) as u64;
        per_product.insert(id.clone(), (sold, left.unwrap_or(0)));
    }
    print_table(
        &config,
        &tally,
        &per_product,
        oversold,
        load_time,
        started.elapsed(),
    );
    Ok(oversold)
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

async fn wait_healthy(addr: SocketAddr) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(Ok((200, _))) =
            tokio::time::timeout(Duration::from_secs(1), request(addr, "GET", "/health")).await
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("instance at {addr} did not come up").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn post_purchase(addr: SocketAddr, path: &str) -> Result<(u16, String), BoxError> {
    request(addr, "POST", path).await
}

/// One request on its own HTTP/1.1 connection (a minimal hyper client).
async fn request(addr: SocketAddr, method: &str, path: &str) -> Result<(u16, String), BoxError> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .body(Empty::<Bytes>::new())?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).trim().to_owned()))
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

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn print_table(
    config: &Config,
    tally: &Tally,
    per_product: &BTreeMap<String, (i64, i64)>,
    oversold: u64,
    load_time: Duration,
    total_time: Duration,
) {
    let mut latencies = tally.latencies.clone();
    latencies.sort_unstable();
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
    let (green, red, bold, reset) = ("\x1b[32m", "\x1b[31m", "\x1b[1m", "\x1b[0m");
    let oversold_cell = if oversold == 0 {
        format!("{green}0{reset}")
    } else {
        format!("{red}{oversold}{reset}")
    };
    let rows = [
        ("sold (200)", tally.sold.to_string()),
        ("out of stock (409)", tally.out_of_stock.to_string()),
        ("busy after wait (423)", tally.busy.to_string()),
        ("stale token refused (409)", tally.stale.to_string()),
        ("unavailable (503)", tally.unavailable.to_string()),
        ("other errors", tally.errors.to_string()),
        (
            "in stock at start",
            (config.stock * config.products as i64).to_string(),
        ),
        ("oversold", oversold_cell),
        ("latency p50", ms(percentile(&latencies, 0.50))),
        ("latency p99", ms(percentile(&latencies, 0.99))),
        (
            "throughput",
            format!(
                "{:.0} req/s",
                config.requests as f64 / load_time.as_secs_f64()
            ),
        ),
        (
            "load / total time",
            format!(
                "{:.2} s / {:.2} s",
                load_time.as_secs_f64(),
                total_time.as_secs_f64()
            ),
        ),
    ];
    println!();
    println!(
        "  {bold}{:<28}{:>14}{reset}",
        "result",
        if config.locked {
            "with lock"
        } else {
            "no lock"
        }
    );
    println!("  {}", "-".repeat(42));
    for (name, value) in rows {
        // Colour codes take no room on screen.
        let pad = if value.contains('\x1b') {
            14 + green.len() + reset.len()
        } else {
            14
        };
        println!("  {name:<28}{value:>pad$}");
    }
    println!("  {}", "-".repeat(42));
    let per: Vec<String> = per_product
        .iter()
        .map(|(id, (sold, left))| format!("{id}: sold {sold}, left {left}"))
        .collect();
    println!("  per product (store): {}", per.join("; "));
    if oversold == 0 {
        println!("  {green}no unit was sold twice{reset}");
    } else if config.locked {
        println!("  {red}OVERSOLD with the lock on: this is a bug{reset}");
    } else {
        println!(
            "  {red}{oversold} units oversold{reset}: concurrent load/save lost updates. Run without --no-lock to prevent it."
        );
    }
}
