#!/usr/bin/env python3
"""Runs the workspace's test binaries, several at once, from one build.

    python3 scripts/run-tests.py --features FEATURES [--build-messages FILE] [--parallel N] [JOBS...]

With --features: builds every test target as `cargo test --workspace --all-targets --features
FEATURES` does (`--no-run`, cargo's own account of the executables) and runs each binary as
`cargo test` would: from its package's directory, with the CARGO_* variables cargo gives a
test at run time (trybuild reads CARGO, CARGO_MANIFEST_DIR and CARGO_PKG_NAME), no filter, no
arguments. JOBS: files of further runs, one JSON object a line ("-": standard input), as
scripts/compat.sh --jobs prints them: {"name", "group", "cwd", "env", "argv", "seconds"}.

Why at once: the tests are mostly waiting on the servers they start (redis-server, PostgreSQL,
JVMs running Redisson) on free loopback ports, so binaries overlap well on two cores, where
`cargo test` runs them one after another. The longest are started first (the expected seconds
below, or the last run's, kept in target/test-times.json), so the run ends close to the
longest binary. Each binary's output is kept whole in target/test-logs/ and printed whole when
it fails; a line per binary gives its passed/failed/ignored counts and seconds, and the totals
close the run. Exit status 1 when any binary fails. Nothing is retried.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Seconds each binary took in a warm run on two cores, run alone (package/target): the order of
# starting on a machine without target/test-times.json (CI's clean clone). Unknown ones: 1 s.
EXPECTED = {
    "lock-runtime/redisson": 132,
    "lock-tests/failover": 104,
    "lock-tests/chaos": 51,
    "lock-macros-ui/ui": 40,
    "lock-runtime/core": 33,
    "lock-tests/failover_cluster": 31,
    "lock-runtime/topology": 30,
    "lock-fence/postgres": 21,
    "lock-tower/layers": 20,
    "example-inventory/demo": 12,
    "lock-tests/processes": 10,
    "lock-runtime/family": 8,
    "lock-macros/behaviour": 7.6,
    "lock-runtime/behaviour_redis": 7,
    "lock-fence/transaction_order": 6.5,
    "lock-runtime/limits": 6,
    "lock-tests/topology": 6,
    "lockctl/cli": 4.5,
}

# The fault suites: failovers and partitions whose checkers judge timing against leases (a
# Sentinel election, a worker cut off for more than a lease). Two of them at once on two cores
# starve each other's processes (a failover took 35 s; a cut worker's loss check ran late), so
# they run one at a time, beside the other binaries.
FAULT_SUITES = re.compile(r"^(lock-tests/(failover|failover_cluster|chaos)|lock-runtime/topology|compatibility: .*: topology)$")

# Binaries whose tests mostly wait (on elections, renewal rounds, slot migrations) on servers of
# their own: more of them at once than libtest's default (one per core). The topology binary's
# tests, 22 of them, took 57 s two at a time and 30 s four at a time; it is one of the fault
# suites, whose chain is the test step's longest.
TEST_THREADS = {"lock-runtime/topology": 4}

RESULT = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored; (\d+) measured; (\d+) filtered out")


def cargo_jobs(features, build_messages):
    """One job per test executable of the workspace build with FEATURES (building it), or of
    the build whose messages (--message-format=json) are in the file BUILD_MESSAGES."""
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--locked"],
        cwd=ROOT, check=True, stdout=subprocess.PIPE).stdout)
    packages = {p["id"]: p for p in meta["packages"]}
    target_dir = meta["target_directory"]
    cargo = shutil.which("cargo")
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], cwd=ROOT, check=True, text=True,
                             stdout=subprocess.PIPE).stdout.strip()
    target_libdir = subprocess.run(["rustc", "--print", "target-libdir"], cwd=ROOT, check=True, text=True,
                                   stdout=subprocess.PIPE).stdout.strip()
    toolchain_libs = [os.path.join(sysroot, "lib"), target_libdir]
    if build_messages:
        build, messages = None, open(build_messages)
    else:
        build = subprocess.Popen(
            ["cargo", "test", "--workspace", "--all-targets", "--features", features, "--no-run",
             "--message-format=json-render-diagnostics"],
            cwd=ROOT, stdout=subprocess.PIPE, text=True)
        messages = build.stdout
    jobs = []
    for line in messages:
        m = json.loads(line)
        if m.get("reason") == "compiler-message":
            sys.stderr.write(m["message"].get("rendered") or "")
        if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
            continue
        p = packages[m["package_id"]]
        version = p["version"]
        major, minor, patch = re.match(r"(\d+)\.(\d+)\.(\d+)", version).groups()
        manifest_dir = os.path.dirname(p["manifest_path"])
        kind = "/".join(m["target"]["kind"])
        name = p["name"] + "/" + m["target"]["name"] + ("" if kind == "test" else " (" + kind + ")")
        # As cargo: the build's libraries, and the toolchain's (a proc-macro crate's unit tests
        # link the standard library dynamically).
        library_path = [os.path.join(target_dir, "debug", "deps"), os.path.join(target_dir, "debug")] + toolchain_libs
        if os.environ.get("LD_LIBRARY_PATH"):
            library_path.append(os.environ["LD_LIBRARY_PATH"])
        jobs.append({
            "name": name,
            "group": "tests",
            "cwd": manifest_dir,
            "argv": [m["executable"]] + (["--test-threads", str(TEST_THREADS[name])] if name in TEST_THREADS else []),
            "env": {
                "CARGO": cargo,
                "CARGO_MANIFEST_DIR": manifest_dir,
                "CARGO_MANIFEST_PATH": p["manifest_path"],
                "CARGO_PKG_NAME": p["name"],
                "CARGO_PKG_VERSION": version,
                "CARGO_PKG_VERSION_MAJOR": major,
                "CARGO_PKG_VERSION_MINOR": minor,
                "CARGO_PKG_VERSION_PATCH": patch,
                "CARGO_PKG_VERSION_PRE": version.partition("-")[2],
                "CARGO_CRATE_NAME": m["target"]["name"].replace("-", "_"),
                "LD_LIBRARY_PATH": ":".join(library_path),
            },
            "seconds": EXPECTED.get(name, 1),
        })
    if build and build.wait() != 0:
        sys.exit("run-tests: the build failed")
    return jobs


class Queue:
    """The jobs in starting order, handed out so that at most one fault suite runs at a time:
    a worker that would start a second one takes the next other job instead, and waits only
    when fault suites are all that is left."""

    def __init__(self, jobs):
        self.pending = list(jobs)
        self.fault_running = False
        self.cond = threading.Condition()

    def take(self):
        with self.cond:
            while self.pending:
                for i, job in enumerate(self.pending):
                    fault = bool(FAULT_SUITES.match(job_key(job)))
                    if not (fault and self.fault_running):
                        self.fault_running |= fault
                        return self.pending.pop(i)
                self.cond.wait()
            return None

    def done(self, job):
        with self.cond:
            if FAULT_SUITES.match(job_key(job)):
                self.fault_running = False
            self.cond.notify_all()


def worker(queue, logs, lock, results):
    while (job := queue.take()) is not None:
        try:
            result = run_alone(job, logs, lock)
        finally:
            queue.done(job)
        with lock:
            results.append(result)


def job_key(job):
    return job["group"] + ": " + job["name"] if job["group"] != "tests" else job["name"]


def run_alone(job, logs, lock):
    log_path = os.path.join(logs, re.sub(r"[^A-Za-z0-9_.-]+", "_", job["group"] + "-" + job["name"]) + ".log")
    env = dict(os.environ)
    env.update(job.get("env", {}))
    started = time.monotonic()
    with open(log_path, "w+b") as log:
        code = subprocess.run(job["argv"], cwd=job["cwd"], env=env, stdin=subprocess.DEVNULL,
                              stdout=log, stderr=subprocess.STDOUT).returncode
        log.seek(0)
        output = log.read().decode("utf-8", "replace")
    seconds = time.monotonic() - started
    counts = [0, 0, 0, 0, 0]
    for line in output.splitlines():
        r = RESULT.match(line)
        if r:
            counts = [a + int(b) for a, b in zip(counts, r.groups())]
    ok = code == 0
    with lock:
        label = job["name"] if job["group"] == "tests" else job["group"] + ": " + job["name"]
        if not ok:
            print("---- %s (exit status %d), output:" % (label, code))
            print(output, end="" if output.endswith("\n") else "\n")
        print("%s %s: %d passed, %d failed, %d ignored%s (%.1f s)" % (
            "ok  " if ok else "FAIL", label, counts[0], counts[1], counts[2],
            ", %d filtered out" % counts[4] if counts[4] else "", seconds), flush=True)
    return {"job": job, "ok": ok, "counts": counts, "seconds": seconds}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", help="build and run every test binary of the workspace with these features")
    parser.add_argument("--build-messages", metavar="FILE",
                        help="with --features: the build's messages (cargo --message-format=json), not built again")
    parser.add_argument("--parallel", type=int, default=int(os.environ.get("TEST_PARALLEL", "4")),
                        help="binaries run at once (default 4, or TEST_PARALLEL)")
    parser.add_argument("jobs", nargs="*", help="files of further jobs, one JSON object a line ('-': stdin)")
    args = parser.parse_args()

    jobs = cargo_jobs(args.features, args.build_messages) if args.features else []
    for path in args.jobs:
        with (sys.stdin if path == "-" else open(path)) as f:
            jobs += [json.loads(line) for line in f if line.strip()]
    if not jobs:
        sys.exit("run-tests: nothing to run")

    target = os.path.join(ROOT, "target")
    logs = os.path.join(target, "test-logs")
    os.makedirs(logs, exist_ok=True)
    times_path = os.path.join(target, "test-times.json")
    try:
        with open(times_path) as f:
            times = json.load(f)
    except (OSError, ValueError):
        times = {}
    key = lambda job: job["group"] + ": " + job["name"]
    jobs.sort(key=lambda job: -times.get(key(job), job.get("seconds", 1)))

    started = time.monotonic()
    lock = threading.Lock()
    print("run-tests: %d binaries, %d at once; outputs in %s" % (len(jobs), args.parallel, logs), flush=True)
    queue, results = Queue(jobs), []
    workers = [threading.Thread(target=worker, args=(queue, logs, lock, results))
               for _ in range(args.parallel)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if len(results) != len(jobs):
        sys.exit("run-tests: %d of %d binaries did not run (see above)" % (len(jobs) - len(results), len(jobs)))

    times.update({key(r["job"]): round(r["seconds"], 1) for r in results})
    with open(times_path, "w") as f:
        json.dump(times, f, indent=1, sort_keys=True)

    groups = {}
    for r in results:
        g = groups.setdefault(r["job"]["group"], {"counts": [0] * 5, "failed": [], "seconds": 0.0})
        g["counts"] = [a + b for a, b in zip(g["counts"], r["counts"])]
        g["seconds"] += r["seconds"]
        if not r["ok"]:
            g["failed"].append(r["job"]["name"])
    for name, g in groups.items():
        c = g["counts"]
        print("== %s: %d passed, %d failed, %d ignored, %d filtered out; %s (%.0f s of binaries)" % (
            name, c[0], c[1], c[2], c[4],
            "FAILED: " + ", ".join(g["failed"]) if g["failed"] else "all binaries passed", g["seconds"]))
    print("== run-tests: %.0f s for %d binaries" % (time.monotonic() - started, len(results)), flush=True)
    sys.exit(1 if any(not r["ok"] for r in results) else 0)


if __name__ == "__main__":
    main()
