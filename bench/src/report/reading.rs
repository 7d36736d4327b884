//! The prose under the tables ("Reading the figures": what each figure means and why it is what
//! it is) and, when Redisson ran, lock-runtime against it row by row.

use std::fmt::Write;

use super::{Run, ratio};
use crate::Results;

/// "Reading the figures": the hot key, uncontended, redsync (when built) and tower.
pub(super) fn notes(s: &mut String, run: &Run<'_>) {
    let _ = writeln!(s, "\n## Reading the figures\n");
    hot_key(s, run);
    uncontended(s, run);
    redsync(s, run);
    tower(s);
}

fn hot_key(s: &mut String, run: &Run<'_>) {
    let r = run.r;
    let hot = &r.hot_tasks["lock-runtime"];
    let rs_hot = &r.hot_tasks["rslock"];
    let _ = writeln!(
        s,
        "- **Hot key.** A release that finds another task of its client waiting passes the lock \
         to it in memory, first come first served: the process keeps its hold in Redis (renewed \
         by the watchdog) and the next task takes it over, without a round trip; a task that \
         wants its token with the grant (`{}`) gets the lock from the release script instead, \
         one round trip per hand-over with a fresh token. While other processes wait, a client \
         passes the lock on at most 64 times in a row and for 2 ms before a release lets it fall \
         free for them, and the waiting processes take turns in a fixed cycle. rslock's {:.0} \
         acquisitions/s are mostly one worker re-taking its own lock ({:.0} owner changes/s, \
         Jain {:.2}, waits up to {:.0} ms); lock-runtime changes owner on every acquisition \
         ({:.0} owner changes/s, Jain {:.3}).",
        crate::impls::FENCED,
        rs_hot.acq_per_s,
        rs_hot.owner_changes_per_s,
        rs_hot.jain,
        rs_hot.wait_max_us / 1000.0,
        hot.owner_changes_per_s,
        hot.jain
    );
}

fn uncontended(s: &mut String, run: &Run<'_>) {
    let r = run.r;
    let u1 = &r.uncontended_1["lock-runtime"];
    let u64_ = &r.uncontended_64["lock-runtime"];
    let rs64 = &r.uncontended_64["rslock"];
    let floor = |i: usize| r.floor.get(i).map_or(0.0, |f| f.1);
    let _ = writeln!(
        s,
        "- **Uncontended.** A lock-runtime pair is, like rslock's, one plain command and one \
         small script: the acquire is `SET key owner NX PX lease GET` (the answer tells free, \
         ours or held), the release one call of its Redis function library (`FCALL`: owner \
         check and delete, and a publish only when a waiter marked the lock). A fenced grant \
         (`fenced`) is a function call instead of the `SET`: free check, the server clock, the \
         fencing counter's write, the lock. The same pair called raw with no client logic \
         makes {:.0} pairs/s here; lock-runtime makes {:.0}. Redis spends {:.1} µs of CPU per \
         rslock pair against {:.1} µs for ours at 64 workers; what is left of the difference is \
         the function call's own cost against rslock's smaller script.",
        floor(0),
        u1.pairs_per_s,
        rs64.server_cpu_us,
        u64_.server_cpu_us,
    );
}

fn redsync(s: &mut String, run: &Run<'_>) {
    let r = run.r;
    let redsync = crate::redsync::NAME;
    if let (Some(u1), Some(hot)) = (r.uncontended_1.get(redsync), r.hot_tasks.get(redsync)) {
        let _ = writeln!(
            s,
            "- **redsync.** Its `Lock()` is one `SET NX` and its `Unlock()` one compare-and-delete \
             script, as rslock's are; with one worker it makes {:.0} pairs/s ({} rslock's), a pair \
             p50 of {}. On the hot key its waiters sleep 50 to 250 ms between tries, so the \
             releasing worker mostly takes the lock again at once: {:.0} acquisitions/s, {:.0} \
             owner changes/s, Jain {:.3}, waits up to {:.0} ms.",
            u1.pairs_per_s,
            ratio(u1.pairs_per_s, r.uncontended_1["rslock"].pairs_per_s),
            format_args!(
                "{} the PING timed beside it",
                ratio(u1.p50_us, u1.ping_p50_us)
            ),
            hot.acq_per_s,
            hot.owner_changes_per_s,
            hot.jain,
            hot.wait_max_us / 1000.0
        );
    }
}

