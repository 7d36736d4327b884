#!/usr/bin/env python3
"""Structure report and check for the workspace: the import graph by file, its cycles, function
and file sizes, test binaries, and lock-runtime's branch sites on the key layout. Reads the sources
as text; builds nothing.

    python3 scripts/structure.py [N]        # report: graphs, cycles, N longest functions (default 15)
    python3 scripts/structure.py --check    # check the limits below; exit 1 with one line per violation

**Imports, by file.** Each `.rs` file is a node. Every path a file names (in a `use` tree, or inline as
`crate::…`, `super::…` or `self::…`, or from `use child::…` in a folder's `mod.rs`) is resolved to the
file that defines its item: the longest prefix of the path that is a module gives a file; if that file
only imports the next name (`use`, `pub use`, a glob), the import is followed to where the name is
defined, so `use crate::Name` where the crate root says `pub use module::Name` is an arrow to
`module`'s file. A `pub use` is an arrow only when the file also names the item in its own code (a
re-export alone is not a dependency). `mod x;` declarations are not arrows.

**Sizes.** Function length runs from the `fn` line to its closing brace, by brace matching outside
strings, chars and comments. A file's length is its line count. `tests.rs`, `fake.rs` and
`#[cfg(test)] mod` blocks are left out, and so are integration tests (`<package>/tests/**`).

**Layout branch sites.** lock-runtime's branch sites on the key layout outside `keys/`: each `match`,
`if` or `matches!` whose arms or condition name `Layout::Native`, `Layout::Redisson` or a
`Scheme::Redisson…` (or compare a layout), counted once however many of its arms do.

**Test binaries.** Per package: `tests/*.rs`, `tests/*/main.rs` and any `[[test]]` target with a
`path` elsewhere, each counted once.
"""
import glob
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# --- Limits of `--check` -------------------------------------------------------------------------
# The only import cycle allowed, as a pair of files: the client's shared state and the watchdog it
# starts, which reports losses back into it.
ALLOWED_CYCLES = [
    {"lock-runtime/src/client/inner.rs", "lock-runtime/src/watchdog.rs"},
]
# No function (outside tests) longer than this, in lines.
MAX_FN_LINES = 90
# No source file longer than this, in lines.
MAX_FILE_LINES = 800
# Test binaries across the workspace (each links the crates it tests: fewer is a faster suite).
# The count when the check was written; lower it when binaries merge.
MAX_TEST_BINARIES = 24
# lock-runtime's branch sites on the key layout outside `keys/` (the layout is asked by name there).
# The count when the check was written; lower it when sites move into `keys/`.
MAX_LAYOUT_SITES = 6

# Import cycles are checked in the library crates (CRATES); the report draws the others' graphs too.
# A cycle among the files of one folder module (e.g. `acquire/mod.rs` and `acquire/place.rs`, whose
# files share the module's types through `super::`) is that room's own business: reported, not
# failed. A cycle that crosses modules fails, as one between two modules at the crate root does.

# --- What is read --------------------------------------------------------------------------------
# The library crates: their source trees (graphs and sizes).
CRATES = ["lock-runtime/src", "lock-tower/src", "lock-macros/src", "lock-fence/src", "lockctl/src"]
# Held to the same sizes: the test harness (and its worker binary), the bench, the examples.
OTHERS = ["tests/src", "bench/src"] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "examples", "*", "src")))
SKIP = {"tests.rs", "fake.rs"}
IDENT = r"[A-Za-z_][A-Za-z_0-9]*"


def rel(path):
    return os.path.relpath(path, ROOT)


def crate_roots(tree):
    """The crates in a source tree: (root file, directory its modules live in, files)."""
    base = os.path.join(ROOT, tree)
    bins = os.path.join(base, "bin")
    out = []
    for root in ("lib.rs", "main.rs"):
        if os.path.exists(os.path.join(base, root)):
            files = [p for p in walk(base) if not p.startswith(bins + os.sep)]
            out.append((os.path.join(base, root), base, files))
    if os.path.isdir(bins):
        for entry in sorted(os.listdir(bins)):
            full = os.path.join(bins, entry)
            if entry.endswith(".rs"):
                out.append((full, bins, [full]))
            elif os.path.exists(os.path.join(full, "main.rs")):
                out.append((os.path.join(full, "main.rs"), full, list(walk(full))))
    return out


