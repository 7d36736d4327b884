#!/usr/bin/env bash
# Installs what the demo, the tests and the benchmarks need where it is missing
# (Debian/Ubuntu: apt-get). Idempotent; installs nothing when everything is there.
#
#   bash scripts/ensure-deps.sh            # redis-server and redis-cli (which creates the test clusters)
#   bash scripts/ensure-deps.sh openssl    # the same, plus openssl (the TLS tests make certificates with it)
set -euo pipefail
# command -> Debian package
declare -A package=([redis-server]=redis-server [redis-cli]=redis-tools [openssl]=openssl)
wanted=(redis-server redis-cli "$@")
missing=()
for cmd in "${wanted[@]}"; do
  [ -n "${package[$cmd]:-}" ] || { echo "ensure-deps: unknown dependency '$cmd'" >&2; exit 2; }
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${package[$cmd]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing: ${missing[*]}, and apt-get is not available: install them yourself (Redis >= 7)" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
echo "installing ${missing[*]} with apt-get…" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
for cmd in "${wanted[@]}"; do command -v "$cmd" >/dev/null; done
