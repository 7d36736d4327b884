//! The lock family's modes: `family` (sections of a semaphore, read/write lock or fair lock,
//! timed), `hold-family` (hold one until killed) and `family-chaos` (the family under faults).

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockGuard};
use lock_tests::mono_ns;

/// Takes `name` as `kind` once; `write` picks the write side of a read/write lock.
async fn take(
    locks: &LockClient,
    kind: &str,
    name: &str,
    write: bool,
) -> Result<(LockGuard, &'static str), LockError> {
    if let Some(capacity) = kind.strip_prefix("semaphore:") {
        let capacity = capacity.parse().expect("capacity");
        let guard = locks.semaphore(name, capacity).acquire().await?;
        return Ok((guard, "permit"));
    }
    match kind {
        "fair" => Ok((locks.fair_lock(name).acquire().await?, "fair")),
        "rw" | "read" | "write" if write || kind == "write" => {
            Ok((locks.rw_lock(name).write().acquire().await?, "write"))
        }
        "rw" | "read" => Ok((locks.rw_lock(name).read().acquire().await?, "read")),
        other => panic!("unknown kind {other}"),
    }
}

pub(super) async fn sections(
    url: &str,
    kind: &str,
    name: &str,
    tasks: &str,
    rounds: &str,
    hold_ms: &str,
) {
    let tasks: usize = tasks.parse().expect("tasks");
    let rounds: usize = rounds.parse().expect("rounds");
    let hold = Duration::from_millis(hold_ms.parse().expect("hold ms"));
    let locks = LockClient::connect(url).await.expect("connect");
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (locks, kind, name) = (locks.clone(), kind.to_owned(), name.to_owned());
        handles.push(tokio::spawn(async move {
            let mut lines = Vec::new();
            for round in 0..rounds {
                let write = (task + round).is_multiple_of(4);
                let asked = mono_ns();
                let (guard, what) = take(&locks, &kind, &name, write).await.expect("take");
                let start = mono_ns();
                tokio::time::sleep(hold).await;
                let end = mono_ns();
                assert!(!guard.is_lost(), "lost while held");
                guard.release().await.expect("release");
                lines.push(format!("section {what} {asked} {start} {end}"));
            }
            lines
        }));
    }
    for handle in handles {
        for line in handle.await.expect("task") {
            println!("{line}");
        }
    }
    println!("done");
}

pub(super) async fn chaos(url: &str, ms: &str, watchdog_ms: &str, out: &str) {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    let until = tokio::time::Instant::now() + Duration::from_millis(ms.parse().expect("ms"));
    let locks = LockClient::builder(url)
        .watchdog_timeout(Duration::from_millis(watchdog_ms.parse().expect("ms")))
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("connect");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out)
        .expect("out file");
    let file = Arc::new(Mutex::new(file));
    let kinds = ["semaphore:2", "semaphore:2", "rw", "rw", "fair", "fair"];
    let mut handles = Vec::new();
    for (task, kind) in kinds.into_iter().enumerate() {
        let (locks, file) = (locks.clone(), file.clone());
        handles.push(tokio::spawn(async move {
            let name = match kind {
                "rw" => "family:rw",
                "fair" => "family:fair",
                _ => "family:sem",
            };
            let mut sections = 0usize;
            let mut round = 0usize;
            while tokio::time::Instant::now() < until {
                round += 1;
                let write = (task + round).is_multiple_of(4);
                let asked = mono_ns();
                let taken =
                    tokio::time::timeout(Duration::from_secs(3), take(&locks, kind, name, write))
                        .await;
                let Ok(Ok((guard, what))) = taken else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                let start = mono_ns();
                tokio::time::sleep(Duration::from_millis(2 + (round % 4) as u64)).await;
                let end = mono_ns();
                let lost = guard.is_lost();
                // A permit passed in memory by the other task of this process has no token
                // yet (a grant in Redis carries one).
                let passed = if what == "permit" && guard.issued_token().is_none() {
                    " passed"
                } else {
                    ""
                };
                let what = if what == "permit" { "semaphore" } else { what };
                {
                    let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
                    let _ = writeln!(f, "{what} {asked} {start} {end} {lost}{passed}");
                }
                sections += 1;
                let _ = guard.release().await;
            }
            sections
        }));
    }
    let mut sections = 0;
    for handle in handles {
        sections += handle.await.expect("task");
    }
    // Let background releases and unsubscriptions settle.
    for _ in 0..100 {
        if locks.held_locks() == 0 && locks.subscribed_channels() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "exit held={} subscribed={} sections={sections}",
        locks.held_locks(),
        locks.subscribed_channels()
    );
}

pub(super) async fn hold(url: &str, kind: &str, name: &str, watchdog_ms: &str) {
    let locks = LockClient::builder(url)
        .watchdog_timeout(Duration::from_millis(watchdog_ms.parse().expect("ms")))
        .build()
        .await
        .expect("connect");
    let waiting = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        println!("waiting");
        std::future::pending::<()>().await
    };
    let (guard, _) = tokio::select! {
        taken = take(&locks, kind, name, false) => taken.expect("take"),
        () = waiting => unreachable!(),
    };
    println!("held {}", guard.fencing_token().await.expect("token"));
    std::future::pending::<()>().await;
}