fn tower(s: &mut String) {
    let _ = writeln!(
        s,
        "- **Tower.** The bare handler returns a constant, so it measures only HTTP parsing; the \
         fair comparison for `LockLayer` is the same handler taking and releasing the lock itself. \
         Both take the default lock (tokens on demand: the handler asks for none here), so an \
         uncontended grant is one `SET`, and on one hot id both pass the lock among a process's \
         waiting requests in memory. What is left between them is the layer's own work per \
         request: the name from the route, the response future, the `HeldLock` extension."
    );
}

/// lock-runtime against Redisson in a JVM, row by row: our default client against `RLock`, and,
/// when it ran, our fenced grant against `RFencedLock`.
pub(super) fn against_redisson(s: &mut String, run: &Run<'_>) {
    let r = run.r;
    let (jvm, fenced_jvm) = (crate::redisson_jvm::NAME, crate::redisson_jvm::FENCED_NAME);
    let _ = writeln!(s, "\n## Against Redisson\n");
    let _ = writeln!(
        s,
        "lock-runtime against Redisson's `RLock` in a JVM, row by row (the goal: ahead on every row).\n"
    );
    head_to_head(s, r, "lock-runtime", jvm);
    if run.kinds.contains(&fenced_jvm) {
        let fenced = crate::impls::FENCED;
        let _ = writeln!(
            s,
            "\nFenced: `{fenced}` (every grant issues its fencing token) against Redisson's \
             `RFencedLock` (every grant through `lockAndGetToken`, which issues and returns its \
             token): both pay for a token on every grant, so this is the fair comparison for our \
             fenced grant (the goal: ahead on every row). `{fenced}` runs uncontended and on the \
             hot key in one process only; on the other rows only Redisson's figure is shown.\n"
        );
        head_to_head(s, r, fenced, fenced_jvm);
    }
}

/// One table: `ours` against `theirs` on each figure both have (a figure one of them lacks is
/// shown as `–`, and not judged).
fn head_to_head(s: &mut String, r: &Results, ours: &str, theirs: &str) {
    let _ = writeln!(
        s,
        "| scenario | {ours} | {theirs} | ratio | ahead? |\n|---|---|---|---|---|"
    );
    /// One lock's figure, by the lock's name; `None` when it did not run that scenario.
    type Figure = fn(&Results, &str) -> Option<f64>;
    // (label, figure, whether higher is better)
    let rows: [(&str, Figure, bool); 7] = [
        (
            "uncontended, 1 worker: pairs/s",
            |r, k| r.uncontended_1.get(k).map(|u| u.pairs_per_s),
            true,
        ),
        (
            "uncontended, 64 workers: pairs/s",
            |r, k| r.uncontended_64.get(k).map(|u| u.pairs_per_s),
            true,
        ),
        (
            "uncontended, 64 workers: Redis CPU per pair (µs)",
            |r, k| r.uncontended_64.get(k).map(|u| u.server_cpu_us),
            false,
        ),
        (
            "hot key, 16 tasks, 1 process: acquisitions/s",
            |r, k| r.hot_tasks.get(k).map(|h| h.acq_per_s),
            true,
        ),
        (
            "hot key, 4 processes × 4 tasks: acquisitions/s",
            |r, k| r.hot_procs.get(k).map(|h| h.acq_per_s),
            true,
        ),
        (
            "hot key, 16 tasks: wait p99 (ms)",
            |r, k| r.hot_tasks.get(k).map(|h| h.wait_p99_us / 1000.0),
            false,
        ),
        (
            "wake-up p50 (µs)",
            |r, k| r.wake.get(k).map(|w| w.p50_us),
            false,
        ),
    ];
    let shown = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.1}"));
    for (label, figure, higher_is_better) in rows {
        let (a, b) = (figure(r, ours), figure(r, theirs));
        let (ratio, ahead) = match (a, b) {
            (Some(a), Some(b)) => {
                let ahead = if higher_is_better { a >= b } else { a <= b };
                (ratio(a, b), if ahead { "yes" } else { "**no**" })
            }
            _ => ("–".into(), "–"),
        };
        let _ = writeln!(
            s,
            "| {label} | {} | {} | {ratio} | {ahead} |",
            shown(a),
            shown(b)
        );
    }
}
