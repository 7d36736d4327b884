#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, and every test against real redis-server (and,
# for lock-fence, PostgreSQL; for the Redisson interop tests, JVMs running Redisson) processes
# that the tests start on free loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."
# A suite run builds once from scratch: incremental caches would only double the disk it uses.
export CARGO_INCREMENTAL=0
bash scripts/ensure-deps.sh openssl postgres java
redis-server --version
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The library without the optional topologies (the workspace build turns cluster and sentinel on).
cargo clippy -p lock-runtime --lib --no-default-features -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q
cargo test --workspace --all-targets
cargo test --workspace --doc
# lock-runtime's optional features, built once together:
# - tls: rediss:// against a TLS redis-server with a private CA, also behind Sentinel
#   (certificates made with openssl, which ensure-deps.sh installed above);
# - memory: MemoryLocks, the shared behaviour tests under paused time (behaviour_redis, the same
#   list against redis-server, is one of the workspace tests above), the hooks, the docs;
# - metrics: the `metrics` facade, read back with metrics-util's debugging recorder.
features=tls,sentinel,memory,metrics
cargo clippy -p lock-runtime --features "$features" --all-targets -- -D warnings
cargo test -p lock-runtime --features "$features" --test tls --test behaviour_memory --test metrics
cargo test -p lock-runtime --features "$features" --doc memory
RUSTDOCFLAGS="-D warnings" cargo doc -p lock-runtime --features "$features" --no-deps -q
# lock-fence with every store it supports (PostgreSQL and SQLite through sqlx, Redis), each test
# against a real server or database file it makes itself; its stores are optional features.
cargo clippy -p lock-fence --all-features --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc -p lock-fence --all-features --no-deps -q
cargo test -p lock-fence --all-features
# The disk the build used, for the record (CI machines have had little to spare).
du -sh target 2>/dev/null || true
# Ready for crates.io (CHANGELOG.md; README, "Versioning" and "Minimum supported Rust version"):
# - the dependency audit: licenses, sources (crates.io and path only) and duplicate versions
#   against the exceptions in scripts/audit.toml, and the published crates' metadata;
python3 scripts/audit.py
# - the published libraries' docs as docs.rs builds them (features from their docs.rs metadata,
#   --cfg docsrs for the feature badges, warnings denied; stable rustdoc with RUSTC_BOOTSTRAP=1,
#   reusing the dependencies built above: see the script for why not nightly);
bash scripts/docsrs.sh
# - the MSRV: the published crates, with their features, checked with the rust-version they
#   declare (the toolchain installed when missing; about 4 minutes cold, see the script);
bash scripts/msrv.sh
# - packaging, in dependency order through a temporary local registry: every published crate is
#   packaged (nothing outside its directory) and built from its package alone, with little
#   debug info (as the workspace's dev profile: a smaller, faster build); needs crates.io's index.
cargo package -p lock-macros -p lock-runtime -p lock-fence -p lock-tower -p lockctl --allow-dirty -q \
  --config 'profile.dev.debug="line-tables-only"' --config 'profile.dev.package."*".debug=false'
ls -l target/package/*.crate
du -sh target 2>/dev/null || true
