#!/usr/bin/env bash
# Checks that the published crates build with the rust-version they declare (the workspace's
# `rust-version`): `cargo check` of their libraries and lockctl's binary, with the features
# their docs.rs metadata lists, on that toolchain (installed with rustup, minimal profile, when
# missing), in its own target directory (target/msrv: another compiler shares no artifacts).
#
# Cost on the 2-core CI machine, cold: about 20-60 s to install the toolchain (550 MB) and
# 3 minutes of CPU to check (215 MB); warm, a few seconds. See README "Minimum supported Rust
# version".
#
#   bash scripts/msrv.sh             # install the toolchain when missing, then check
#   bash scripts/msrv.sh --install   # only install it (scripts/test.sh downloads it while the
#                                    # suite builds: the download waits on the network, not the CPU)
set -euo pipefail
install_only=false
if [ "${1:-}" = --install ]; then install_only=true; fi
cd "$(dirname "$0")/.."
read -r msrv packages features < <(cargo metadata --format-version 1 --no-deps --locked | python3 -c '
import json, sys
meta = json.load(sys.stdin)
published = [p for p in meta["packages"] if p["publish"] != []]
versions = {p["rust_version"] for p in published}
assert len(versions) == 1, f"the published crates declare different rust-versions: {versions}"
features = [p["name"] + "/" + f for p in published
            for f in ((p.get("metadata") or {}).get("docs") or {}).get("rs", {}).get("features", [])]
print(versions.pop(), ",".join(p["name"] for p in published), ",".join(features))
')
if ! rustup run "$msrv" rustc --version >/dev/null 2>&1; then
  rustup toolchain install "$msrv" --profile minimal --no-self-update
fi
if $install_only; then exit 0; fi
echo "msrv: $(rustup run "$msrv" rustc --version): ${packages//,/ }"
args=()
for p in ${packages//,/ }; do args+=(-p "$p"); done
CARGO_TARGET_DIR=target/msrv rustup run "$msrv" cargo check --locked -q "${args[@]}" --lib --bins --features "$features"
