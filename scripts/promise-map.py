#!/usr/bin/env python3
"""Checks that every test SAFETY.md names as a promise's proof exists.

    python3 scripts/promise-map.py

SAFETY.md names tests as `path/file.rs::test_name` (or `file.rs::module::test_name`), where the
path is as short as it can be while still naming one file: `exclusion.rs`, `watchdog/tests.rs`,
`tests/tests/chaos.rs`. A reference holds when some tracked `.rs` file whose path ends with that
path defines `fn test_name` (its last `::` part). The test suite runs this, so a test renamed,
moved into a module of another binary or deleted cannot leave a promise pointing at nothing.
"""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ["SAFETY.md", "TOPOLOGIES.md"]
REFERENCE = re.compile(r"`((?:[\w.-]+/)*[\w-]+\.rs)::((?:\w+::)*\w+)`")


def main() -> None:
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.rs"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.split()
    texts: dict[str, str] = {}
    missing = []
    checked = 0
    for doc in DOCS:
        for number, line in enumerate((ROOT / doc).read_text(encoding="utf-8").splitlines(), 1):
            for path, test in REFERENCE.findall(line):
                checked += 1
                name = test.split("::")[-1]
                candidates = [f for f in files if f == path or f.endswith("/" + path)]
                defines = re.compile(rf"\bfn {re.escape(name)}\b")
                found = False
                for f in candidates:
                    if f not in texts:
                        texts[f] = (ROOT / f).read_text(encoding="utf-8")
                    if defines.search(texts[f]):
                        found = True
                        break
                if not found:
                    where = ", ".join(candidates) or "no such file"
                    missing.append(f"{doc}:{number}: `{path}::{test}` ({where})")
    if missing:
        print("promise-map: tests named in the docs that do not exist:", file=sys.stderr)
        for m in missing:
            print("  " + m, file=sys.stderr)
        sys.exit(1)
    print(f"promise-map: all {checked} tests named in {' and '.join(DOCS)} exist")


if __name__ == "__main__":
    main()
