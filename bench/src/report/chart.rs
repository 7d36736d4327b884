//! The SVG chart beside BENCHMARKS.md: lock-runtime, rslock and the naive lock on six figures,
//! each bar relative to the best of the three.

use std::fmt::Write;

use crate::Results;

/// A grouped bar chart: for each metric, the three implementations relative to the best.
/// The three locks charted, in the order of their colours.
const KINDS: [&str; 3] = ["lock-runtime", "rslock", "naive"];

/// One row of the chart: its label, each lock's figure, whether higher is better.
type Metric = (&'static str, Vec<f64>, bool);

fn metrics(r: &Results) -> Vec<Metric> {
    let kinds = KINDS;
    vec![
        (
            "uncontended pairs/s, 1 worker",
            kinds
                .iter()
                .map(|k| r.uncontended_1[k].pairs_per_s)
                .collect(),
            true,
        ),
        (
            "uncontended pairs/s, 64 workers",
            kinds
                .iter()
                .map(|k| r.uncontended_64[k].pairs_per_s)
                .collect(),
            true,
        ),
        (
            "hot acquisitions/s, 16 tasks",
            kinds.iter().map(|k| r.hot_tasks[k].acq_per_s).collect(),
            true,
        ),
        (
            "hot acquisitions/s, 4×4 processes",
            kinds.iter().map(|k| r.hot_procs[k].acq_per_s).collect(),
            true,
        ),
        (
            "hot fairness (Jain), 16 tasks",
            kinds.iter().map(|k| r.hot_tasks[k].jain).collect(),
            true,
        ),
        (
            "wake-up p50 (µs, lower is better)",
            kinds.iter().map(|k| r.wake[k].p50_us).collect(),
            false,
        ),
    ]
}

pub(crate) fn svg(r: &Results) -> String {
    let colors = ["#2b7bb9", "#e07b39", "#8c8c8c"];
    let metrics = metrics(r);
    let (w, row_h, left) = (900.0, 70.0, 280.0);
    let h = 60.0 + row_h * metrics.len() as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="20" font-size="15" font-weight="bold">lock-runtime vs rslock vs naive SET NX polling (bar length relative to the best)</text>"#
    );
    for (i, k) in KINDS.iter().enumerate() {
        let x = left + i as f64 * 170.0;
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="32" width="12" height="12" fill="{}"/><text x="{}" y="43">{k}</text>"#,
            colors[i],
            x + 16.0
        );
    }
    for (m, (label, values, higher)) in metrics.iter().enumerate() {
        let y0 = 60.0 + m as f64 * row_h;
        let _ = writeln!(s, r#"<text x="10" y="{}">{label}</text>"#, y0 + 30.0);
        let best = if *higher {
            values.iter().cloned().fold(0.0, f64::max)
        } else {
            values
                .iter()
                .cloned()
                .filter(|v| *v > 0.0)
                .fold(f64::INFINITY, f64::min)
        };
        for (i, v) in values.iter().enumerate() {
            let frac = if *higher {
                v / best.max(1e-9)
            } else {
                best / v.max(1e-9)
            };
            let bar = (w - left - 120.0) * frac.clamp(0.0, 1.0);
            let y = y0 + 8.0 + i as f64 * 18.0;
            let _ = writeln!(
                s,
                r#"<rect x="{left}" y="{y}" width="{bar:.1}" height="15" fill="{}"/>"#,
                colors[i]
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
                left + bar + 5.0,
                y + 12.0,
                fmt_value(*v)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

fn fmt_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}
