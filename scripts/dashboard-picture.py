#!/usr/bin/env python3
"""Draws dashboards/lock-runtime.png: the Grafana dashboard's panels on real figures.

Runs the inventory demo (its binary, with the options given after `--`), has a real Prometheus
(Debian's `prometheus` package) scrape every instance's `GET /metrics` once a second during the
run, then evaluates every query of `dashboards/lock-runtime.json` against that Prometheus, as
Grafana would, and draws the panels at their places in the dashboard's grid with matplotlib.
Grafana itself is not packaged in Debian, so this script stands in for its rendering only: the
queries, the variables (`$job` and `$group` = All, `$__rate_interval` = 4 x the scrape interval,
`$__range` = the run) and the figures are Prometheus'.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install matplotlib
    apt-get install --no-install-recommends prometheus
    cargo build --release -p example-inventory
    /tmp/venv/bin/python scripts/dashboard-picture.py -- --requests 15000 --carts 1500 --stock 1500

The evaluated queries are kept in `dashboards/lock-runtime-picture.json` (`--data FILE`);
`--from-data FILE` draws from such a file without running anything.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DASHBOARD = os.path.join(ROOT, "dashboards", "lock-runtime.json")
SCRAPE_SECONDS = 1
RATE_INTERVAL = f"{4 * SCRAPE_SECONDS}s"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def instance_ports(pid):
    """The ports of the demo's `serve` children (their command line: serve redis db port mode)."""
    ports = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return ports
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children = f.read().split()
        except FileNotFoundError:
            continue
        for child in children:
            try:
                with open(f"/proc/{child}/cmdline", "rb") as f:
                    args = f.read().split(b"\0")
            except FileNotFoundError:
                continue
            if len(args) > 5 and args[1] == b"serve":
                ports.add(int(args[4]))
    return ports


def write_targets(path, ports):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump([{"targets": [f"127.0.0.1:{p}" for p in sorted(ports)]}], f)
    os.replace(tmp, path)


def substitute(expr, range_seconds):
    return (expr.replace("$__rate_interval", RATE_INTERVAL)
            .replace("$__range", f"{range_seconds}s")
            .replace("$job", ".*")
            .replace("$group", ".*"))


def evaluate(prom, dashboard, start, end):
    """Every panel target's result: {panel id: [{refId, legend, series: [(labels, [(t, v)])]}]}."""
    range_seconds = max(1, round(end - start))
    out = {}
    for panel in dashboard["panels"]:
        results = []
        for t in panel.get("targets", []):
            expr = substitute(t["expr"], range_seconds)
            if t.get("instant"):
                q = urllib.parse.urlencode({"query": expr, "time": end})
                data = get_json(f"{prom}/api/v1/query?{q}")["data"]["result"]
                series = [(r["metric"], [(end, float(r["value"][1]))]) for r in data]
            else:
                q = urllib.parse.urlencode(
                    {"query": expr, "start": start, "end": end, "step": SCRAPE_SECONDS})
                data = get_json(f"{prom}/api/v1/query_range?{q}")["data"]["result"]
                series = [(r["metric"], [(float(ts), float(v)) for ts, v in r["values"]])
                          for r in data]
            results.append({"refId": t["refId"], "expr": expr,
                            "legend": t.get("legendFormat", ""), "series": series})
        out[str(panel["id"])] = results
    return out


