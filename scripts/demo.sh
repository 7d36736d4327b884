#!/usr/bin/env bash
# The main demo. Starts its own redis-server on a free loopback port unless REDIS_URL is set.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
exec cargo run --release -q -p example-turns -- "$@"
