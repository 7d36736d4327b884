//! How locks are shown: a table or a detailed listing for people, JSON for scripts.

use std::fmt::Write as _;
use std::time::Duration;

use lock_runtime::{HoldMode, Holder, LockInfo, LockKind};
use serde_json::{Value, json};

/// How many holders one table cell names before "+N more".
const HOLDERS_IN_A_CELL: usize = 3;

/// A lock's JSON: every field of [`LockInfo`], durations in milliseconds.
pub(crate) fn lock_json(info: &LockInfo) -> Value {
    json!({
        "name": info.name,
        "key": info.key,
        "kind": info.kind.as_str(),
        "holders": info.holders.iter().map(holder_json).collect::<Vec<_>>(),
        "holder_count": info.holder_count,
        "ttl_ms": info.remaining.map(millis),
        "fencing_token": info.fencing_token,
        "waiting": info.waiting(),
        "waiters": {
            "queued": info.waiters.queued,
            "subscribed": info.waiters.subscribed,
        },
        "capacity": info.capacity,
    })
}

fn holder_json(holder: &Holder) -> Value {
    let (mode, permits) = match holder.mode {
        HoldMode::Exclusive => ("exclusive", None),
        HoldMode::Read => ("read", None),
        HoldMode::Write => ("write", None),
        HoldMode::Permits(n) => ("permits", Some(n)),
        _ => ("other", None),
    };
    json!({
        "owner": holder.owner,
        "client_id": holder.client_id(),
        "mode": mode,
        "permits": permits,
        "ttl_ms": holder.remaining.map(millis),
    })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `850ms`, `29.8s`, `5m03s`, `2h01m`; `-` for none (a key without TTL).
pub(crate) fn duration(d: Option<Duration>) -> String {
    let Some(d) = d else {
        return "-".into();
    };
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60)
    }
}

/// One holder for people: its owner id, and how it holds the lock unless that is plain.
pub(crate) fn holder(holder: &Holder) -> String {
    match holder.mode {
        HoldMode::Exclusive => holder.owner.clone(),
        mode => format!("{} ({mode})", holder.owner),
    }
}

/// The holders of a lock in one cell.
pub(crate) fn holders(info: &LockInfo) -> String {
    let mut cell: Vec<String> = info
        .holders
        .iter()
        .take(HOLDERS_IN_A_CELL)
        .map(holder)
        .collect();
    let more = info.holder_count.saturating_sub(cell.len());
    if more > 0 {
        cell.push(format!("+{more} more"));
    }
    if cell.is_empty() {
        cell.push("-".into());
    }
    cell.join(", ")
}

/// The kind, with a semaphore's permits in use (and its stored capacity).
fn kind(info: &LockInfo) -> String {
    match (info.kind, info.capacity) {
        (LockKind::Semaphore, Some(capacity)) => {
            format!("semaphore {}/{capacity}", info.permits_held())
        }
        (LockKind::Semaphore, None) => format!("semaphore {}", info.permits_held()),
        (kind, _) => kind.to_string(),
    }
}

fn token(info: &LockInfo) -> String {
    info.fencing_token
        .map_or_else(|| "-".into(), |t| t.to_string())
}

/// A table of locks, columns aligned; `extra` adds a last column (`top`'s token growth).
pub(crate) fn table(locks: &[(&LockInfo, Option<String>)], extra: Option<&str>) -> String {
    let mut rows = vec![
        ["NAME", "KIND", "HOLDERS", "TTL", "TOKEN", "WAITERS"]
            .map(String::from)
            .to_vec(),
    ];
    if let Some(extra) = extra {
        rows[0].push(extra.into());
    }
    for (info, extra) in locks {
        let mut row = vec![
            info.name.clone(),
            kind(info),
            holders(info),
            duration(info.remaining),
            token(info),
            info.waiting().to_string(),
        ];
        if let Some(extra) = extra {
            row.push(extra.clone());
        }
        rows.push(row);
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths[c] - cell.chars().count();
                let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Everything about one lock, for people.
pub(crate) fn details(info: &LockInfo) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "name:          {}", info.name);
    let _ = writeln!(out, "key:           {}", info.key);
    let _ = writeln!(out, "kind:          {}", kind(info));
    let _ = writeln!(out, "ttl:           {}", duration(info.remaining));
    let _ = writeln!(out, "fencing token: {}", token(info));
    let _ = writeln!(
        out,
        "waiters:       {} ({} queued, {} subscribed connection(s))",
        info.waiting(),
        info.waiters.queued,
        info.waiters.subscribed
    );
    if let Some(capacity) = info.capacity {
        let _ = writeln!(out, "capacity:      {capacity} (stored)");
    }
    let _ = writeln!(out, "holders:       {}", info.holder_count);
    for h in &info.holders {
        let _ = writeln!(
            out,
            "  {}  ttl {}  client {}",
            holder(h),
            duration(h.remaining),
            h.client_id().unwrap_or("?")
        );
    }
    if info.holder_count > info.holders.len() {
        let _ = writeln!(
            out,
            "  … {} more not listed",
            info.holder_count - info.holders.len()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(None), "-");
        assert_eq!(duration(Some(Duration::from_millis(850))), "850ms");
        assert_eq!(duration(Some(Duration::from_millis(29_840))), "29.8s");
        assert_eq!(duration(Some(Duration::from_secs(303))), "5m03s");
        assert_eq!(duration(Some(Duration::from_secs(7260))), "2h01m");
    }
}