def run(args):
    """Runs Prometheus and the demo; returns what `evaluate` returns plus the run's facts."""
    if not shutil.which("prometheus"):
        sys.exit("prometheus is not installed (apt-get install --no-install-recommends prometheus)")
    binary = args.binary
    if binary is None:
        for profile in ("release", "debug"):
            candidate = os.path.join(ROOT, "target", profile, "example-inventory")
            if os.path.exists(candidate):
                binary = candidate
                break
        else:
            sys.exit("no example-inventory binary: cargo build --release -p example-inventory")
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    tmp = tempfile.mkdtemp(prefix="dashboard-picture-")
    targets = os.path.join(tmp, "targets.json")
    write_targets(targets, [])
    config = os.path.join(tmp, "prometheus.yml")
    with open(config, "w") as f:
        f.write(f"""global:
  scrape_interval: {SCRAPE_SECONDS}s
  scrape_timeout: {SCRAPE_SECONDS}s
scrape_configs:
  - job_name: inventory
    file_sd_configs:
      - files: ["{targets}"]
        refresh_interval: 1s
""")
    port = free_port()
    prom_url = f"http://127.0.0.1:{port}"
    prom_log = open(os.path.join(tmp, "prometheus.log"), "w")
    prom = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=prom_log, stderr=subprocess.STDOUT)
    demo = None
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{prom_url}/-/ready", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        else:
            sys.exit(f"prometheus did not start; see {tmp}/prometheus.log")
        version = get_json(f"{prom_url}/api/v1/status/buildinfo")["data"]["version"]
        instances = 3
        if "--instances" in args.demo_args:
            instances = int(args.demo_args[args.demo_args.index("--instances") + 1])
        demo = subprocess.Popen([binary] + args.demo_args, stdout=subprocess.PIPE, text=True)
        # Prometheus applies new file_sd targets only every 5 s. So that it scrapes the load from
        # its start, the driver is paused (SIGSTOP; its instances run on) once it has started
        # its instances, until Prometheus has scraped each of them, then resumed: it then waits
        # for their health and starts the load. Only the demo's "total time" includes the pause.
        ports = set()
        while demo.poll() is None and len(ports) < instances:
            ports = instance_ports(demo.pid)
            time.sleep(0.01)
        demo.send_signal(signal.SIGSTOP)
        try:
            write_targets(targets, ports)
            paused = time.time()
            while time.time() - paused < 12:
                up = get_json(f"{prom_url}/api/v1/query?query=" + urllib.parse.quote("count(up == 1)"))
                if up["data"]["result"] and int(up["data"]["result"][0]["value"][1]) == len(ports):
                    break
                time.sleep(0.2)
        finally:
            start = time.time()
            demo.send_signal(signal.SIGCONT)
        output = demo.stdout.read()
        demo.wait()
        end = time.time()
        sys.stdout.write(output)
        if demo.returncode != 0:
            sys.exit(f"the demo failed (exit {demo.returncode})")
        time.sleep(2 * SCRAPE_SECONDS)  # the last scrapes are in
        results = evaluate(prom_url, dashboard, start, end)
        up = get_json(f"{prom_url}/api/v1/query_range?" + urllib.parse.urlencode(
            {"query": "sum(up)", "start": start, "end": end, "step": SCRAPE_SECONDS}))
        scrapes = get_json(f"{prom_url}/api/v1/query?" + urllib.parse.urlencode(
            {"query": f"sum(count_over_time(up[{round(end - start) + 5}s]))", "time": end}))
    finally:
        if demo is not None and demo.poll() is None:
            demo.kill()  # only if this script failed while the demo ran
            demo.wait()
        prom.terminate()
        prom.wait()
        prom_log.close()
    shutil.rmtree(tmp, ignore_errors=True)
    # The results table, without its colours and progress bar.
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output)
    plain = "\n".join(line.rsplit("\r", 1)[-1] for line in plain.split("\n"))
    return {
        "prometheus": version,
        "binary": os.path.relpath(binary, ROOT),
        "demo_args": args.demo_args,
        "instances": len(ports),
        "scrapes": int(float(scrapes["data"]["result"][0]["value"][1])) if scrapes["data"]["result"] else 0,
        "instances_up_max": max((float(v) for r in up["data"]["result"] for _, v in r["values"]), default=0),
        "start": start,
        "end": end,
        "demo_output": plain,
        "results": results,
    }


# ---- drawing ---------------------------------------------------------------------------------

BG, PANEL, TEXT, DIM, GRID = "#111217", "#181b1f", "#d8d9e0", "#8e8e9a", "#2c3036"
PALETTE = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9",
           "#705da0", "#37872d", "#fade2a", "#ff9830", "#c4162a"]