def walk(base):
    for d, dirs, files in os.walk(base):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".rs") and f not in SKIP:
                yield os.path.join(d, f)


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


_CODE = {}


def code_of(path):
    if path not in _CODE:
        _CODE[path] = drop_test_mods(strip(open(path).read()))
    return _CODE[path]


# --- The import graph by file ---------------------------------------------------------------------

def split_tree(tree):
    """A `use` tree as (segments, local name or None for a glob) pairs."""
    tree = re.sub(r"\s+as\s+", " as ", re.sub(r"\s*(::|[{},])\s*", r"\1", tree.strip()))
    out = []

    def walk_tree(prefix, t):
        parts, depth, word = [], 0, ""
        for ch in t + ",":
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                if word:
                    parts.append(word)
                word = ""
                continue
            word += ch
        for part in parts:
            m = re.match(r"^((?:" + IDENT + r"::)*)\{(.*)\}$", part)
            if m:
                walk_tree(prefix + [s for s in m.group(1).split("::") if s], m.group(2))
                continue
            alias = None
            if " as " in part:
                part, alias = part.split(" as ", 1)
            segs = prefix + [s for s in part.split("::") if s]
            if segs and segs[-1] == "*":
                out.append((segs[:-1], None))
            elif segs and segs[-1] == "self":
                out.append((segs[:-1], alias or segs[-2] if len(segs) > 1 else None))
            elif segs:
                out.append((segs, alias or segs[-1]))

    walk_tree([], tree)
    return out


class Crate:
    def __init__(self, root, base, files):
        self.root, self.base, self.files = root, base, files
        self.mod_file, self.file_mod = {}, {}
        for f in files:
            if f == root:
                mp = ()
            else:
                r = os.path.relpath(f, base)[:-3].split(os.sep)
                if r[-1] == "mod":
                    r = r[:-1]
                mp = tuple(r)
            self.mod_file[mp] = f
            self.file_mod[f] = mp
        self.uses = {f: self._uses(f) for f in files}

    def _uses(self, f):
        """Each `use` of the file: (absolute segments or None, local name or None, is pub)."""
        code = code_of(f)
        me = self.file_mod[f]
        out = []
        for m in re.finditer(r"(^|[;{}\n])\s*(#\[[^\]]*\]\s*)*(pub(\([^)]*\))?\s+)?use\s+([^;]*);", code):
            for segs, local in split_tree(m.group(5)):
                out.append((self.absolute(me, segs), local, bool(m.group(3)), m.start(5)))
        return out

    def absolute(self, me, segs):
        if not segs:
            return None
        if segs[0] == "crate":
            return tuple(segs[1:])
        if segs[0] in ("self", "super"):
            at = list(me)
            i = 0
            while i < len(segs) and segs[i] in ("self", "super"):
                if segs[i] == "super":
                    if not at:
                        return None
                    at.pop()
                i += 1
            return tuple(at) + tuple(segs[i:])
        if me + (segs[0],) in self.mod_file:
            return me + tuple(segs)
        return None

    def resolve(self, path, seen=()):
        """The file defining the item `path` names (None outside the crate)."""
        if path is None:
            return None
        for k in range(len(path), -1, -1):
            if path[:k] in self.mod_file:
                break
        f = self.mod_file[path[:k]]
        rest = path[k:]
        if not rest or (f, rest[0]) in seen:
            return f
        name = rest[0]
        if re.search(r"\bmod\s+" + name + r"\s*;", code_of(f)) and path[:k] + (name,) not in self.mod_file:
            return None  # a module left out (tests.rs, fake.rs)
        if re.search(r"\b(struct|enum|trait|type|fn|const|static|union|mod)\s+" + name + r"\b|macro_rules!\s*" + name + r"\b",
                     code_of(f)):
            return f
        for segs, local, _, _ in self.uses[f]:
            if local == name and segs is not None:
                return self.resolve(segs + rest[1:], seen + ((f, name),))
        for segs, local, _, _ in self.uses[f]:
            if local is None and segs is not None and segs in self.mod_file:
                target = self.resolve(segs + rest, seen + ((f, name),))
                if target != self.mod_file[segs] or re.search(r"\b" + name + r"\b", code_of(target)):
                    return target
        return f

    def edges(self):
        out = {}
        for f in self.files:
            code = code_of(f)
            me = self.file_mod[f]
            body = re.sub(r"(^|[;{}\n])(\s*(#\[[^\]]*\]\s*)*(pub(\([^)]*\))?\s+)?use\s+[^;]*;)",
                          lambda m: m.group(1) + re.sub(r"[^\n]", " ", m.group(2)), code)
            targets = set()
            for segs, local, public, _ in self.uses[f]:
                if segs is None:
                    continue
                if public and (local is None or not re.search(r"\b" + local + r"\b", body)):
                    continue
                targets.add(self.resolve(segs))
            for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:crate|super|self)(?:::(?:super|" + IDENT + r"))+)", body):
                segs = m.group(1).split("::")
                targets.add(self.resolve(self.absolute(me, segs)))
            targets.discard(None)
            targets.discard(f)
            if targets:
                out[rel(f)] = {rel(t) for t in targets}
        return out


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

    sys.setrecursionlimit(10000)
    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def arrows_within(edges, comp):
    comp = set(comp)
    return [f"{a} -> {b}" for a in sorted(comp) for b in sorted(edges.get(a, ())) if b in comp]


