#!/usr/bin/env bash
# Builds each published library's docs the way docs.rs does: alone, with the features its
# `[package.metadata.docs.rs]` lists (read from `cargo metadata`, so the list lives in one
# place), `--cfg docsrs` for rustdoc (the feature badges of `doc_cfg`), `DOCS_RS=1`, and
# warnings denied. Output: target/doc/<crate>/.
#
# Toolchain: the suite's stable one, with nightly features allowed for rustdoc alone
# (scripts/rustdoc-bootstrap.sh sets RUSTC_BOOTSTRAP=1 for it), rather than nightly, which
# docs.rs runs. The reason is cost: a CI machine starts cold every time, and a nightly build (or
# RUSTC_BOOTSTRAP=1 for all of cargo, which build scripts such as proc-macro2's watch) compiles
# every dependency again, about 300 MB and several minutes on two cores; this way the
# dependencies the suite already built are reused and the step takes seconds. What it gives up:
# a change in nightly rustdoc shows on docs.rs first (`doc_cfg` itself is checked here: its
# badges appear on stable rustdoc as on nightly).
set -euo pipefail
cd "$(dirname "$0")/.."
export DOCS_RS=1 RUSTDOCFLAGS="--cfg docsrs -D warnings" RUSTDOC="$PWD/scripts/rustdoc-bootstrap.sh"
echo "docsrs: $(rustdoc --version), RUSTC_BOOTSTRAP=1 for rustdoc"
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
  cargo "${args[@]}"
done <<< "$crates"
