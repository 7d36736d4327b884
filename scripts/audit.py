#!/usr/bin/env python3
"""Dependency and package-metadata audit, from `cargo metadata` alone (standard library only).

Checks, against the exceptions in scripts/audit.toml:

- licenses: every package's license expression is satisfied by the allow-list;
- sources: every package comes from crates.io or this workspace (no git, no other registry);
- duplicates: no crate is built in two versions on x86_64-unknown-linux-gnu unless listed, with
  those exact versions;
- the published crates' metadata: description, license, repository, a docs.rs documentation
  URL, rust-version, a README in the package, at most five keywords, known category slugs, and
  LICENSE-MIT / LICENSE-APACHE in the package, identical to the root's.

The graph is every workspace member with all features, dev-dependencies included, for every
platform (licenses and sources) or for Linux (duplicates). Exit status 1 with one line per
problem; 0 with a one-line summary.

    python3 scripts/audit.py
"""

import json
import re
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "scripts" / "audit.toml"
LINUX = "x86_64-unknown-linux-gnu"
CRATES_IO = {
    "registry+https://github.com/rust-lang/crates.io-index",
    "sparse+https://index.crates.io/",
}
KEYWORD = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,19}$")


def metadata(*extra):
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--all-features", "--locked", *extra],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def tokens(expression):
    # Old crates write `MIT/Apache-2.0` for `MIT OR Apache-2.0`.
    return re.findall(r"\(|\)|[^\s()/]+|/", expression)


def satisfied(expression, allowed):
    """Whether an SPDX expression can be met with allowed licenses (AND binds tighter than OR)."""
    toks = tokens(expression)
    pos = 0

    def peek():
        return toks[pos] if pos < len(toks) else None

    def take():
        nonlocal pos
        pos += 1
        return toks[pos - 1]

    def primary():
        tok = take()
        if tok == "(":
            value = disjunction()
            if take() != ")":
                raise ValueError("unbalanced parentheses")
            return value
        if tok in (None, ")", "AND", "OR", "WITH", "/"):
            raise ValueError(f"unexpected {tok!r}")
        if peek() == "WITH":
            take()
            take()  # the exception: only grants more than `tok` does
        return tok.removesuffix("+") in allowed

    def conjunction():
        value = primary()
        while peek() == "AND":
            take()
            value = primary() and value
        return value

    def disjunction():
        value = conjunction()
        while peek() in ("OR", "/"):
            take()
            value = conjunction() or value
        return value

    value = disjunction()
    if pos != len(toks):
        raise ValueError(f"trailing {toks[pos]!r}")
    return value


def pulled_by(meta):
    """package id -> sorted "name version" of the packages that depend on it."""
    names = {p["id"]: f'{p["name"]} {p["version"]}' for p in meta["packages"]}
    parents = defaultdict(set)
    for node in meta["resolve"]["nodes"]:
        for dep in node["deps"]:
            parents[dep["pkg"]].add(names[node["id"]])
    return {pkg: ", ".join(sorted(by)) for pkg, by in parents.items()}


def in_graph(meta):
    ids = {node["id"] for node in meta["resolve"]["nodes"]}
    return [p for p in meta["packages"] if p["id"] in ids]


def check_licenses_and_sources(meta, config, problems):
    allowed = set(config["licenses"]["allow"])
    sources = set(config["sources"]["allow"])
    by = pulled_by(meta)
    for p in in_graph(meta):
        what = f'{p["name"]} {p["version"]} (pulled in by {by.get(p["id"], "the workspace")})'
        source = p["source"]
        kind = "path" if source is None else "crates.io" if source in CRATES_IO else source
        if kind not in sources:
            problems.append(f"source: {what} comes from {kind}; allowed: {', '.join(sorted(sources))}")
        if p["source"] is None and p["publish"] == []:
            continue  # our unpublished test, bench and example crates: never distributed
        expression = p["license"]
        if not expression:
            problems.append(f"license: {what} declares no SPDX license (license-file: {p['license_file']})")
            continue
        try:
            ok = satisfied(expression, allowed)
        except ValueError as e:
            problems.append(f"license: {what} has an unreadable expression {expression!r} ({e})")
            continue
        if not ok:
            problems.append(
                f"license: {what} is {expression!r}, not satisfied by the allow-list in {CONFIG.name}"
            )


