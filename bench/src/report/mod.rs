//! BENCHMARKS.md and the SVG chart. `markdown` puts the sections together; each section is
//! written by its own function: the tables of figures in `tables.rs`, the targets in
//! `targets.rs`, the prose and the comparison with Redisson in `reading.rs`, the chart in
//! `chart.rs`.

mod chart;
mod reading;
mod tables;
mod targets;

use std::fmt::Write;

use crate::Results;

pub(crate) use chart::svg;

/// Machine and versions, for the report's first lines.
pub(crate) struct Versions {
    machine: String,
    rustc: String,
    redis_server: String,
}

fn run(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

impl Versions {
    pub(crate) fn collect() -> Versions {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0);
        let mem = std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:").map(|m| m.trim().to_string()))
            .unwrap_or_default();
        Versions {
            machine: format!(
                "{cpu}, {cores} cores, {mem} RAM, Linux {}",
                run("uname", &["-r"])
            ),
            rustc: run("rustc", &["--version"]),
            redis_server: run("redis-server", &["--version"]),
        }
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b == 0.0 {
        "–".into()
    } else {
        format!("{:.2}×", a / b)
    }
}

fn check(ok: bool) -> &'static str {
    if ok { "met" } else { "**missed**" }
}

/// What every section reads: the run's figures, the machine, the locks in table order, and the
/// limit's PING round trip that the wake-up and tower latencies are compared with (each
/// uncontended row has a PING of its own, timed beside it).
struct Run<'a> {
    r: &'a Results,
    versions: &'a Versions,
    plan: crate::Plan,
    /// lock-runtime, rslock, naive, then the peers: Redisson's `RLock` and `RFencedLock` when
    /// they ran, redsync always (without its driver, its rows say "not built").
    kinds: Vec<&'static str>,
    with_jvm: bool,
    ping: f64,
}

impl<'a> Run<'a> {
    fn of(r: &'a Results, versions: &'a Versions) -> Run<'a> {
        let jvm = crate::redisson_jvm::NAME;
        let with_jvm = r.uncontended_1.contains_key(jvm);
        let mut kinds = vec!["lock-runtime", "rslock", "naive"];
        kinds.extend(
            [jvm, crate::redisson_jvm::FENCED_NAME]
                .into_iter()
                .filter(|k| r.uncontended_1.contains_key(k)),
        );
        kinds.push(crate::redsync::NAME);
        Run {
            r,
            versions,
            plan: r.plan.expect("plan"),
            kinds,
            with_jvm,
            ping: r.limit.ping_p50_us,
        }
    }
}

