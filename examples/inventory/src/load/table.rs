//! The table the load driver prints at the end: what each kind of request got, what the store
//! says was sold, where a purchase's time went, the instances' lock metrics, and the verdict.

use std::time::Duration;

use super::{Account, Config, Split, Tally, Verdict};
use crate::scrape::LockFigures;

const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[31m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// `p50 / p99` of `durations`.
fn p50_p99(mut sorted: Vec<Duration>) -> String {
    sorted.sort_unstable();
    format!(
        "{} / {}",
        ms(percentile(&sorted, 0.50)),
        ms(percentile(&sorted, 0.99))
    )
}

/// `n`, green when 0 and red otherwise.
fn must_be_zero(n: u64) -> String {
    if n == 0 {
        format!("{GREEN}0{RESET}")
    } else {
        format!("{RED}{n}{RESET}")
    }
}

pub(super) fn print_table(
    config: &Config,
    purchases: &Tally,
    carts: &Tally,
    accounts: &[Account],
    verdict: Verdict,
    figures: LockFigures,
    (load_time, total_time): (Duration, Duration),
) {
    let mut rows = answers(config, purchases, carts);
    rows.extend(store_rows(config, purchases, carts, accounts, verdict));
    rows.extend(latency_rows(config, purchases, carts));
    if config.locked && figures.pages > 0 {
        rows.extend(metrics_rows(&figures));
    }
    rows.extend([
        (
            "throughput",
            format!(
                "{:.0} req/s",
                (purchases.sent + carts.sent) as f64 / load_time.as_secs_f64()
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
    ]);
    print_rows(config, rows);
    print_notes(config, purchases, accounts, verdict);
}

/// How the purchases (and the carts, if any) were answered.
fn answers(config: &Config, purchases: &Tally, carts: &Tally) -> Vec<(&'static str, String)> {
    let mut rows: Vec<(&str, String)> = vec![
        ("purchases sold (200)", purchases.sold.to_string()),
        (
            "purchases out of stock (409)",
            purchases.out_of_stock.to_string(),
        ),
        ("purchases busy (423)", purchases.busy.to_string()),
        ("purchases stale token (409)", purchases.stale.to_string()),
    ];
    if config.carts > 0 {
        rows.extend([
            ("carts sold (200)", carts.sold.to_string()),
            ("carts refused, short (409)", carts.out_of_stock.to_string()),
            ("carts busy (423)", carts.busy.to_string()),
            ("carts stale token (409)", carts.stale.to_string()),
        ]);
    }
    rows
}

/// Stuck requests and errors, then the store's own count: in stock, sold, left, oversold.
fn store_rows(
    config: &Config,
    purchases: &Tally,
    carts: &Tally,
    accounts: &[Account],
    verdict: Verdict,
) -> Vec<(&'static str, String)> {
    let in_stock = config.stock * config.products as i64;
    let units_sold: i64 = accounts.iter().map(|a| a.sold).sum();
    let left: i64 = accounts.iter().map(|a| a.left).sum();
    vec![
        (
            "stuck (no answer in time)",
            must_be_zero(verdict.stuck as u64),
        ),
        (
            "errors (store, 5xx, other)",
            (purchases.errors + carts.errors).to_string(),
        ),
        ("in stock at start", in_stock.to_string()),
        ("units sold (store)", units_sold.to_string()),
        ("left in stock (store)", left.to_string()),
        ("oversold", must_be_zero(verdict.oversold)),
    ]
}

/// The latencies: purchases, where a purchase's time went (each part's own p50 / p99: they do
/// not add up), carts.
fn latency_rows(config: &Config, purchases: &Tally, carts: &Tally) -> Vec<(&'static str, String)> {
    let mut rows = vec![(
        "purchase latency p50 / p99",
        p50_p99(purchases.latencies.clone()),
    )];
    let part = |of: fn(&Split) -> Duration| p50_p99(purchases.splits.iter().map(of).collect());
    if !purchases.splits.is_empty() {
        rows.extend([
            ("purchase: lock wait p50 / p99", part(|s| s.lock)),
            ("purchase: store p50 / p99", part(|s| s.store)),
            ("purchase: rest p50 / p99", part(|s| s.rest)),
        ]);
    }
    if config.carts > 0 {
        rows.push(("cart latency p50 / p99", p50_p99(carts.latencies.clone())));
    }
    rows
}

/// From the instances' `GET /metrics`, summed (the p99: the worst instance's).
fn metrics_rows(figures: &LockFigures) -> Vec<(&'static str, String)> {
    vec![
        (
            "locks acquired (metrics)",
            format!("{:.0}", figures.acquired),
        ),
        (
            "lock wait timeouts (metrics)",
            format!("{:.0}", figures.timeouts),
        ),
        ("locks lost (metrics)", must_be_zero(figures.losses as u64)),
        (
            "lock wait p99 (metrics)",
            format!("{:.1} ms", figures.wait_p99 * 1000.0),
        ),
    ]
}

fn print_rows(config: &Config, rows: Vec<(&str, String)>) {
    const NAME: usize = 30;
    const VALUE: usize = 20;
    println!();
    println!(
        "  {BOLD}{:<NAME$}{:>VALUE$}{RESET}",
        "result",
        if config.locked {
            "with lock"
        } else {
            "no lock"
        }
    );
    println!("  {}", "-".repeat(NAME + VALUE));
    for (name, value) in rows {
        // Colour codes take no room on screen.
        let pad = if value.contains('\x1b') {
            VALUE + GREEN.len() + RESET.len()
        } else {
            VALUE
        };
        println!("  {name:<NAME$}{value:>pad$}");
    }
    println!("  {}", "-".repeat(NAME + VALUE));
}

/// Under the table: per product, what the parts of a purchase's time mean, what stuck means,
/// and the verdict.
fn print_notes(config: &Config, purchases: &Tally, accounts: &[Account], verdict: Verdict) {
    let per: Vec<String> = accounts
        .iter()
        .map(|a| format!("{}: sold {}, left {}", a.sku, a.sold, a.left))
        .collect();
    println!("  per product (store): {}", per.join("; "));
    println!(
        "  purchase time: {} of {} purchases answered by the handler timed themselves (Server-Timing):\n    \
lock wait = arrival at the service to the handler (the lock layer's queue and acquire),\n    \
store = the load and the save's transaction (with the waits for a connection and the store's writer),\n    \
rest = the latency minus both (connecting, HTTP, the 1 ms think, scheduling); each part's own p50 / p99",
        purchases.splits.len(),
        purchases.sold + purchases.out_of_stock + purchases.stale,
    );
    println!(
        "  stuck = not answered within {} s (a deadlock would show here)",
        config.stuck_after.as_secs()
    );
    if verdict.oversold == 0 {
        println!("  {GREEN}no unit was sold twice{RESET}");
    } else if config.locked {
        println!("  {RED}OVERSOLD with the lock on: this is a bug{RESET}");
    } else {
        println!(
            "  {RED}{} units oversold{RESET}: concurrent load/save lost updates. Run without --no-lock to prevent it.",
            verdict.oversold
        );
    }
}
