#!/usr/bin/env bash
# The main demo: the inventory service (3 instances, 2,000 concurrent purchases and 500
# multi-product carts, oversold = 0, stuck = 0).
# Starts its own redis-server on a free loopback port unless REDIS_URL is set. The stock is in
# SQLite (a file in a fresh temp dir, removed at the end: nothing to install, SQLite is compiled
# in) unless DATABASE_URL=postgres://… is set (the demo creates its tables there and resets its
# rows).
# `bash scripts/demo.sh --no-lock` runs the same load unprotected and shows the oversell;
# `--help` lists the options.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-deps.sh
exec cargo run --release -q -p example-inventory -- "$@"
