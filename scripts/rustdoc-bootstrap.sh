#!/bin/sh
# rustdoc allowed nightly features (`#![feature(doc_cfg)]` under `--cfg docsrs`) on a stable
# toolchain. scripts/docsrs.sh runs it as cargo's RUSTDOC, so only rustdoc sees
# RUSTC_BOOTSTRAP: cargo and the build scripts do not, and the dependencies the suite has
# already compiled stay valid.
RUSTC_BOOTSTRAP=1 exec rustdoc "$@"
