#!/usr/bin/env bash
# Benchmarks against rslock, a naive SET NX lock and the Redis limit, on a local redis-server
# started by the benchmark. Short mode (about 2 minutes) by default; `--full` for 3 repetitions
# per figure. Writes BENCHMARKS.md and bench/chart.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-deps.sh
command -v redis-benchmark >/dev/null || { echo "redis-benchmark is missing (Debian: apt-get install -y redis-tools)" >&2; exit 1; }
cargo build --release -q -p lock-bench
exec target/release/lock-bench "$@"
