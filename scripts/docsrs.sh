#!/usr/bin/env bash
# Builds each published library's docs the way docs.rs does: alone, with the features its
# `[package.metadata.docs.rs]` lists (read from `cargo metadata`, so the list lives in one
# place), `--cfg docsrs` for rustdoc (the feature badges of `doc_cfg`), `DOCS_RS=1`, and
# warnings denied. Output: target/docsrs/doc/<crate>/.
#
# Toolchain: nightly when it is installed, because docs.rs builds with nightly and nightly is
# where `doc_cfg` and rustdoc's lints change (the removal of `doc_auto_cfg` broke many crates'
# docs.rs builds and no stable build); otherwise stable with RUSTC_BOOTSTRAP=1, which accepts
# the same `#![feature(doc_cfg)]` without a second toolchain to download. Either way the build
# has its own target directory: a different compiler (or RUSTC_BOOTSTRAP, which build scripts
# such as proc-macro2's watch) would otherwise rebuild the suite's dependencies back and forth.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=target/docsrs DOCS_RS=1 RUSTDOCFLAGS="--cfg docsrs -D warnings"
if rustup run nightly rustc --version >/dev/null 2>&1; then
  cargo=(rustup run nightly cargo)
  echo "docsrs: $(rustup run nightly rustc --version)"
else
  cargo=(cargo)
  export RUSTC_BOOTSTRAP=1
  echo "docsrs: no nightly toolchain; $(rustc --version) with RUSTC_BOOTSTRAP=1"
fi
# "<crate> <comma-separated features>" for each published library with docs.rs metadata.
crates=$(cargo metadata --format-version 1 --no-deps --locked | python3 -c '
import json, sys
meta = json.load(sys.stdin)
for p in meta["packages"]:
    docs = ((p.get("metadata") or {}).get("docs") or {}).get("rs")
    if p["publish"] == [] or docs is None or not any("lib" in t["kind"] or "proc-macro" in t["kind"] for t in p["targets"]):
        continue
    assert not docs.get("all-features"), p["name"] + ": name the features instead of all-features"
    print(p["name"], ",".join(docs.get("features", [])) or "-")
')
while read -r crate features; do
  args=(doc -p "$crate" --lib --no-deps -q)
  [ "$features" = "-" ] || args+=(--features "$features")
  echo "docsrs: $crate ${features/#-/(default features)}"
  "${cargo[@]}" "${args[@]}"
done <<< "$crates"
