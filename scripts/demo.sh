#!/usr/bin/env bash
# The main demo: the inventory service (3 instances, 2,000 concurrent purchases, oversold = 0).
# Starts its own redis-server on a free loopback port unless REDIS_URL is set.
# `bash scripts/demo.sh --no-lock` runs the same load unprotected and shows the oversell.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-deps.sh
exec cargo run --release -q -p example-inventory -- "$@"