def legend_text(fmt, labels):
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()
    return text or "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def scale(unit, values):
    """Values in a readable unit, and the unit's name."""
    if unit == "s":
        top = max((abs(v) for v in values), default=0)
        if top < 1:
            return [v * 1000 for v in values], "ms"
        return values, "s"
    if unit == "ops":
        return values, "/s"
    return values, ""


def fmt_number(v, unit, decimals=None):
    vals, name = scale(unit, [v])
    v = vals[0]
    if decimals is not None:
        return f"{v:.{decimals}f}{(' ' + name) if name else ''}"
    if abs(v) >= 100 or v == int(v):
        s = f"{v:.0f}"
    elif abs(v) >= 10:
        s = f"{v:.1f}"
    else:
        s = f"{v:.2f}"
    return s + (f" {name}" if name else "")


def draw(data, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.gridspec import GridSpec
    from matplotlib.ticker import FuncFormatter, NullFormatter

    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    unit_h = 0.42  # inches per grid row
    header = 1.3
    fig = plt.figure(figsize=(24, rows * unit_h + header), facecolor=BG)
    top = 1 - header / (rows * unit_h + header)
    gs = GridSpec(rows, 24, figure=fig, left=0.03, right=0.99, top=top, bottom=0.015,
                  hspace=0.0, wspace=0.0)
    start = data["start"]
    seconds = round(data["end"] - start)
    fig.text(0.03, 1 - 0.35 / (rows * unit_h + header), dashboard["title"],
             color=TEXT, fontsize=22, fontweight="bold", va="top")
    fig.text(0.03, 1 - 0.75 / (rows * unit_h + header),
             f"The inventory demo ({data['binary']} {' '.join(data['demo_args'])}): "
             f"{data['instances']} instances, {seconds} s, each instance's /metrics scraped every "
             f"{SCRAPE_SECONDS} s by Prometheus {data['prometheus']} ({data['scrapes']} scrapes).\n"
             f"Every panel is its query in dashboards/lock-runtime.json evaluated by that Prometheus "
             f"(job = All, group = All, $__rate_interval = {RATE_INTERVAL}), drawn with matplotlib "
             f"by scripts/dashboard-picture.py: Grafana is not packaged in Debian.",
             color=DIM, fontsize=12, va="top", linespacing=1.5)
    for panel in panels:
        g = panel["gridPos"]
        if panel["type"] == "row":
            ax = fig.add_subplot(gs[g["y"]:g["y"] + 1, :])
            ax.set_facecolor(BG)
            ax.axis("off")
            ax.text(0.0, 0.3, panel["title"], color=TEXT, fontsize=15, fontweight="bold",
                    transform=ax.transAxes, va="center")
            continue
        ax = fig.add_subplot(gs[g["y"]:g["y"] + g["h"], g["x"]:g["x"] + g["w"]])
        # A margin inside the grid cell, like Grafana's gaps between panels.
        pos = ax.get_position()
        pad_x, pad_y = 0.004, 0.004
        results = data["results"].get(str(panel["id"]), [])
        defaults = panel["fieldConfig"]["defaults"]
        unit = defaults.get("unit", "short")
        if panel["type"] == "stat":
            ax.set_position([pos.x0 + pad_x, pos.y0 + pad_y, pos.width - 2 * pad_x,
                             pos.height - 2 * pad_y])
            ax.set_facecolor(PANEL)
            ax.set_xticks([])
            ax.set_yticks([])
            for s in ax.spines.values():
                s.set_color(GRID)
            ax.text(0.03, 0.9, panel["title"], color=TEXT, fontsize=13, va="top",
                    transform=ax.transAxes)
            calc = panel["options"]["reduceOptions"]["calcs"][0]
            values = [v for r in results for _, pts in r["series"] for _, v in pts]
            if not values:
                value = None
            elif calc == "mean":
                value = sum(values) / len(values)
            elif calc == "max":
                value = max(values)
            else:
                value = values[-1]
            steps = defaults.get("thresholds", {}).get("steps", [])
            color = "#73bf69"
            for step in steps:
                if step["value"] is not None and value is not None and value >= step["value"]:
                    color = "#f2495c"
            text = defaults.get("noValue", "No data") if value is None else \
                fmt_number(value, unit, defaults.get("decimals"))
            ax.text(0.5, 0.4, text, color=color, fontsize=30, fontweight="bold",
                    ha="center", va="center", transform=ax.transAxes)
            ax.text(0.97, 0.08, {"mean": "mean", "max": "max", "lastNotNull": "in the run"}[calc],
                    color=DIM, fontsize=10, ha="right", transform=ax.transAxes)
            continue
        ax.set_position([pos.x0 + pad_x + 0.022, pos.y0 + pad_y + 0.028,
                         pos.width - 2 * pad_x - 0.024, pos.height - 2 * pad_y - 0.05])
        ax.set_facecolor(PANEL)
        for s in ax.spines.values():
            s.set_color(GRID)
        ax.tick_params(colors=DIM, labelsize=10)
        ax.grid(True, color=GRID, linewidth=0.6)
        ax.set_title(panel["title"], color=TEXT, fontsize=13, loc="left")
        lines = []
        for r in results:
            for labels, pts in r["series"]:
                lines.append((legend_text(r["legend"], labels), pts))
        all_values = [v for _, pts in lines for _, v in pts]
        log = defaults.get("custom", {}).get("scaleDistribution", {}).get("type") == "log"
        _, unit_name = scale(unit, all_values)
        ax.set_xlim(0, seconds)
        if not lines:
            ax.text(0.5, 0.5, "No data", color=DIM, fontsize=14, ha="center", va="center",
                    transform=ax.transAxes)
            ax.set_ylim(0, 1)
            ax.set_yticks([])
            ax.text(0.5, 0.3, "(none recorded in this run)", color=DIM, fontsize=10,
                    ha="center", va="center", transform=ax.transAxes)
        for i, (name, pts) in enumerate(sorted(lines)):
            xs = [t - start for t, _ in pts]
            ys, _ = scale(unit, [v for _, v in pts])
            if unit == "s" and unit_name == "s":
                ys = [v for _, v in pts]
            peak = max(ys)
            mean = sum(ys) / len(ys)
            label = f"{name}   mean {mean:.3g}  max {peak:.3g}"
            color = PALETTE[i % len(PALETTE)]
            ax.plot(xs, ys, color=color, linewidth=1.4, label=label)
            if not log:
                ax.fill_between(xs, ys, color=color, alpha=0.08)
        # Headroom above the data for the legend, as Grafana keeps its legend apart.
        if lines and log:
            positive = [v for v in scale(unit, all_values)[0] if v > 0]
            ax.set_yscale("log")
            if positive:
                ax.set_ylim(min(positive) / 2, max(positive) * 30)
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
        elif lines:
            top = max(scale(unit, all_values)[0], default=0)
            ax.set_ylim(0, top * 1.7 if top > 0 else 1)
        if lines:
            ax.legend(loc="upper left", fontsize=9, facecolor=PANEL, edgecolor=GRID,
                      labelcolor=TEXT, framealpha=0.85)
        if unit_name:
            ax.set_ylabel(unit_name, color=DIM, fontsize=10)
        ax.set_xlabel("seconds into the run", color=DIM, fontsize=9, labelpad=1)
    fig.savefig(out, dpi=80, facecolor=BG)
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", help="the example-inventory binary (default: target/release, else debug)")
    ap.add_argument("--out", default=os.path.join(ROOT, "dashboards", "lock-runtime.png"))
    ap.add_argument("--data", default=os.path.join(ROOT, "dashboards", "lock-runtime-picture.json"),
                    help="where to keep the evaluated queries (JSON)")
    ap.add_argument("--from-data", help="draw from a file written by --data; run nothing")
    ap.add_argument("demo_args", nargs="*", help="the demo's options (after --)")
    args = ap.parse_args()
    if args.from_data:
        with open(args.from_data) as f:
            data = json.load(f)
    else:
        data = run(args)
        with open(args.data, "w") as f:
            json.dump(data, f)
    draw(data, args.out)


if __name__ == "__main__":
    main()
