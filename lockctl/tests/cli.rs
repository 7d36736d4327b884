//! The real `lockctl` binary against real `redis-server` processes on loopback, while the test
//! holds locks through lock-runtime.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use lock_runtime::{LockClient, LockOptions};
use lock_tests::RedisServer;
use lock_tests::topology::{RedisCluster, SentinelGroup};
use serde_json::Value;

/// Runs `lockctl` with `args`, feeding `input` to its standard input (closed when `None`),
/// with none of its environment variables set.
async fn lockctl_with_input(args: &[&str], input: Option<&str>) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let input = input.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lockctl"))
            .args(&args)
            .env_remove("LOCKCTL_URL")
            .env_remove("REDIS_URL")
            .env_remove("LOCKCTL_PREFIX")
            .env_remove("LOCKCTL_MASTER_PASSWORD")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lockctl");
        let mut stdin = child.stdin.take().expect("stdin");
        if let Some(input) = input {
            stdin.write_all(input.as_bytes()).expect("write stdin");
        }
        drop(stdin);
        child.wait_with_output().expect("run lockctl")
    })
    .await
    .expect("lockctl thread")
}

async fn lockctl(args: &[&str]) -> Output {
    lockctl_with_input(args, None).await
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts exit code `code` and returns standard output.
fn expect(out: &Output, code: i32) -> String {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(out),
        stderr(out)
    );
    stdout(out)
}

fn json(out: &Output) -> Value {
    let text = expect(out, 0);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The lock named `name` in a `list --json` document.
fn find<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("{name} not listed in {doc}"))
}

