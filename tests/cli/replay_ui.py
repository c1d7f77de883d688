#!/usr/bin/env python3
"""Where replay shows up (issue 28 items 3-4, issue 27's retries), end to end through the binary:

  replay --html   the page holds the recorded trajectory and one per grid point; decoded from
                  the SVG's own axis ticks, each replayed line's scales give --json's min / max
                  (with its final scale), its skip markers --json's count and first skip, and the
                  recording's own setting redraws the recorded line step for step; the table has
                  --json's numbers; no script, no network; a 20-row grid draws 9 rows (first
                  and last included) and says so. A repeated --grid value: exit 2; a bad one
                  is named as --grid. A run resumed under other scaler settings: its own row
                  says where it departs from the recording, not "(as recorded)". An output that is a run's own file, a
                  directory or in a missing folder: exit 2, nothing written.
  sweep --replay-from   the table equals `ampctl replay --grid` on the same grid; the base
                  config's scaler keys apply; no run directory and no sweep folder created; a
                  non-scaler key (grid, --set, a base that differs from RUN) exit 2 naming it.
  report          a run with grad_amax gets svg#grad_amax and svg#amax_headroom whose decoded
                  values are the lines' grad_amax and log2(65504 / (grad_amax x scale)); a run
                  without gets neither.
  retries         sweep.csv's retries column is summary.json's and the lines' sum; the console
                  line says `retries R` (since the run began).

Usage: replay_ui.py AMPCTL WORKDIR
"""
import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys

from cli_harness import FAILURES, check, run_ampctl, summary, train_lines

