#!/usr/bin/env bash
# Packaging, in dependency order: every published crate is packaged (nothing outside its
# directory) and checked from its package alone, each with its default features as crates.io
# users get it, the others reached as packages too (never the workspace's sources); needs
# crates.io's index (the packages' lock files).
#
# Not `cargo package`'s own verification: it builds every package and its dependencies from
# scratch in a target directory of its own (minutes on two cores, and a gigabyte of disk), and
# through a local registry, which it treats as never changing: sources extracted and libraries
# built for an earlier run of the same version would stand in for the packages just made, so it
# had to start empty each time. Here the packages are extracted afresh into a workspace of their
# own (target/package/verify), where `[patch.crates-io]` points each one at the others'
# extracted packages: path sources, which cargo checks for changes, so nothing stale is used;
# and `cargo check` there, in the suite's target directory with the workspace's dev profile,
# reuses the dependencies the lints and docs steps checked where the features agree.
#
#   bash scripts/packages.sh
set -euo pipefail
cd "$(dirname "$0")/.."
crates=(lock-macros lock-runtime lock-fence lock-tower lockctl)
args=()
for c in "${crates[@]}"; do args+=(-p "$c"); done
rm -rf target/package
cargo package "${args[@]}" --allow-dirty --no-verify -q
ls -l target/package/*.crate

verify=target/package/verify
mkdir -p "$verify"
{
  echo '# The published crates as packaged (scripts/packages.sh).'
  echo '[workspace]'
  echo 'resolver = "3"'
  printf 'members = ['
  for c in "${crates[@]}"; do printf '"%s", ' "$(basename target/package/"$c"-[0-9]*.crate .crate)"; done
  echo ']'
  echo '[patch.crates-io]'
  for c in "${crates[@]}"; do
    echo "$c = { path = \"$(basename target/package/"$c"-[0-9]*.crate .crate)\" }"
  done
  # The workspace's dev profile (a package's manifest carries none).
  sed -n '/^\[profile\.dev\]/,$p' Cargo.toml
} > "$verify/Cargo.toml"
# Extracted with the time of extraction (-m), not the packages' fixed one: newer than anything
# an earlier run built from them, so cargo checks them again.
for c in "${crates[@]}"; do tar -xzmf target/package/"$c"-[0-9]*.crate -C "$verify"; done
# The workspace's lock file as the starting point, as `cargo package` takes it: the same
# versions of the dependencies as the tests ran with (packages of their own drop what they
# don't use).
cp Cargo.lock "$verify/"
# Each alone (its own features, not unified with the others'), in dependency order: its library
# and binaries, as `cargo package` builds them.
for c in "${crates[@]}"; do
  (cd "$verify" && cargo check -q -p "$c" --target-dir ../..)
done
echo "packages: ${crates[*]}: packaged and checked from their packages"