fn owners(lock: &Value) -> Vec<String> {
    lock["holders"]
        .as_array()
        .expect("holders")
        .iter()
        .map(|h| h["owner"].as_str().expect("owner").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_a_mutex_a_semaphore_a_read_write_lock_and_a_fair_lock_with_waiters() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = lock_tests::client(&redis).await;
    let b = lock_tests::client(&redis).await;

    let mutex = a.lock("stock:42").fenced().acquire().await.unwrap();
    let permits = a
        .semaphore("supplier:acme", 5)
        .acquire_many(2, LockOptions::new())
        .await
        .unwrap();
    let permit = b.semaphore("supplier:acme", 5).acquire().await.unwrap();
    let reader = a.rw_lock("stock:43").read().acquire().await.unwrap();
    let turn = a.fair_lock("drop:1").acquire().await.unwrap();
    let fair = b.fair_lock("drop:1");
    let waiter = tokio::spawn(async move { fair.acquire().await });
    let queued = lock_tests::until_info(&a.fair_lock("drop:1"), |i| i.waiters.queued == 1).await;
    assert!(queued, "the fair lock's waiter never queued");

    let doc = json(&lockctl(&["--url", &url, "--json", "list"]).await);
    assert_eq!(doc["prefix"], "lock");
    assert_eq!(doc["locks"].as_array().unwrap().len(), 4, "{doc}");

    let m = find(&doc, "stock:42");
    assert_eq!(m["kind"], "mutex");
    assert_eq!(owners(m), [mutex.owner()]);
    assert_eq!(m["holders"][0]["client_id"], a.id());
    assert_eq!(
        m["fencing_token"].as_u64(),
        Some(mutex.fencing_token().await.unwrap())
    );
    let ttl = m["ttl_ms"].as_u64().expect("a TTL");
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");
    assert_eq!(m["key"], "lock:{stock:42}");

    let s = find(&doc, "supplier:acme");
    assert_eq!(s["kind"], "semaphore");
    let mut held = owners(s);
    held.sort();
    let mut expected = vec![permits.owner().to_owned(), permit.owner().to_owned()];
    expected.sort();
    assert_eq!(held, expected);
    let permit_counts: u64 = s["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["permits"].as_u64().unwrap())
        .sum();
    assert_eq!(permit_counts, 3);
    assert_eq!(
        s["fencing_token"].as_u64(),
        Some(permit.fencing_token().await.unwrap())
    );

    let r = find(&doc, "stock:43");
    assert_eq!(r["kind"], "read-write");
    assert_eq!(r["holders"][0]["mode"], "read");

    let f = find(&doc, "drop:1");
    assert_eq!(f["kind"], "fair");
    assert_eq!(owners(f), [turn.owner()]);
    assert_eq!(f["waiting"], 1);
    assert_eq!(f["waiters"]["queued"], 1);

    // The table says the same for people.
    let table = expect(&lockctl(&["--url", &url, "list"]).await, 0);
    let line = |name: &str| -> String {
        table
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no row for {name}:\n{table}"))
            .to_owned()
    };
    assert!(table.starts_with("NAME"), "{table}");
    let row = line("stock:42");
    assert!(row.contains("mutex"), "{row}");
    assert!(row.contains(mutex.owner()), "{row}");
    assert!(
        row.contains(&mutex.fencing_token().await.unwrap().to_string()),
        "{row}"
    );
    assert!(line("supplier:acme").contains("(2 permits)"));
    assert!(
        line("drop:1").trim_end().ends_with(" 1"),
        "{}",
        line("drop:1")
    );

    turn.release().await.unwrap();
    let granted = lock_tests::granted(waiter).await;
    drop((granted, mutex, permits, permit, reader));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_by_pattern_and_stops_at_the_limit() {
    let redis = RedisServer::start();
    let url = redis.url();
    let locks = lock_tests::client(&redis).await;
    let mut guards = Vec::new();
    for name in ["a:1", "a:2", "a:3", "a:4", "b:1", "order:{user:7}", "}odd"] {
        guards.push(locks.lock(name).acquire().await.unwrap());
    }
    let doc = json(&lockctl(&["--url", &url, "--json", "list", "--pattern", "a:*"]).await);
    let mut names: Vec<&str> = doc["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a:1", "a:2", "a:3", "a:4"]);
    assert_eq!(doc["truncated"], false);

    let limited = json(&lockctl(&["--url", &url, "--json", "list", "--limit", "2"]).await);
    assert_eq!(limited["locks"].as_array().unwrap().len(), 2);
    assert_eq!(limited["truncated"], true);

    // Names with their own hash tag, or starting with `}`, map back from their keys.
    let all = json(&lockctl(&["--url", &url, "--json", "list"]).await);
    find(&all, "order:{user:7}");
    find(&all, "}odd");
    drop(guards);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_one_lock_and_says_when_it_is_free() {
    let redis = RedisServer::start();
    let url = redis.url();
    let locks = lock_tests::client(&redis).await;
    let guard = locks.lock("stock:42").fenced().acquire().await.unwrap();

    let text = expect(&lockctl(&["--url", &url, "inspect", "stock:42"]).await, 0);
    assert!(text.contains("name:          stock:42"), "{text}");
    assert!(text.contains("kind:          mutex"), "{text}");
    assert!(
        text.contains(&format!(
            "fencing token: {}",
            guard.fencing_token().await.unwrap()
        )),
        "{text}"
    );
    assert!(text.contains(guard.owner()), "{text}");

    let doc = json(&lockctl(&["--url", &url, "--json", "inspect", "stock:42"]).await);
    assert_eq!(doc["held"], true);
    assert_eq!(
        doc["fencing_token"].as_u64(),
        Some(guard.fencing_token().await.unwrap())
    );
    assert_eq!(owners(&doc), [guard.owner()]);

    let free = expect(&lockctl(&["--url", &url, "inspect", "stock:43"]).await, 0);
    assert_eq!(free.trim(), "stock:43: not locked");
    let free = json(&lockctl(&["--url", &url, "--json", "inspect", "stock:43"]).await);
    assert_eq!(free["held"], false);
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_with_yes_frees_the_lock_and_the_holder_learns_it_is_lost() {
    let redis = RedisServer::start();
    let url = redis.url();
    let locks =
        lock_tests::client_with(&redis, |b| b.watchdog_timeout(Duration::from_secs(3))).await;
    let guard = locks.lock("stock:42").acquire().await.unwrap();

    let out = lockctl(&["--url", &url, "force-unlock", "stock:42", "--yes"]).await;
    let text = expect(&out, 0);
    assert!(text.contains("force-unlocked stock:42"), "{text}");
    assert!(text.contains(guard.owner()), "{text}");
    assert!(!locks.lock("stock:42").is_locked().await.unwrap());

    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the holder learns of the loss at its next renewal");
    assert!(lost.is_lost(), "{lost}");

    // Nothing to do on a free lock.
    let again = expect(
        &lockctl(&["--url", &url, "force-unlock", "stock:42", "--yes"]).await,
        0,
    );
    assert!(again.contains("not locked"), "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_asks_first_and_changes_nothing_unless_the_answer_is_yes() {
    let redis = RedisServer::start();
    let url = redis.url();
    let locks = lock_tests::client(&redis).await;
    let guard = locks.lock("stock:42").acquire().await.unwrap();

    for answer in [Some("n\n"), Some("\n"), None] {
        let out = lockctl_with_input(&["--url", &url, "force-unlock", "stock:42"], answer).await;
        expect(&out, 1);
        let err = stderr(&out);
        assert!(
            err.contains(&format!(
                "force-unlock stock:42 held by {}? [y/N]",
                guard.owner()
            )),
            "{err}"
        );
        assert!(err.contains("not confirmed; nothing changed"), "{err}");
        let info = locks.lock("stock:42").info().await.unwrap().expect("held");
        assert_eq!(info.holders[0].owner, guard.owner());
        assert!(!guard.is_lost());
    }

    let out = lockctl_with_input(
        &["--url", &url, "--json", "force-unlock", "stock:42"],
        Some("y\n"),
    )
    .await;
    let doc = json(&out);
    assert_eq!(doc["unlocked"], true);
    assert_eq!(doc["lock"]["holders"][0]["owner"], guard.owner());
    assert!(!locks.lock("stock:42").is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_refreshes_as_often_as_asked_busiest_first() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = lock_tests::client(&redis).await;
    let b = lock_tests::client(&redis).await;
    let quiet = a.lock("quiet").acquire().await.unwrap();
    let busy = a.lock("busy").acquire().await.unwrap();
    let contender = b.lock("busy");
    let waiter = tokio::spawn(async move { contender.acquire().await });
    let subscribed = lock_tests::until_info(&a.lock("busy"), |i| i.waiters.subscribed == 1).await;
    assert!(subscribed, "the waiter never subscribed");

    let out = lockctl(&[
        "--url",
        &url,
        "--json",
        "top",
        "--iterations",
        "2",
        "--interval",
        "100ms",
    ])
    .await;
    let text = expect(&out, 0);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    for (i, line) in lines.iter().enumerate() {
        let doc: Value = serde_json::from_str(line).unwrap();
        assert_eq!(doc["refresh"], i as u64 + 1);
        assert_eq!(doc["locks"][0]["name"], "busy", "{doc}");
        assert_eq!(doc["locks"][0]["waiting"], 1);
        assert_eq!(doc["locks"][1]["name"], "quiet");
        assert_eq!(doc["locks"][1]["token_growth"], 0);
    }

    let table = expect(
        &lockctl(&[
            "--url",
            &url,
            "top",
            "--iterations",
            "2",
            "--interval",
            "10ms",
        ])
        .await,
        0,
    );
    assert_eq!(
        table.matches("lockctl top: prefix lock").count(),
        2,
        "{table}"
    );
    assert!(table.contains("TOKEN+"), "{table}");

    busy.release().await.unwrap();
    let granted = lock_tests::granted(waiter).await;
    drop((granted, quiet));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_prefix_is_honoured() {
    let redis = RedisServer::start();
    let url = redis.url();
    let shop = lock_tests::client_with(&redis, |b| b.prefix("shop")).await;
    let other = lock_tests::client(&redis).await;
    let guard = shop.lock("stock:42").acquire().await.unwrap();
    let elsewhere = other.lock("stock:43").acquire().await.unwrap();
    let doc = json(&lockctl(&["--url", &url, "--prefix", "shop", "--json", "list"]).await);
    assert_eq!(doc["locks"].as_array().unwrap().len(), 1, "{doc}");
    assert_eq!(find(&doc, "stock:42")["key"], "shop:{stock:42}");
    drop((guard, elsewhere));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_keys_under_the_prefix_are_reported_never_fatal() {
    let redis = RedisServer::start();
    let url = redis.url();
    let locks = lock_tests::client(&redis).await;
    let guard = locks.lock("stock:42").acquire().await.unwrap();
    redis.cmd(&["SET", "lock:{x}", "not a lock"]);
    redis.cmd(&["SET", "lock:junk", "1"]);
    redis.cmd(&["RPUSH", "lock:{y}:fence", "a"]);

    let doc = json(&lockctl(&["--url", &url, "--json", "list"]).await);
    assert_eq!(doc["locks"].as_array().unwrap().len(), 1, "{doc}");
    find(&doc, "stock:42");
    let foreign = &doc["skipped"]["foreign"];
    assert_eq!(foreign[0]["key"], "lock:{x}", "{doc}");
    assert_eq!(foreign[0]["found"], "string");
    assert_eq!(doc["skipped"]["unknown_keys"][0], "lock:junk", "{doc}");
    assert_eq!(doc["skipped"]["unknown_key_count"], 1);

    let table = lockctl(&["--url", &url, "list"]).await;
    expect(&table, 0);
    assert!(stderr(&table).contains("lock:{x} holds a Redis string"));

    let out = lockctl(&["--url", &url, "inspect", "x"]).await;
    expect(&out, 1);
    assert!(stderr(&out).contains("not a lock"), "{}", stderr(&out));
    let out = lockctl(&["--url", &url, "force-unlock", "x", "--yes"]).await;
    expect(&out, 1);
    assert_eq!(
        redis.cmd(&["GET", "lock:{x}"]).text(),
        Some("not a lock"),
        "a foreign key is never touched"
    );
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_is_one_clear_line_and_exit_code_1() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    redis.stop();
    let out = lockctl(&["--url", &url, "--timeout", "1s", "list"]).await;
    expect(&out, 1);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("lockctl: error: cannot connect to {url}")),
        "{err}"
    );
    assert!(stdout(&out).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_exit_with_2() {
    for args in [
        &["list", "--limit", "many"][..],
        &["frobnicate"],
        &[],
        &["--sentinel", "redis://127.0.0.1:1", "list"],
        &["--master", "mymaster", "list"],
        &["top", "--interval", "soon"],
        &[
            "--url",
            "redis://127.0.0.1:1",
            "--cluster",
            "redis://127.0.0.1:2",
            "list",
        ],
    ] {
        let out = lockctl(args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).is_empty());
    }
    let help = lockctl(&["--help"]).await;
    assert!(expect(&help, 0).contains("force-unlock"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_listed_from_every_master() {
    let cluster = RedisCluster::start(3, 0);
    let locks = LockClient::cluster_builder(cluster.urls())
        .build()
        .await
        .unwrap();
    let waiting_client = LockClient::cluster_builder(cluster.urls())
        .build()
        .await
        .unwrap();
    // Names until every master holds at least one lock.
    let masters = cluster.master_indices();
    let mut names = Vec::new();
    let mut covered = std::collections::HashSet::new();
    for i in 0..200 {
        let name = format!("stock:{i}");
        if covered.insert(cluster.master_index_for_key(&format!("lock:{{{name}}}"))) {
            names.push(name);
        }
        if covered.len() == masters.len() {
            break;
        }
    }
    assert_eq!(covered.len(), masters.len());
    let mut guards = Vec::new();
    for name in &names {
        guards.push(locks.lock(name).acquire().await.unwrap());
    }
    let contender = waiting_client.lock(&names[0]);
    let waiter = tokio::spawn(async move { contender.acquire().await });
    let subscribed =
        lock_tests::until_info(&locks.lock(&names[0]), |i| i.waiters.subscribed == 1).await;
    assert!(subscribed, "SHARDNUMSUB never counted the waiter");

    let seed = cluster.seed_url();
    let doc = json(&lockctl(&["--cluster", &seed, "--json", "list"]).await);
    let mut listed: Vec<&str> = doc["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    listed.sort();
    let mut expected: Vec<&str> = names.iter().map(String::as_str).collect();
    expected.sort();
    assert_eq!(listed, expected);
    assert_eq!(find(&doc, &names[0])["waiting"], 1);

    let out = lockctl(&["--cluster", &seed, "force-unlock", &names[1], "--yes"]).await;
    expect(&out, 0);
    assert!(!locks.lock(&names[1]).is_locked().await.unwrap());

    let first = guards.remove(0);
    first.release().await.unwrap();
    let granted = lock_tests::granted(waiter).await;
    drop((granted, guards));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_master_behind_sentinel_is_listed() {
    let group = SentinelGroup::start(1);
    let locks = LockClient::sentinel_builder(group.sentinel_urls(), group.master_name())
        .build()
        .await
        .unwrap();
    let guard = locks.lock("stock:42").acquire().await.unwrap();
    let sentinels = group.sentinel_urls().join(",");
    let doc = json(
        &lockctl(&[
            "--sentinel",
            &sentinels,
            "--master",
            group.master_name(),
            "--json",
            "list",
        ])
        .await,
    );
    assert_eq!(owners(find(&doc, "stock:42")), [guard.owner()]);
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_locks_are_inspected_and_force_unlocked_by_their_java_name() {
    let redis = RedisServer::start();
    let url = redis.url();
    let locks = lock_tests::client_with(&redis, |b| {
        b.layout(lock_runtime::Layout::Redisson)
            .watchdog_timeout(Duration::from_secs(3))
    })
    .await;
    let guard = locks.lock("stock:42").fenced().acquire().await.unwrap();

    // Without --redisson the lock is not where lockctl looks.
    let native = expect(&lockctl(&["--url", &url, "inspect", "stock:42"]).await, 0);
    assert_eq!(native.trim(), "stock:42: not locked");

    let doc = json(&lockctl(&["--url", &url, "--redisson", "--json", "inspect", "stock:42"]).await);
    assert_eq!(doc["held"], true, "{doc}");
    assert_eq!(
        doc["fencing_token"].as_u64(),
        Some(guard.fencing_token().await.unwrap())
    );
    assert_eq!(owners(&doc), [guard.owner()]);

    // A scan has no prefix to look under: a clear error, exit code 1.
    let out = lockctl(&["--url", &url, "--redisson", "list"]).await;
    expect(&out, 1);
    assert!(stderr(&out).contains("Redisson"), "{}", stderr(&out));

    let out = lockctl(&[
        "--url",
        &url,
        "--redisson",
        "force-unlock",
        "stock:42",
        "--yes",
    ])
    .await;
    assert!(expect(&out, 0).contains("force-unlocked stock:42"));
    assert_eq!(redis.cmd(&["EXISTS", "stock:42"]).int(), Some(0));
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the holder learns of the loss at its next renewal");
    assert!(lost.is_lost(), "{lost}");

    // A Redisson semaphore (a string at the name: its available count) is read as one, and
    // force-released: its permits go back to the count.
    let permits = locks.semaphore("exports", 3);
    let held = permits.acquire_many(2, Default::default()).await.unwrap();
    let doc = json(&lockctl(&["--url", &url, "--redisson", "--json", "inspect", "exports"]).await);
    assert_eq!(doc["held"], true, "{doc}");
    // One holder per leased permit id, as Java's `release(id)` names them.
    let mut ids: Vec<String> = held
        .owner()
        .strip_prefix("permits:")
        .and_then(|rest| rest.split_once('#'))
        .map(|(ids, _)| ids.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    assert_eq!(ids.len(), 2, "{}", held.owner());
    let mut listed = owners(&doc);
    listed.sort();
    ids.sort();
    assert_eq!(listed, ids);
    let out = lockctl(&[
        "--url",
        &url,
        "--redisson",
        "force-unlock",
        "exports",
        "--yes",
    ])
    .await;
    assert!(expect(&out, 0).contains("force-unlocked exports"));
    assert_eq!(redis.cmd(&["GET", "exports"]).text(), Some("3"));
    let lost = tokio::time::timeout(Duration::from_secs(5), held.lost())
        .await
        .expect("the permits' holder learns of the loss");
    assert!(lost.is_lost(), "{lost}");

    // A read/write lock and a fair lock are force-unlocked as what they are: their waiters
    // (Java's too) are woken by their own message at once, well before the 3 s lease the
    // holder had, or the waiter's own timer.
    let catalog = locks.rw_lock("catalog");
    let writing = catalog.write().acquire().await.unwrap();
    let fair = locks.fair_lock("turns");
    let first = fair.acquire().await.unwrap();
    let (reader, next) = {
        let (catalog, fair) = (catalog.clone(), fair.clone());
        let reader = tokio::spawn(async move {
            let guard = catalog.read().try_acquire(Duration::from_secs(10)).await;
            (std::time::Instant::now(), guard)
        });
        let next = tokio::spawn(async move {
            let guard = fair.try_acquire(Duration::from_secs(10)).await;
            (std::time::Instant::now(), guard)
        });
        (reader, next)
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (name, waiter) in [("catalog", reader), ("turns", next)] {
        let forced = std::time::Instant::now();
        let out = lockctl(&["--url", &url, "--redisson", "force-unlock", name, "--yes"]).await;
        assert!(expect(&out, 0).contains("force-unlocked"), "{name}");
        let (got, guard) = waiter.await.unwrap();
        let guard = guard.unwrap_or_else(|e| panic!("{name}: {e}"));
        let woken = got.saturating_duration_since(forced);
        assert!(
            woken < Duration::from_millis(1200),
            "{name}: woken after {woken:?}"
        );
        guard.release().await.unwrap();
    }
    drop((writing, first));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_leaves_a_lock_that_changed_hands_before_the_answer() {
    use std::io::Read;
    let redis = RedisServer::start();
    let url = redis.url();
    let locks = lock_tests::client(&redis).await;
    let first = locks.lock("stock:7").acquire().await.unwrap();
    let shown = first.owner().to_owned();

    // lockctl shows the first holder and waits for the answer; the answer comes only after the
    // lock changed hands.
    let (prompted_tx, prompted) = tokio::sync::oneshot::channel::<String>();
    let (answer, answer_rx) = std::sync::mpsc::channel::<()>();
    let run = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lockctl"))
            .args(["--url", &url, "force-unlock", "stock:7"])
            .env_remove("LOCKCTL_URL")
            .env_remove("REDIS_URL")
            .env_remove("LOCKCTL_PREFIX")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lockctl");
        let mut err = child.stderr.take().expect("stderr");
        let mut question = Vec::new();
        let mut byte = [0u8; 1];
        while !question.ends_with(b"[y/N] ") {
            if err.read(&mut byte).expect("read stderr") == 0 {
                break;
            }
            question.push(byte[0]);
        }
        let _ = prompted_tx.send(String::from_utf8_lossy(&question).into_owned());
        answer_rx.recv().expect("the answer");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"y\n").expect("write stdin");
        drop(stdin);
        let mut rest = String::new();
        err.read_to_string(&mut rest).expect("read stderr");
        let out = child.wait_with_output().expect("run lockctl");
        (out, rest)
    });
    let question = prompted.await.expect("lockctl asked");
    assert!(question.contains(&shown), "{question}");
    first.release().await.unwrap();
    let successor = locks.lock("stock:7").acquire().await.unwrap();
    answer.send(()).unwrap();
    let (out, rest) = run.await.unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout: {}\nstderr: {rest}",
        stdout(&out)
    );
    assert!(
        rest.contains("changed hands") && rest.contains(successor.owner()),
        "{rest}"
    );
    // The successor still holds, untouched.
    let info = locks.lock("stock:7").info().await.unwrap().expect("held");
    assert_eq!(info.holders[0].owner, successor.owner());
    assert!(!successor.is_lost());
    successor.release().await.unwrap();
}
