#!/usr/bin/env bash
# Builds the docs as docs.rs does: `--cfg docsrs` for rustdoc (the feature badges of `doc_cfg`),
# every feature the published crates' `[package.metadata.docs.rs]` names, warnings denied.
#
#   bash scripts/docsrs.sh FEATURES   # FEATURES: the suite's feature set (scripts/test.sh)
#
# One `cargo doc` of the published crates (those docs.rs builds) with the suite's feature set,
# not one per crate with its own list as docs.rs runs them: each feature set is a check build of
# the dependencies of its own, and one per crate cost minutes on a cold CI machine. The script
# checks that FEATURES covers every docs.rs list, so the docs shown here are the docs.rs ones
# (what it gives up: a crate whose docs only build with a feature another crate turns on would
# pass here and fail on docs.rs). The harness, the bench and the examples are not published:
# documenting them too checked 64 more packages for rustdoc (tonic, prost, hyper, fred, …);
# their public items are documented all the same (`missing_docs`, in the lints).
#
# Toolchain: the suite's stable one, with nightly features allowed for rustdoc alone
# (scripts/rustdoc-bootstrap.sh sets RUSTC_BOOTSTRAP=1 for it), rather than nightly, which
# docs.rs runs: a nightly build (or RUSTC_BOOTSTRAP=1 for all of cargo, which build scripts
# such as proc-macro2's watch) compiles every dependency again, several minutes on two cores.
# `doc_cfg` itself is checked here: its badges appear on stable rustdoc as on nightly.
set -euo pipefail
cd "$(dirname "$0")/.."
features=${1:?usage: docsrs.sh FEATURES}
packages=$(cargo metadata --format-version 1 --no-deps --locked | FEATURES="$features" python3 -c '
import json, os, sys
meta = json.load(sys.stdin)
have = set(os.environ["FEATURES"].split(","))
for p in meta["packages"]:
    docs = ((p.get("metadata") or {}).get("docs") or {}).get("rs")
    if p["publish"] == []:
        continue
    print("-p", p["name"])
    if docs is None:
        continue
    assert not docs.get("all-features"), p["name"] + ": name the features instead of all-features"
    default = set(p["features"].get("default", []))
    missing = [f for f in docs.get("features", []) if f not in default and p["name"] + "/" + f not in have]
    if missing:
        sys.exit("docsrs: %s: docs.rs features %s are not in the suite feature set" % (p["name"], missing))
')
echo "docsrs: $(rustdoc --version), RUSTC_BOOTSTRAP=1 for rustdoc"
RUSTDOCFLAGS="--cfg docsrs -D warnings" RUSTDOC="$PWD/scripts/rustdoc-bootstrap.sh" \
  cargo doc $packages --no-deps -q --features "$features"
