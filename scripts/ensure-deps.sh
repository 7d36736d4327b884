#!/usr/bin/env bash
# Installs what the demo, the tests and the benchmarks need where it is missing
# (Debian/Ubuntu: apt-get). Idempotent; installs nothing when everything is there.
#
#   bash scripts/ensure-deps.sh                    # redis-server and redis-cli (which creates the test clusters)
#   bash scripts/ensure-deps.sh openssl            # the same, plus openssl (the TLS tests make certificates with it)
#   bash scripts/ensure-deps.sh openssl postgres   # the same, plus PostgreSQL (lock-fence's tests start their own)
set -euo pipefail
# dependency -> Debian package
declare -A package=([redis-server]=redis-server [redis-cli]=redis-tools [openssl]=openssl [postgres]=postgresql)

# Whether a dependency is installed. Most are a command on PATH; Debian's postgresql package
# keeps the server binaries (initdb, postgres) off PATH in /usr/lib/postgresql/<version>/bin.
present() {
  case "$1" in
    postgres)
      command -v initdb >/dev/null 2>&1 && return 0
      compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
      ;;
    *) command -v "$1" >/dev/null 2>&1 ;;
  esac
}

wanted=(redis-server redis-cli "$@")
missing=()
for dep in "${wanted[@]}"; do
  [ -n "${package[$dep]:-}" ] || { echo "ensure-deps: unknown dependency '$dep'" >&2; exit 2; }
  present "$dep" || missing+=("${package[$dep]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing: ${missing[*]}, and apt-get is not available: install them yourself (Redis >= 7, PostgreSQL >= 15)" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
echo "installing ${missing[*]} with apt-get…" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
for dep in "${wanted[@]}"; do
  present "$dep" || { echo "ensure-deps: '$dep' is still missing after installing ${package[$dep]}" >&2; exit 1; }
done