AMPCTL, WORK = os.path.abspath(sys.argv[1]), sys.argv[2]
WORK = os.path.join(WORK, "replay-ui-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)


def run(args, expect=0):
    return run_ampctl(AMPCTL, args, expect)


def tree(path):
    """Every path under PATH (for 'nothing created' checks)."""
    out = set()
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            out.add(os.path.join(root, n))
    return out


STEPS = 200
BASE = os.path.join(WORK, "base.yaml")
with open(BASE, "w") as f:
    f.write(f"""name: replay_ui
seed: 0
device: cpu
precision: fp16
model: {{type: mlp, hidden: [64, 64], activation: relu}}
data:
  train: {{source: synthetic, task: classification, samples: 2048, features: 32, classes: 10}}
  batch_size: 64
optimizer: {{type: adamw, lr: 0.001}}
scheduler: {{type: cosine, warmup_steps: 20}}
scaler: {{init_scale: 65536.0, growth_interval: 100}}
training: {{max_steps: {STEPS}, eval_every: 0}}
logging: {{every_steps: 50, metrics_every: 1, grad_amax: true}}
""")

rec = os.path.join(WORK, "recorded")
run(["train", "--config", BASE, "--run-dir", rec, "--set", "scaler.init_scale=1048576.0",
     "--set", "scaler.growth_interval=20"])
rec_lines = train_lines(rec)
check(len(rec_lines) == STEPS, f"{STEPS} recorded lines")


# ---- SVG decoding: positions back to values through the chart's own tick labels ----
def svg(html, ident):
    m = re.search(r'<svg id="' + ident + r'".*?</svg>', html, re.S)
    return m.group(0) if m else ""


def axis_maps(chart):
    """(step -> x) inverse and (y -> value) inverse from the tick labels."""
    xt = re.search(r'<g class="ticks x-ticks"[^>]*>(.*?)</g>', chart, re.S).group(1)
    xs = [(float(x), float(v)) for x, v in re.findall(r'<text x="([-\d.]+)" y="[-\d.]+">([-\d.e]+)</text>', xt)]
    yt = re.search(r'<g class="ticks y-ticks"[^>]*>(.*?)</g>', chart, re.S).group(1)
    ys = []
    for y, label in re.findall(r'<text x="[-\d.]+" y="([-\d.]+)">([^<]+)</text>', yt):
        v = float(label[2:]) if label.startswith("2^") else float(label)
        ys.append((float(y) - 4, v))  # the label sits 4 units below its grid line
    (x0, s0), (x1, s1) = xs[0], xs[-1]
    (y0, v0), (y1, v1) = ys[0], ys[-1]
    to_step = lambda x: s0 + (x - x0) * (s1 - s0) / (x1 - x0)
    to_value = lambda y: v0 + (y - y0) * (v1 - v0) / (y1 - y0)
    return to_step, to_value


def polylines(chart):
    """run index -> [(step, value)] (value in the axis' units: log2 on a log2 axis)."""
    to_step, to_value = axis_maps(chart)
    out = {}
    for i, pts in re.findall(r'<polyline class="run run-(\d+)"[^>]* points="([^"]*)"', chart):
        out[int(i)] = [(to_step(float(x)), to_value(float(y)))
                       for x, y in (p.split(",") for p in pts.split())]
    return out


def skips(chart):
    to_step, to_value = axis_maps(chart)
    out = {}
    for i, x, y in re.findall(r'<circle class="skip" data-run="(\d+)" cx="([-\d.]+)" cy="([-\d.]+)"', chart):
        out.setdefault(int(i), []).append((to_step(float(x)), to_value(float(y))))
    return out


# ---- 1. replay --html ----
INIT = [2.0**12, 2.0**20, 2.0**28]
GROWTH = [5, 20]
grid = ["--grid", "scaler.init_scale=" + ",".join(repr(v) for v in INIT),
        "--grid", "scaler.growth_interval=" + ",".join(str(g) for g in GROWTH)]
page = os.path.join(WORK, "replay.html")
p = run(["replay", rec, "--json", "--html", page] + grid)
pred = json.loads(p.stdout)
check(len(pred) == 6, f"6 grid points, got {len(pred)}")
check(os.path.isfile(page) and "wrote" in p.stderr, "--html wrote the page:\n" + p.stderr)
html = open(page).read()
check("<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org', "")
      and "https://" not in html, "self-contained: no script, no link out")
chart = svg(html, "scale")
lines_by_run = polylines(chart)
check(sorted(lines_by_run) == list(range(7)), f"7 trajectories (recorded + 6), got {sorted(lines_by_run)}")
# The recorded line: every step's log2(scale), to the drawing's precision (0.1 units of a
# 290-unit axis over >= 12 doublings: < 0.01 doublings; scales here are powers of two).
recorded = [(l["step"], math.log2(l["scale"])) for l in rec_lines]
got0 = lines_by_run.get(0, [])
check(len(got0) == STEPS and all(abs(a[0] - b[0]) < 0.3 and abs(a[1] - b[1]) < 0.05
                                 for a, b in zip(got0, recorded)),
      "the recorded line is the recording's scales")
skip_marks = skips(chart)
rec_skips = [l["step"] for l in rec_lines if l["skipped"]]
check(sorted(round(s) for s, _ in skip_marks.get(0, [])) == rec_skips, "recorded skips marked")
for i, row in enumerate(pred, start=1):
    vals = [round(v) for _, v in lines_by_run.get(i, [])]
    check(all(abs(v - round(v)) < 0.05 for _, v in lines_by_run.get(i, [])), f"row {i}: powers of 2")
    with_final = vals + [math.log2(row["final_scale"])]
    check(len(vals) == STEPS, f"row {i}: {STEPS} points, got {len(vals)}")
    check(2.0 ** min(with_final) == row["min_scale"] and 2.0 ** max(with_final) == row["max_scale"],
          f"row {i} {row['overrides']}: drawn scales {min(vals)}..{max(vals)} (final "
          f"{row['final_scale']}) vs --json {row['min_scale']}..{row['max_scale']}")
    marks = sorted(round(s) for s, _ in skip_marks.get(i, []))
    check(len(marks) == row["skipped"] and (marks[0] if marks else None) == row["first_skip"],
          f"row {i}: {len(marks)} skip marks from {marks[:1]}, --json {row['skipped']} from "
          f"{row['first_skip']}")
    if row["overrides"] == {"scaler.init_scale": 2.0**20, "scaler.growth_interval": 20}:
        own = lines_by_run.get(i, [])
        check([round(v) for _, v in own] == [round(v) for _, v in recorded],
              "the recording's own setting redraws the recorded line")
table_rows = re.findall(r'<tr class="run" data-run="(\d+)">(.*?)</tr>', html, re.S)
check(len(table_rows) == 6, f"table#replay: 6 rows, got {len(table_rows)}")
for (idx, cells), row in zip(table_rows, pred):
    tds = re.findall(r"<td[^>]*>(?:<span[^>]*></span>)?(.*?)</td>", cells)
    check(tds[1] == str(row["skipped"]) and tds[3] == str(row["retries"]) and
          float(tds[4]) == row["min_scale"] and float(tds[6]) == row["final_scale"],
          f"table row {idx}: {tds} vs {row}")

# Refusals: exit 2, nothing written, nothing printed to stdout.
before = open(os.path.join(rec, "metrics.jsonl")).read()
for bad, why in [(os.path.join(rec, "metrics.jsonl"), "an input"),
                 (os.path.join(rec, "summary.json"), "a run's own file"),
                 (os.path.join(WORK, "no-such-dir", "x.html"), "a missing folder"),
                 (WORK, "a directory")]:
    p = run(["replay", rec, "--html", bad] + grid, expect=2)
    check("--html" in p.stderr and p.stdout == "", f"--html {why}: exit 2 naming --html\n{p.stderr}")
# A product of --grid flags past replay's bound (4 x 10^8 settings here) is refused at once, not
# expanded: exit 2 naming --grid, before any row.
huge = ["--grid", "scaler.init_scale=" + ",".join(str(2 ** i) for i in range(200)),
        "--grid", "scaler.growth_interval=" + ",".join(str(i) for i in range(1, 201)),
        "--grid", "scaler.backoff_factor=" + ",".join(str(i / 100) for i in range(1, 100)),
        "--grid", "scaler.growth_factor=" + ",".join(str(1 + i / 100) for i in range(1, 100))]
p = run(["replay", rec] + huge, expect=2)
check("--grid: too many settings (200 x 200 x 99 x 99)" in p.stderr and p.stdout == "",
      f"a grid past the bound: exit 2 naming --grid\n{p.stderr[-500:]}")
check(open(os.path.join(rec, "metrics.jsonl")).read() == before, "metrics.jsonl untouched")
check(not os.path.exists(os.path.join(WORK, "no-such-dir")), "no folder created")
s_before = json.load(open(os.path.join(rec, "summary.json")))
check(s_before.get("name") is not None, "summary.json untouched (still JSON)")

# A grid past what a chart can tell apart (20 rows): 9 drawn beside the recorded line, spread over
# the grid (first and last included), the table of those 9, and the page says so; --json still
# has all 20. A value listed twice is two rows of one setting: exit 2. A bad --grid value is
# named as --grid, not --set.
many = ["--grid", "scaler.growth_interval=" + ",".join(str(g) for g in range(1, 21))]
page20 = os.path.join(WORK, "replay20.html")
p = run(["replay", rec, "--json", "--html", page20] + many)
check(len(json.loads(p.stdout)) == 20, "--json lists all 20 rows")
html20 = open(page20).read()
check(sorted(polylines(svg(html20, "scale"))) == list(range(10)), "9 rows drawn beside the recorded one")
rows20 = re.findall(r'<tr class="run" data-run="(\d+)"><td class="name">(?:<span[^>]*></span>)?([^<]*)<', html20)
check([r[1] for r in rows20][:1] == ["growth_interval=1"] and rows20[-1][1] == "growth_interval=20"
      and len(rows20) == 9, f"the table lists the 9 drawn, first and last included: {rows20}")
check("20 settings were replayed" in html20, "the page says how many were replayed")
p = run(["replay", rec, "--grid", "scaler.growth_interval=5,20,5"], expect=2)
check("listed twice" in p.stderr and p.stdout == "", f"a repeated --grid value: exit 2\n{p.stderr}")
# A run resumed under other scaler settings: its config.yaml is the resume's, so replaying "its
# own" settings no longer gives back its recording from step 1, and the row says where it
# departs instead of "(as recorded)".
res = os.path.join(WORK, "resumed")
run(["train", "--config", BASE, "--run-dir", res, "--set", "training.max_steps=30",
     "--set", "scaler.init_scale=1024.0", "--set", "checkpoint.every_steps=10"])
check("(as recorded)" in run(["replay", res]).stdout, "a fresh run's own row is (as recorded)")
run(["resume", "--checkpoint", res, "--set", "training.max_steps=60",
     "--set", "scaler.growth_interval=3"])
out = run(["replay", res]).stdout
check("(as recorded)" not in out and re.search(r"\(config\.yaml, departs at step \d+\)", out),
      f"a resumed run's row says where it departs:\n{out}")
p = run(["replay", rec, "--grid", "scaler.init_scale=1024,1024.0"], expect=2)
check("1024 and 1024.0 are the same setting" in p.stderr and p.stdout == "",
      f"two spellings of one value: exit 2\n{p.stderr}")
p = run(["replay", rec, "--grid", "scaler.growth_interval=5,-3"], expect=2)
check("--grid scaler.growth_interval=-3" in p.stderr and "--set" not in p.stderr,
      f"a bad --grid value is named as --grid\n{p.stderr}")

# ---- 2. sweep --replay-from ----
def table_of(text):
    """The table's lines: from the header to the line before the note."""
    out, on = [], False
    for l in text.splitlines():
        if l.startswith("setting "):
            on = True
        elif l.startswith("[replay] headroom"):
            on = False
        if on:
            out.append(l)
    return out


cwd = os.path.join(WORK, "sweep-cwd")
os.makedirs(cwd)
replay_table = table_of(run(["replay", rec] + grid).stdout)
before_tree = tree(WORK)
p = subprocess.run([AMPCTL, "sweep", "--replay-from", rec] + grid, cwd=cwd, capture_output=True,
                   text=True, timeout=300)
check(p.returncode == 0, f"sweep --replay-from: exit {p.returncode}\n{p.stderr}")
check(table_of(p.stdout) == replay_table and len(replay_table) == 7,
      "sweep --replay-from's table is replay --grid's:\n" + p.stdout + "\n---\n" + "\n".join(replay_table))
check("replay preview" in p.stdout and "nothing trained" in p.stdout, "says it is a preview")
check(tree(WORK) == before_tree, f"nothing created: {sorted(tree(WORK) - before_tree)}")
# With --config BASE: its scaler settings (growth_interval 100, not RUN's 20) apply where the
# grid is silent, and the rows name them: replay --set of the same key gives the same table.
p = run(["sweep", "--config", BASE, "--replay-from", rec, "--grid",
         "scaler.init_scale=" + ",".join(repr(v) for v in INIT)])
want = table_of(run(["replay", rec, "--set", "scaler.growth_interval=100", "--grid",
                     "scaler.init_scale=" + ",".join(repr(v) for v in INIT)]).stdout)
check(len(want) == 4 and table_of(p.stdout) == want and "growth_interval=100" in want[1],
      "--config's scaler keys apply:\n" + p.stdout + "\n---\n" + "\n".join(want))
other = os.path.join(WORK, "other.yaml")
with open(other, "w") as f:
    f.write(open(BASE).read().replace("hidden: [64, 64]", "hidden: [64, 32]"))
for args, key in [(["--grid", "optimizer.lr=0.001,0.002"], "optimizer.lr"),
                  (["--config", other, "--grid", "scaler.growth_interval=5,20"], "model.hidden"),
                  (["--out", os.path.join(WORK, "x")], "--out")]:
    p = subprocess.run([AMPCTL, "sweep", "--replay-from", rec] + args, cwd=cwd,
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 2 and key in p.stderr, f"sweep --replay-from {args}: exit "
          f"{p.returncode} naming {key}\n{p.stderr}")
check(tree(WORK) == before_tree | {other}, "refusals create nothing")

# ---- 3. report: grad_amax and its headroom ----
rep = os.path.join(WORK, "report.html")
run(["report", rec, "--out", rep])
html = open(rep).read()
amax_chart, head_chart = svg(html, "grad_amax"), svg(html, "amax_headroom")
check(amax_chart != "" and head_chart != "", "report: grad_amax and headroom charts")
if amax_chart and head_chart:
    amax_line = polylines(amax_chart).get(0, [])
    want_amax = [(l["step"], math.log2(l["grad_amax"])) for l in rec_lines if l["grad_amax"] > 0]
    check(len(amax_line) == len(want_amax) and
          all(abs(a[1] - b[1]) < 0.05 for a, b in zip(amax_line, want_amax)),
          "report: the grad_amax line is the lines' grad_amax (log2)")
    head_line = polylines(head_chart).get(0, [])
    want_head = [math.log2(65504 / (l["grad_amax"] * l["scale"])) for l in rec_lines
                 if l["grad_amax"] > 0]
    span = max(want_head) - min(want_head) + 1
    worst = max((abs(a[1] - b) for a, b in zip(head_line, want_head)), default=99)
    check(len(head_line) == len(want_head) and worst < span / 100,
          f"report: headroom = log2(65504 / (grad_amax x scale)), worst {worst:.3g} of {span:.3g}")
plain = os.path.join(WORK, "plain")
run(["train", "--config", BASE, "--run-dir", plain, "--set", "logging.grad_amax=false",
     "--set", "training.max_steps=30"])
run(["report", plain, "--out", os.path.join(WORK, "plain.html")])
html = open(os.path.join(WORK, "plain.html")).read()
check('id="grad_amax"' not in html and 'id="amax_headroom"' not in html and 'id="scale"' in html,
      "report: a run without grad_amax has no grad_amax charts")

# ---- 4. retries in sweep.csv and on the console ----
sw = os.path.join(WORK, "sweep-retry")
run(["sweep", "--config", BASE, "--out", sw, "--set", "training.max_steps=40",
     "--set", "scaler.on_overflow=retry", "--set", "scaler.init_scale=1.0e+12",
     "--grid", "scaler.max_retries=1,3"])
with open(os.path.join(sw, "sweep.csv")) as f:
    rows = list(csv.DictReader(f))
check(len(rows) == 2 and all("retries" in r for r in rows), "sweep.csv has a retries column")
for r in rows:
    d = os.path.join(sw, r["name"])
    total = sum(l.get("retries", 0) for l in train_lines(d))
    check(total > 0 and int(r["retries"]) == total == summary(d)["retries"],
          f"sweep.csv retries {r['retries']} == the lines' {total} == summary.json's")
con = os.path.join(WORK, "console-retry")
p = run(["train", "--config", BASE, "--run-dir", con, "--set", "training.max_steps=40",
         "--set", "scaler.on_overflow=retry", "--set", "scaler.init_scale=1.0e+12",
         "--set", "logging.every_steps=20"])
total = sum(l.get("retries", 0) for l in train_lines(con))
out = p.stdout + p.stderr
check(total > 0 and re.search(rf"^step +40/40 .* retries {total} lr ", out, re.M) is not None,
      f"the console's last line says retries {total} (since the run began):\n" + out[-2000:])
p = run(["train", "--config", BASE, "--run-dir", os.path.join(WORK, "console-skip"),
         "--set", "training.max_steps=30"])
check("retries" not in p.stdout + p.stderr, "without retry the console says nothing of retries")

if FAILURES:
    print(f"{len(FAILURES)} failure(s)")
    sys.exit(1)
print("replay_ui: all checks passed")
