#!/usr/bin/env python3
"""What a sweep answers (issue 48 items 3 and 7), end to end through the binary, on tiny runs:

  verdict     a 3-seed x 3-setting sweep whose settings cannot differ (growth_interval past the
              run's length: the runs of one seed are bitwise the same) prints "no setting
              differs", marks no run (console '*', sweep.json best null, the report's badge);
              one over learning rates that clearly matter marks the winner, its three runs,
              in all three places, with the verdict line on the console and atop the report.
  names       `runs:` entries with `name:` name the folders, sweep.json's rows and the report's
              legend; a duplicate name or a filesystem-unsafe one is exit 2 naming its line,
              before anything is created.
  replay      `sweep --replay-from RUN` takes a sweep file with `seeds:` (one row per setting,
              seed-free) and `--set seed=N`; a named setting names its row.

Usage: sweep_verdict.py AMPCTL WORKDIR
"""
import json
import os
import re
import shutil
import sys

from cli_harness import FAILURES, check, run_ampctl

AMPCTL, WORK = os.path.abspath(sys.argv[1]), sys.argv[2]
WORK = os.path.join(WORK, "sweep-verdict-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)


def run(args, expect=0):
    return run_ampctl(AMPCTL, args, expect)


BASE = """name: verdict
seed: 0
device: cpu
precision: fp16
model: {type: mlp, hidden: [16]}
data:
  train: {source: synthetic, task: classification, samples: 256, features: 8, classes: 4}
  batch_size: 32
optimizer: {type: sgd, lr: 0.05}
training: {max_steps: 30, eval_every: 0}
logging: {every_steps: 30, metrics_every: 1, grad_amax: true}
"""


def write(name, text):
    path = os.path.join(WORK, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def verdict_line(stdout):
    lines = [l for l in stdout.splitlines() if l.startswith("verdict: ")]
    return lines[-1] if lines else ""


def starred(stdout):
    return [l.split()[1] for l in stdout.splitlines() if l.startswith("* ") and len(l.split()) > 1]


# ---- 1. settings that do not differ ----
same = write("same.yaml", BASE + """sweep:
  grid: {scaler.growth_interval: [1000, 2000, 3000]}
  seeds: [0, 1, 2]
""")
out = os.path.join(WORK, "same")
p = run(["sweep", "--config", same, "--out", out, "--jobs", "2"])
v = verdict_line(p.stdout)
check("scaler.growth_interval: no setting differs in final loss" in v, f"no difference: {v!r}")
check(p.stdout.rstrip().splitlines()[-2].startswith("verdict: ") or "verdict: " in p.stdout,
      "the verdict line is on the console")
check(starred(p.stdout) == [], f"no run marked best: {starred(p.stdout)}")
doc = json.load(open(os.path.join(out, "sweep.json")))
check(doc["best"] is None and doc["best_runs"] == [], f"sweep.json marks none: {doc['best']}")
check(doc["verdict"] == v[len("verdict: "):], "sweep.json holds the console's verdict")
rep = os.path.join(WORK, "same.html")
run(["report", out, "--out", rep])
html = open(rep).read()
m = re.search(r'<p class="verdict" id="verdict">(.*?)</p>', html)
check(m is not None and m.group(1) == doc["verdict"].replace("&", "&amp;").replace(">", "&gt;"),
      f"the report opens with the verdict: {m.group(1) if m else None!r}")
check(html.index('id="verdict"') < html.index("<h2>"), "the verdict is at the top")
check('class="badge">best<' not in html, "the report badges no run or setting")

# ---- 2. settings that do ----
lr = write("lr.yaml", BASE + """sweep:
  grid: {optimizer.lr: [0.3, 0.001, 0.0001]}
  seeds: [0, 1, 2]
""")
out = os.path.join(WORK, "lr")
p = run(["sweep", "--config", lr, "--out", out, "--jobs", "2"])
v = verdict_line(p.stdout)
doc = json.load(open(os.path.join(out, "sweep.json")))
means = {}
for row in doc["runs"]:
    key = [o for o in row["overrides"] if o.startswith("optimizer.lr=")][0]
    means.setdefault(key, []).append(row["final_loss"])
winner = min(means, key=lambda k: sum(means[k]) / len(means[k]))
check(winner == "optimizer.lr=0.3", f"lr 0.3 trains furthest in 30 steps: {means}")
check("optimizer.lr: 0.3 has the lowest final loss" in v and "p = " in v, f"the winner: {v!r}")
check(doc["best"] == winner, f"sweep.json best {doc['best']!r}")
want_runs = sorted(r["name"] for r in doc["runs"] if winner in r["overrides"])
check(sorted(doc["best_runs"]) == want_runs and len(want_runs) == 3, f"best_runs {doc['best_runs']}")
check(sorted(starred(p.stdout)) == want_runs, f"the console stars its 3 runs: {starred(p.stdout)}")
rep = os.path.join(WORK, "lr.html")
run(["report", out, "--out", rep])
html = open(rep).read()
check(html.count('<tr class="run best">') == 3, "the report marks the winner's 3 runs")
check(html.count('<tr class="setting best">') == 1, "and its setting row")

# ---- 3. named runs ----
named = write("named.yaml", BASE + """sweep:
  runs:
    - {name: slow, optimizer.lr: 0.001}
    - {name: fast, optimizer.lr: 0.3}
  seeds: [0, 1]
""")
out = os.path.join(WORK, "named")
p = run(["sweep", "--config", named, "--out", out])
want = ["fast,seed=0", "fast,seed=1", "slow,seed=0", "slow,seed=1"]
check(sorted(d for d in os.listdir(out) if os.path.isdir(os.path.join(out, d))) == want,
      f"folders named by the runs' names: {sorted(os.listdir(out))}")
doc = json.load(open(os.path.join(out, "sweep.json")))
check(sorted(r["name"] for r in doc["runs"]) == want, "sweep.json's rows")
check(sorted({r["setting"] for r in doc["runs"]}) == ["fast", "slow"], "rows name their setting")
check("fast has the lowest" in doc["verdict"] or "fast" in doc["verdict"],
      f"the verdict names settings by name: {doc['verdict']}")
rep = os.path.join(WORK, "named.html")
run(["report", out, "--out", rep])
html = open(rep).read()
legend = re.search(r'<ul class="legend">(.*?)</ul>', html, re.S).group(1)
check(all(n in legend.replace("<wbr>", "") for n in want), "the legend names them")
settings = re.search(r'<table id="settings">(.*?)</table>', html, re.S).group(1)
check('class="overrides">fast' in settings and 'class="overrides">slow' in settings,
      "the settings table names them")

for body, line, what in [
        ("    - {name: a, optimizer.lr: 0.1}\n    - {name: a, optimizer.lr: 0.2}\n", 15, "used twice"),
        ("    - {name: a/b, optimizer.lr: 0.1}\n", 14, "holds '/'"),
        ("    - {name: ../up, optimizer.lr: 0.1}\n", 14, "starts with '.'"),
        ("    - {name: " + "x" * 65 + ", optimizer.lr: 0.1}\n", 14, "longer than 64")]:
    bad = write("bad.yaml", BASE + "sweep:\n  runs:\n" + body)
    dest = os.path.join(WORK, "bad-out")
    p = run(["sweep", "--config", bad, "--out", dest], expect=2)
    check(f"bad.yaml:{line}:" in p.stderr and what in p.stderr and not os.path.exists(dest),
          f"a name {what}: exit 2 naming line {line}, nothing created\n{p.stderr}")

# ---- a --metric that is no row's metric: refused before any run (before: the sweep ran, and its
# verdict was "no completed run has bogus", exit 0) ----
dest = os.path.join(WORK, "metric-out")
p = run(["sweep", "--config", write("metric.yaml", BASE), "--grid", "optimizer.lr=0.1,0.2",
         "--metric", "best_eval_los", "--out", dest], expect=2)
check("--metric best_eval_los: not a metric of a sweep's runs" in p.stderr and
      "did you mean 'best_eval_loss'?" in p.stderr and not os.path.exists(dest),
      f"--metric misspelt: exit 2 with the closest name, nothing run\n{p.stderr}")

# ---- 4. replay from a sweep file with seeds ----
rec = os.path.join(WORK, "lr", "lr=0.3,seed=0")
policies = write("policies.yaml", BASE.replace("optimizer: {type: sgd, lr: 0.05}",
                                               "optimizer: {type: sgd, lr: 0.3}") + """sweep:
  grid: {scaler.policy: [pytorch, megatron]}
  seeds: [0, 1, 2]
""")
p = run(["sweep", "--config", policies, "--replay-from", rec])
rows = [l for l in p.stdout.splitlines() if l.startswith("policy=")]
check(len(rows) == 2 and rows[0].startswith("policy=pytorch ") and rows[1].startswith("policy=megatron "),
      f"one row per setting, seed-free:\n{p.stdout}")
check("seed-free" in p.stdout, "says replay is seed-free")
p = run(["sweep", "--replay-from", rec, "--set", "seed=3", "--grid", "scaler.init_scale=1024,65536"])
rows = [l for l in p.stdout.splitlines() if l.startswith("init_scale=")]
check(len(rows) == 2 and "seed" not in "".join(rows), f"--set seed=3 accepted:\n{p.stdout}")

# Named settings name their rows.
named_rules = write("named_rules.yaml", BASE.replace("optimizer: {type: sgd, lr: 0.05}",
                                                    "optimizer: {type: sgd, lr: 0.3}") + """sweep:
  runs:
    - {name: default}
    - {name: meg, scaler.policy: megatron, scaler.hysteresis: 2}
  seeds: [0, 1]
""")
p = run(["sweep", "--config", named_rules, "--replay-from", rec])
rows = [l.split()[0] for l in p.stdout.splitlines() if l.startswith(("default ", "meg "))]
check(rows == ["default", "meg"], f"named settings name the rows:\n{p.stdout}")

if FAILURES:
    print(f"{len(FAILURES)} check(s) failed")
    sys.exit(1)
print("sweep verdict: all checks passed")
