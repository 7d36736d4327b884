//! The uncontended pairs again on the newer servers of the compatibility table (TOPOLOGIES.md):
//! Redis 8.2, Valkey 8.1 and Valkey 9.1, from the cache `scripts/ensure-deps.sh servers` fills.
//! On Valkey 9 a release that no waiter marked is a `DELIFEQ`, no script: its rows show what
//! that costs the server against rslock and the naive lock on the same server.

use std::path::PathBuf;

use lock_tests::RedisServer;

use crate::impls::Kind;
use crate::uncontended::{Uncontended, uncontended};
use crate::{Plan, median_of, progress};

/// One server's rows: `(workers, lock, figures)`.
#[derive(Debug, Clone)]
pub(crate) struct ServerRun {
    /// The cache's name for it (`valkey-9.1.2`).
    pub(crate) server: String,
    pub(crate) rows: Vec<(usize, &'static str, Uncontended)>,
}

/// The servers the compatibility stage runs the suite on: `(name, server binary)`, from
/// `servers.tsv` in the servers' cache (none when it was never filled).
fn listed() -> Vec<(String, PathBuf)> {
    let cache = std::env::var_os("LOCK_SERVERS_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(|d| PathBuf::from(d).join("lock-runtime-servers"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|d| PathBuf::from(d).join(".cache/lock-runtime-servers"))
        });
    let Some(table) = cache.and_then(|c| std::fs::read_to_string(c.join("servers.tsv")).ok())
    else {
        return Vec::new();
    };
    table
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            match fields[..] {
                [name, "suite", bin, ..] => Some((name.to_owned(), PathBuf::from(bin))),
                _ => None,
            }
        })
        .collect()
}

/// Ours, rslock and the naive lock, 1 and 64 workers, on each listed server.
pub(crate) async fn run(plan: Plan) -> Vec<ServerRun> {
    let mut out = Vec::new();
    for (name, bin) in listed() {
        let server = match RedisServer::try_start_binary(&bin, &[]) {
            Ok(server) => server,
            Err(e) => {
                eprintln!(
                    "\nbench: {name} ({}) did not start ({e}); its rows are left out",
                    bin.display()
                );
                continue;
            }
        };
        let url = server.url();
        let mut rows = Vec::new();
        for workers in [1, 64] {
            for kind in Kind::ALL {
                progress(&format!(
                    "{name}, uncontended, {workers} worker(s): {}",
                    kind.name()
                ));
                let u = median_of(
                    plan.reps,
                    |u: &Uncontended| u.pairs_per_s,
                    || uncontended(kind, &url, workers, plan.run),
                )
                .await;
                rows.push((workers, kind.name(), u));
            }
        }
        out.push(ServerRun { server: name, rows });
    }
    out
}

/// The section: per server and worker count, pairs per second and Redis CPU per pair against
/// the naive lock's on the same server.
pub(crate) fn markdown(runs: &[ServerRun]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    if runs.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "\n## Other servers: uncontended pairs\n\nThe newer servers of the compatibility table (TOPOLOGIES.md), each started by the \
         benchmark from the cache `scripts/ensure-deps.sh servers` fills, with the same uncontended \
         runs as above. On Valkey 9 a release that no waiter marked is one `DELIFEQ` instead of a \
         script call.\n"
    );
    let _ = writeln!(
        s,
        "| server | workers | impl | pairs/s | pair p50 | Redis CPU per pair | vs the naive lock's |\n|---|---|---|---|---|---|---|"
    );
    for run in runs {
        for &(workers, name, ref u) in &run.rows {
            let naive = run
                .rows
                .iter()
                .find(|(w, n, _)| *w == workers && *n == Kind::Naive.name())
                .map_or(0.0, |(_, _, u)| u.server_cpu_us);
            let vs = if naive > 0.0 {
                format!("{:.2} ×", u.server_cpu_us / naive)
            } else {
                "–".to_owned()
            };
            let _ = writeln!(
                s,
                "| {} | {workers} | {name} | {:.0} | {:.0} µs | {:.2} µs | {vs} |",
                run.server, u.pairs_per_s, u.p50_us, u.server_cpu_us
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(cpu: f64) -> Uncontended {
        Uncontended {
            pairs_per_s: 1000.0,
            p50_us: 500.0,
            p99_us: 900.0,
            server_cpu_us: cpu,
            command_us: 1.0,
            ping_p50_us: 0.0,
        }
    }

    #[test]
    fn no_server_no_section_and_each_row_against_the_naive_lock_of_its_server() {
        assert_eq!(markdown(&[]), "");
        let run = ServerRun {
            server: "valkey-9.1.2".into(),
            rows: vec![
                (64, Kind::Ours.name(), figures(4.0)),
                (64, Kind::Naive.name(), figures(8.0)),
                (1, Kind::Ours.name(), figures(3.0)),
            ],
        };
        let s = markdown(&[run]);
        assert!(
            s.contains("| valkey-9.1.2 | 64 | lock-runtime | 1000 | 500 µs | 4.00 µs | 0.50 × |"),
            "{s}"
        );
        assert!(
            s.contains("| valkey-9.1.2 | 64 | naive | 1000 | 500 µs | 8.00 µs | 1.00 × |"),
            "{s}"
        );
        // No naive row for one worker: no ratio.
        assert!(
            s.contains("| valkey-9.1.2 | 1 | lock-runtime | 1000 | 500 µs | 3.00 µs | – |"),
            "{s}"
        );
    }
}