def check_duplicates(meta, config, problems, notes):
    accepted = config.get("duplicates", {})
    by = pulled_by(meta)
    versions = defaultdict(dict)
    for p in in_graph(meta):
        versions[p["name"]][p["version"]] = p["id"]
    for name, found in sorted(versions.items()):
        if len(found) < 2:
            if name in accepted:
                notes.append(f"duplicates: {name} is no longer duplicated; remove its entry")
            continue
        ok = set(accepted.get(name, {}).get("versions", []))
        new = sorted(set(found) - ok)
        if new:
            detail = "; ".join(f"{v} pulled in by {by.get(found[v], '?')}" for v in sorted(found))
            problems.append(
                f"duplicate: {name} in versions {', '.join(sorted(found))} ({detail}); "
                f"not accepted: {', '.join(new)}"
            )
        elif set(found) != ok:
            notes.append(f"duplicates: {name} lists versions no longer present: {', '.join(sorted(ok - set(found)))}")


def check_published(meta, config, problems):
    categories = set(config["metadata"]["categories"])
    root_licenses = {name: (ROOT / name).read_bytes() for name in ("LICENSE-MIT", "LICENSE-APACHE")}
    members = set(meta["workspace_members"])
    published = [p for p in meta["packages"] if p["id"] in members and p["publish"] != []]
    for p in published:
        name = p["name"]
        directory = Path(p["manifest_path"]).parent
        for field in ("description", "license", "repository", "rust_version"):
            if not p.get(field):
                problems.append(f"metadata: {name} has no {field.replace('_', '-')}")
        if p.get("documentation") != f"https://docs.rs/{name}":
            problems.append(f"metadata: {name}'s documentation is {p.get('documentation')!r}, not https://docs.rs/{name}")
        readme = p.get("readme")
        if not readme or not (directory / readme).resolve().is_relative_to(directory.resolve()):
            problems.append(f"metadata: {name}'s readme {readme!r} is not a file inside its package")
        elif not (directory / readme).is_file():
            problems.append(f"metadata: {name}'s readme {readme} does not exist")
        keywords = p.get("keywords", [])
        if len(keywords) > 5 or not all(KEYWORD.match(k) for k in keywords) or not keywords:
            problems.append(f"metadata: {name}'s keywords {keywords} (1 to 5, each a letter then up to 19 of [A-Za-z0-9_-])")
        unknown = [c for c in p.get("categories", []) if c not in categories]
        if unknown or not p.get("categories") or len(p["categories"]) > 5:
            problems.append(f"metadata: {name}'s categories {p.get('categories')}: unknown {unknown} (known: {CONFIG.name})")
        for license_file, text in root_licenses.items():
            copy = directory / license_file
            if not copy.is_file() or copy.read_bytes() != text:
                problems.append(f"metadata: {name}/{license_file} is missing or differs from the root's")
    return published


def main():
    config = tomllib.loads(CONFIG.read_text())
    problems, notes = [], []
    everywhere = metadata()
    check_licenses_and_sources(everywhere, config, problems)
    check_duplicates(metadata("--filter-platform", LINUX), config, problems, notes)
    published = check_published(everywhere, config, problems)
    for note in notes:
        print(f"audit: note: {note}")
    if problems:
        for problem in problems:
            print(f"audit: {problem}", file=sys.stderr)
        print(
            f"audit: {len(problems)} problem(s); accept a dependency only by adding it, with a "
            f"reason, to {CONFIG.relative_to(ROOT)}",
            file=sys.stderr,
        )
        return 1
    print(
        f"audit: {len(in_graph(everywhere))} packages: licenses and sources allowed, "
        f"{len(config.get('duplicates', {}))} accepted duplicates, "
        f"metadata of {len(published)} published crates complete"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