# --- Sizes -----------------------------------------------------------------------------------------

def functions(trees):
    found = []
    for tree in trees:
        for path in walk(os.path.join(ROOT, tree)):
            lines = code_of(path).split("\n")
            for i, line in enumerate(lines):
                m = re.match(r"\s*(pub(\([a-z]+\))? )?(const )?(async )?(unsafe )?fn (\w+)", line)
                if not m:
                    continue
                depth, opened = 0, False
                for j in range(i, len(lines)):
                    if not opened and ";" in lines[j] and "{" not in lines[j]:
                        break
                    depth += lines[j].count("{") - lines[j].count("}")
                    opened = opened or "{" in lines[j]
                    if opened and depth <= 0:
                        found.append((j - i + 1, rel(path), i + 1, m.group(6)))
                        break
    return sorted(found, reverse=True)


def files(trees):
    found = []
    for tree in trees:
        for path in walk(os.path.join(ROOT, tree)):
            with open(path) as fh:
                found.append((sum(1 for _ in fh), rel(path)))
    return sorted(found, reverse=True)


# --- Test binaries ---------------------------------------------------------------------------------

def packages():
    text = open(os.path.join(ROOT, "Cargo.toml")).read()
    members = re.search(r"members\s*=\s*\[([^\]]*)\]", text).group(1)
    out = []
    for pat in re.findall(r'"([^"]+)"', members):
        out += sorted(p for p in glob.glob(os.path.join(ROOT, pat)) if os.path.exists(os.path.join(p, "Cargo.toml")))
    return out


def test_binaries():
    found = []
    for pkg in packages():
        names = set()
        for f in glob.glob(os.path.join(pkg, "tests", "*.rs")):
            names.add(os.path.basename(f)[:-3])
        for f in glob.glob(os.path.join(pkg, "tests", "*", "main.rs")):
            names.add(os.path.basename(os.path.dirname(f)))
        manifest = open(os.path.join(pkg, "Cargo.toml")).read()
        for block in re.findall(r"\[\[test\]\]([^\[]*)", manifest):
            name = re.search(r'name\s*=\s*"([^"]+)"', block)
            if name:
                names.add(name.group(1))
        found += [f"{rel(pkg)}:{n}" for n in sorted(names)]
    return found


