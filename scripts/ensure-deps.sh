#!/usr/bin/env bash
# Installs what the demo, the tests and the benchmarks need where it is missing
# (Debian/Ubuntu: apt-get). Idempotent; installs nothing when everything is there.
#
#   bash scripts/ensure-deps.sh                    # redis-server and redis-cli (which creates the test clusters)
#   bash scripts/ensure-deps.sh openssl            # the same, plus openssl (the TLS tests make certificates with it)
#   bash scripts/ensure-deps.sh openssl postgres   # the same, plus PostgreSQL (lock-fence's tests start their own)
#   bash scripts/ensure-deps.sh java               # redis, plus a JDK (17+) and Maven: the Redisson interop tests
#                                                  # build a Java driver against Redisson from Maven Central
set -euo pipefail
# dependency -> Debian package
declare -A package=([redis-server]=redis-server [redis-cli]=redis-tools [openssl]=openssl [postgres]=postgresql
  [java]="default-jdk-headless maven")

# Whether a dependency is installed. Most are a command on PATH; Debian's postgresql package
# keeps the server binaries (initdb, postgres) off PATH in /usr/lib/postgresql/<version>/bin.
present() {
  case "$1" in
    postgres)
      command -v initdb >/dev/null 2>&1 && return 0
      compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
      ;;
    java)
      # The runtime, Maven, and a compiler of release 17 or newer (interop/redisson/pom.xml).
      command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1 || return 1
      local javac_version
      javac_version=$(javac -version 2>&1) || return 1   # "javac 17.0.15"
      javac_version=${javac_version#javac }
      [ "${javac_version%%.*}" -ge 17 ] 2>/dev/null
      ;;
    *) command -v "$1" >/dev/null 2>&1 ;;
  esac
}

wanted=(redis-server redis-cli "$@")
missing=()
for dep in "${wanted[@]}"; do
  [ -n "${package[$dep]:-}" ] || { echo "ensure-deps: unknown dependency '$dep'" >&2; exit 2; }
  # A dependency may take several packages (a JDK and Maven).
  read -ra packages <<< "${package[$dep]}"
  present "$dep" || missing+=("${packages[@]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing: ${missing[*]}, and apt-get is not available: install them yourself (Redis >= 7, PostgreSQL >= 15, JDK >= 17 with Maven)" >&2
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
