#!/usr/bin/env python3
"""Structure report for the library crates: the in-crate import graph, its
cycles, and the longest functions.

    python3 scripts/structure.py [N]     # N longest functions (default 15)

It also counts lock-runtime's branch sites on the key layout outside `keys/`: each `match`,
`if` or `matches!` whose arms or condition name `Layout::Native`, `Layout::Redisson` or a
`Scheme::Redisson…` (or compare a layout), counted once however many of its arms do.

Imports are read as text: every `crate::a::…` path, and every module named
inside a `use crate::{…}` group, counts as an arrow from the file to module
`a` (a folder module counts as one node). `super::` arrows inside a folder
module are ignored. Function length runs from the `fn` line to its closing
brace, by brace matching outside strings, chars and comments. `tests.rs`,
`fake.rs` and `#[cfg(test)] mod` blocks are left out.
"""
import os
import re
import sys

CRATES = ["lock-runtime/src", "lock-tower/src", "lock-macros/src"]
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SKIP = {"tests.rs", "fake.rs"}


def sources(crate):
    for d, _, files in os.walk(os.path.join(ROOT, crate)):
        for f in sorted(files):
            if f.endswith(".rs") and f not in SKIP:
                yield os.path.join(d, f)


def module_of(crate, path):
    rel = os.path.relpath(path, os.path.join(ROOT, crate))
    top = rel.split(os.sep)[0]
    return top[:-3] if top.endswith(".rs") else top


def strip(text):
    """Blank out comments, strings and char literals, keeping line breaks."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = '"' + hashes
            j = text.find(end, i + 2 + len(hashes))
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or text.startswith("'\\u{", i):
            j = text.find("'", i + 1 if text[i + 1] != "\\" else i + 2)
            out.append("' '")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_mods(code):
    lines = code.split("\n")
    keep, skip, depth = [], False, 0
    for idx, line in enumerate(lines):
        if not skip and re.match(r"\s*#\[cfg\(test\)\]", line) and idx + 1 < len(lines) \
                and re.match(r"\s*(pub(\(crate\))? )?mod \w+\s*\{", lines[idx + 1]):
            skip, depth = True, 0
        if skip:
            depth += line.count("{") - line.count("}")
            keep.append("")
            if "{" in line and depth <= 0 and "mod" in line or (depth <= 0 and "}" in line):
                skip = False
            continue
        keep.append(line)
    return "\n".join(keep)


def imports(crate):
    edges = {}
    for path in sources(crate):
        me = module_of(crate, path)
        code = strip(open(path).read())
        found = set(re.findall(r"crate::([a-z_][a-z_0-9]*)", code))
        for group in re.findall(r"use crate::\{([^;]*)\}\s*;", code, re.S):
            depth, word = 0, ""
            for ch in group + ",":
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                elif ch == "," and depth == 0:
                    head = re.match(r"\s*([a-z_][a-z_0-9]*)", word)
                    if head and head.group(1) not in ("self",):
                        found.add(head.group(1))
                    word = ""
                    continue
                word += ch
        mods = {module_of(crate, p) for p in sources(crate)}
        for m in found:
            if m != me and m in mods and m != "lib":
                edges.setdefault(me, set()).add(m)
    return edges


def cycles(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def functions():
    found = []
    for crate in CRATES:
        for path in sources(crate):
            code = drop_test_mods(strip(open(path).read()))
            lines = code.split("\n")
            for i, line in enumerate(lines):
                m = re.match(r"\s*(pub(\([a-z]+\))? )?(const )?(async )?fn (\w+)", line)
                if not m:
                    continue
                depth, opened = 0, False
                for j in range(i, len(lines)):
                    if not opened and ";" in lines[j] and "{" not in lines[j]:
                        break
                    depth += lines[j].count("{") - lines[j].count("}")
                    opened = opened or "{" in lines[j]
                    if opened and depth <= 0:
                        found.append((j - i + 1, os.path.relpath(path, ROOT), i + 1, m.group(5)))
                        break
    return sorted(found, reverse=True)


LAYOUT_TEST = re.compile(r"Layout::(Redisson|Native)|Scheme::Redisson|layout\(\) *[!=]=|\.layout *[!=]=")


def layout_branch_sites():
    """(file, line) of each branch on the layout in lock-runtime outside keys/ (see the docs)."""
    sites = set()
    crate = "lock-runtime/src"
    for path in sources(crate):
        if os.sep + "keys" + os.sep in path:
            continue
        lines = drop_test_mods(strip(open(path).read())).split("\n")
        for i, line in enumerate(lines):
            if not LAYOUT_TEST.search(line):
                continue
            indent = len(line) - len(line.lstrip())
            site = None
            for j in range(i, -1, -1):
                text = lines[j]
                lead = len(text) - len(text.lstrip())
                if re.search(r"\bmatch\b|\bif\b|matches!\(", text) and (j == i or lead < indent):
                    site = j
                    break
            if site is not None:
                sites.add((os.path.relpath(path, ROOT), site + 1))
    return sorted(sites)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    for crate in CRATES:
        edges = imports(crate)
        print(f"== {crate}: {sum(len(v) for v in edges.values())} module imports ==")
        for a in sorted(edges):
            print(f"  {a} -> {', '.join(sorted(edges[a]))}")
        cyc = cycles(edges)
        print(f"  cycles: {len(cyc)}" + "".join(f"\n    {' <-> '.join(c)}" for c in cyc))
    sites = layout_branch_sites()
    files = sorted({f for f, _ in sites})
    print(f"\n== branch sites on the layout outside lock-runtime/src/keys/: {len(sites)} in {len(files)} files ==")
    for f, line in sites:
        print(f"  {f}:{line}")
    print(f"\n== longest functions (top {n}) ==")
    for length, path, line, name in functions()[:n]:
        print(f"  {length:4}  {path}:{line}  {name}")


if __name__ == "__main__":
    main()