# --- Layout branch sites ----------------------------------------------------------------------------

LAYOUT_TEST = re.compile(r"Layout::(Redisson|Native)|Scheme::Redisson|layout\(\) *[!=]=|\.layout *[!=]=")


def layout_branch_sites():
    """(file, line) of each branch on the layout in lock-runtime outside keys/ (see the docs)."""
    sites = set()
    for path in walk(os.path.join(ROOT, "lock-runtime/src")):
        if os.sep + "keys" + os.sep in path:
            continue
        lines = code_of(path).split("\n")
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
                sites.add((rel(path), site + 1))
    return sorted(sites)


# --- Report and check -----------------------------------------------------------------------------

def graphs(trees):
    for tree in trees:
        for root, base, fs in crate_roots(tree):
            yield rel(root), Crate(root, base, fs).edges()


def report(n):
    for root, edges in graphs(CRATES + OTHERS):
        print(f"== {root}: {sum(len(v) for v in edges.values())} file imports ==")
        for a in sorted(edges):
            print(f"  {a} -> {', '.join(sorted(edges[a]))}")
        cyc = cycles(edges)
        print(f"  cycles: {len(cyc)}" + "".join(f"\n    {' <-> '.join(c)}" for c in cyc))
    sites = layout_branch_sites()
    print(f"\n== branch sites on the layout outside lock-runtime/src/keys/: {len(sites)} in "
          f"{len({f for f, _ in sites})} files ==")
    for f, line in sites:
        print(f"  {f}:{line}")
    print(f"\n== longest functions (top {n}) ==")
    for length, path, line, name in functions(CRATES + OTHERS)[:n]:
        print(f"  {length:4}  {path}:{line}  {name}")
    print("\n== largest files (top 10) ==")
    for length, path in files(CRATES + OTHERS)[:10]:
        print(f"  {length:4}  {path}")
    bins = test_binaries()
    print(f"\n== test binaries: {len(bins)} ==\n  " + ", ".join(bins))


def within_one_folder(root, comp):
    """Whether every file of a cycle lies in one folder module (not the crate root's folder)."""
    folders = {os.path.dirname(f) for f in comp}
    return len(folders) == 1 and folders != {os.path.dirname(root)}


def check():
    problems = []
    for root, edges in graphs(CRATES):
        for comp in cycles(edges):
            if set(comp) in ALLOWED_CYCLES or within_one_folder(root, comp):
                continue
            problems.append(f"import cycle ({root}): {' <-> '.join(comp)}\n      "
                            + "\n      ".join(arrows_within(edges, comp)))
    for length, path, line, name in functions(CRATES + OTHERS):
        if length > MAX_FN_LINES:
            problems.append(f"function too long: {path}:{line} {name} is {length} lines (max {MAX_FN_LINES})")
    for length, path in files(CRATES + OTHERS):
        if length > MAX_FILE_LINES:
            problems.append(f"file too long: {path} is {length} lines (max {MAX_FILE_LINES})")
    bins = test_binaries()
    if len(bins) > MAX_TEST_BINARIES:
        problems.append(f"too many test binaries: {len(bins)} (max {MAX_TEST_BINARIES}): {', '.join(bins)}")
    sites = layout_branch_sites()
    if len(sites) > MAX_LAYOUT_SITES:
        problems.append(f"too many branch sites on the layout outside lock-runtime/src/keys/: {len(sites)} "
                        f"(max {MAX_LAYOUT_SITES}): " + ", ".join(f"{f}:{line}" for f, line in sites))
    for p in problems:
        print(f"structure: {p}", file=sys.stderr)
    if problems:
        print(f"structure: {len(problems)} violation(s)", file=sys.stderr)
        return 1
    print(f"structure: ok ({len(bins)} test binaries, {len(sites)} layout branch sites)")
    return 0


def main():
    if sys.argv[1:] == ["--check"]:
        sys.exit(check())
    report(int(sys.argv[1]) if len(sys.argv) > 1 else 15)


if __name__ == "__main__":
    main()