pub(crate) fn markdown(r: &Results, v: &Versions) -> String {
    let run = Run::of(r, v);
    let mut s = String::new();
    tables::header(&mut s, &run);
    tables::limit(&mut s, &run);
    tables::uncontended(&mut s, &run);
    tables::hot(&mut s, &run);
    tables::wake(&mut s, &run);
    tables::tower(&mut s, &run);
    tables::watchdog(&mut s, &run);
    tables::memory(&mut s, &run);
    s.push_str(&crate::growth::markdown(&r.growth));
    s.push_str(&crate::family::markdown(&r.family));
    s.push_str(&crate::servers::markdown(&r.servers));
    targets::table(&mut s, &run);
    reading::notes(&mut s, &run);
    if run.with_jvm {
        reading::against_redisson(&mut s, &run);
    }
    let _ = writeln!(s, "\n![comparison](bench/chart.svg)");
    s
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Plan;
    use crate::hot::Hot;
    use crate::uncontended::Uncontended;
    use crate::wake::Wake;

    /// A run with the three Rust locks only (all figures 0).
    fn rust_only() -> Results {
        let mut r = Results {
            plan: Some(Plan {
                full: false,
                reps: 1,
                run: Duration::from_secs(1),
                wake_cycles: 1,
                watchdog_hold: Duration::from_secs(1),
            }),
            ..Results::default()
        };
        for k in ["lock-runtime", "rslock", "naive"] {
            r.uncontended_1.insert(k, Uncontended::default());
            r.uncontended_64.insert(k, Uncontended::default());
            r.hot_tasks.insert(k, Hot::default());
            r.hot_procs.insert(k, Hot::default());
            r.wake.insert(k, Wake::default());
        }
        r
    }

    fn versions() -> Versions {
        Versions {
            machine: "a machine".into(),
            rustc: "rustc".into(),
            redis_server: "redis".into(),
        }
    }

    #[test]
    fn redissons_fenced_lock_has_its_rows_and_faces_our_fenced_grant() {
        let mut r = rust_only();
        let (jvm, fenced_jvm) = (crate::redisson_jvm::NAME, crate::redisson_jvm::FENCED_NAME);
        for k in [jvm, fenced_jvm] {
            let u = Uncontended {
                pairs_per_s: 100.0,
                ..Uncontended::default()
            };
            r.uncontended_1.insert(k, u.clone());
            r.uncontended_64.insert(k, u);
            r.hot_tasks.insert(k, Hot::default());
            r.hot_procs.insert(k, Hot::default());
            r.wake.insert(
                k,
                Wake {
                    p50_us: 400.0,
                    ..Wake::default()
                },
            );
        }
        let ours = Uncontended {
            pairs_per_s: 200.0,
            ..Uncontended::default()
        };
        let fenced = crate::impls::FENCED;
        r.uncontended_1.insert(fenced, ours.clone());
        r.uncontended_64.insert(fenced, ours);
        r.hot_tasks.insert(fenced, Hot::default());
        let md = markdown(&r, &versions());
        for row in [
            "| redisson RFencedLock (JVM) | 1 | 100 |",
            "| redisson RFencedLock (JVM) | 64 | 100 |",
            "| redisson RFencedLock (JVM) | 16 tasks, 1 process |",
            "| redisson RFencedLock (JVM) | 4 processes × 4 tasks |",
            "| redisson RFencedLock (JVM) | 0 | 400 µs |",
            "| scenario | lock-runtime, fenced | redisson RFencedLock (JVM) | ratio | ahead? |",
            "| uncontended, 1 worker: pairs/s | 200.0 | 100.0 | 2.00× | yes |",
            "| wake-up p50 (µs) | – | 400.0 | – | – |",
        ] {
            assert!(md.contains(row), "no {row:?} in:\n{md}");
        }
        assert!(
            md.contains("`RFencedLock` (`-Dlockinterop.bench.lock=fenced`)"),
            "{md}"
        );
    }

    #[test]
    fn each_uncontended_row_is_judged_against_the_ping_beside_it() {
        let mut r = rust_only();
        // The limit's PING, which the uncontended rows no longer use.
        r.limit.ping_p50_us = 1000.0;
        let row = |p50_us, ping_p50_us| Uncontended {
            pairs_per_s: 1.0,
            p50_us,
            ping_p50_us,
            ..Uncontended::default()
        };
        r.uncontended_1.insert("lock-runtime", row(150.0, 75.0));
        r.uncontended_1.insert("rslock", row(150.0, 50.0));
        let md = markdown(&r, &versions());
        for line in [
            "| lock-runtime | 1 | 1 | 150 µs | 0 µs | 75 µs | 2.00× |",
            "| rslock | 1 | 1 | 150 µs | 0 µs | 50 µs | 3.00× |",
            "| naive | 1 | 0 | 0 µs | 0 µs | – | – |",
            "| 2.00× PING (150 µs / 75 µs), 1.00× rslock | met |",
        ] {
            assert!(md.contains(line), "no {line:?} in:\n{md}");
        }
    }

    #[test]
    fn without_the_go_driver_the_redsync_rows_say_not_built() {
        let md = markdown(&rust_only(), &versions());
        assert!(md.contains("- redsync: not built"), "{md}");
        for row in [
            "| redsync | 1 | not built |",
            "| redsync | 64 | not built |",
            "| redsync | 16 tasks, 1 process | not built |",
            "| redsync | 4 processes × 4 tasks | not built |",
            "| redsync | not built |",
        ] {
            assert!(md.contains(row), "no {row:?} in:\n{md}");
        }
    }

    #[test]
    fn with_the_go_driver_its_rows_its_build_and_its_retries_are_reported() {
        let mut r = rust_only();
        let name = crate::redsync::NAME;
        r.redsync = Some("redsync v4.18.1, go-redis v9.23.0, go1.26.8".into());
        let u = Uncontended {
            pairs_per_s: 1234.0,
            ..Uncontended::default()
        };
        r.uncontended_1.insert(name, u.clone());
        r.uncontended_64.insert(name, u);
        let hot = Hot {
            acq_per_s: 99.0,
            gave_up: 3,
            ..Hot::default()
        };
        r.hot_tasks.insert(name, hot.clone());
        r.hot_procs.insert(name, hot);
        r.wake.insert(name, Wake::default());
        let md = markdown(&r, &versions());
        assert!(
            md.contains("(redsync v4.18.1, go-redis v9.23.0, go1.26.8;"),
            "{md}"
        );
        assert!(md.contains("32 tries per `Lock()`"), "{md}");
        assert!(md.contains("| redsync | 1 | 1234 |"), "{md}");
        assert!(md.contains("| redsync | 64 | 1234 |"), "{md}");
        assert!(
            md.contains("| redsync | 16 tasks, 1 process | 99 |"),
            "{md}"
        );
        assert!(
            md.contains("| redsync | 4 processes × 4 tasks | 99 |"),
            "{md}"
        );
        assert!(
            md.contains("redsync, 16 tasks, 1 process: 3 lock calls gave up"),
            "{md}"
        );
        assert!(
            !md.lines()
                .any(|l| l.starts_with("| redsync |") && l.contains("not built")),
            "{md}"
        );
    }
}
