#!/usr/bin/env bash
# Installs redis-server (and redis-cli, which creates the test clusters) where missing
# (Debian/Ubuntu: apt-get). Idempotent.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "redis-server or redis-cli is missing and apt-get is not available: install Redis (>= 7) yourself" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
echo "installing redis-server with apt-get…" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server redis-tools >/dev/null
command -v redis-server >/dev/null
command -v redis-cli >/dev/null
