#!/usr/bin/env python3
"""`base:` in a configuration file (docs/reference.md, "base:"), end to end through the real binary.

  merge        a child over a base validates to the same configuration as the merge written out
               by hand: maps merged key by key (the child wins), lists replaced whole, a key only
               the base has kept; a list of bases (the later wins); a base of a base, each read
               from the folder of the file that names it.
  origins      `validate` names each key's origin: the base's line, the child's line, the --set;
               defaults name none.
  problems     a cycle (two files, and a file that is its own base) is exit 2 naming both files;
               a missing base is exit 2 naming it and the base: line; a bad value written in the
               base is named by the base's file:line:column; train refuses each before making a
               run directory; base: a mapping, and a base with a sweep: section, are exit 2.
  paths        a path written in a base is read from the base's folder, one in the child from the
               child's, a --set from the current directory.
  run          a run's config.yaml is the merged configuration (no base:), and the run resumes
               with the base file gone.
  sweep        a sweep file on a base runs each run merged (a base's path from the base's folder,
               a sweep section's from the sweep file's); --set base= is exit 2.
  shipped      configs/gpt_finetune.yaml and configs/sweep_policies.yaml (both on
               configs/gpt_fortunes.yaml) validate from another directory with the model's keys
               from gpt_fortunes.yaml.

Usage: config_base.py AMPCTL SOURCE_DIR WORKDIR
"""
import os
import re
import shutil
import subprocess
import sys

from cli_harness import FAILURES, check, run_ampctl, train_lines

AMPCTL, ROOT, WORK = sys.argv[1:4]
AMPCTL = os.path.abspath(AMPCTL)
WORK = os.path.join(os.path.abspath(WORK), "config-base-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)


def write(rel, text):
    path = os.path.join(WORK, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def run(args, expect=0, cwd=None):
    if cwd is None:
        return run_ampctl(AMPCTL, args, expect)
    p = subprocess.run([AMPCTL] + args, capture_output=True, text=True, timeout=300, cwd=cwd)
    if expect is not None and p.returncode != expect:
        print(p.stdout[-3000:], p.stderr[-3000:], sep="\n")
        raise SystemExit(f"ampctl {' '.join(args)}: exit {p.returncode}, expected {expect}")
    return p


def values(validate_out):
    """validate's YAML without comments and without the name line."""
    keep = []
    for ln in validate_out.splitlines():
        ln = ln.split("  #")[0].rstrip() if "  #" in ln else ln.rstrip()
        if ln.startswith("#") or not ln.strip() or ln.startswith("name:"):
            continue
        keep.append(ln)
    return keep


def line_of(text, needle):
    """The 1-based line of text that holds needle (once)."""
    hits = [i + 1 for i, ln in enumerate(text.splitlines()) if needle in ln]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


def origin(validate_out, key_line):
    """The [origin] comment of the resolved line that starts with key_line, or None."""
    for ln in validate_out.splitlines():
        if ln.strip().startswith(key_line):
            m = re.search(r"# \[([^\]]*)\]", ln)
            return m.group(1) if m else None
    raise AssertionError("no line " + key_line)


# ---- merge ----
BASE_TEXT = """seed: 3
device: cpu
precision: fp16
model: {type: mlp, hidden: [16, 16], activation: relu}
data:
  train: {source: synthetic, task: classification, samples: 256, features: 8, classes: 4}
  batch_size: 32
optimizer:
  type: adamw
  lr: 0.01
  weight_decay: 0.05
scheduler: {type: cosine, warmup_steps: 2, min_lr: 0.001}
training: {max_steps: 12, eval_every: 0}
logging: {every_steps: 4}
"""
base = write("lib/base.yaml", BASE_TEXT)
CHILD_TEXT = """# a child of ../lib/base.yaml
base: ../lib/base.yaml
optimizer:
  lr: 0.002
model:
  hidden: [8]
training:
  max_steps: 10
checkpoint: {every_steps: 5}
"""
child = write("exp/child.yaml", CHILD_TEXT)
# The same configuration merged by hand: maps key by key, the child's values win, lists replaced.
merged = write("exp/merged.yaml", """seed: 3
device: cpu
precision: fp16
model: {type: mlp, hidden: [8], activation: relu}
data:
  train: {source: synthetic, task: classification, samples: 256, features: 8, classes: 4}
  batch_size: 32
optimizer: {type: adamw, lr: 0.002, weight_decay: 0.05}
scheduler: {type: cosine, warmup_steps: 2, min_lr: 0.001}
training: {max_steps: 10, eval_every: 0}
checkpoint: {every_steps: 5}
logging: {every_steps: 4}
""")
v_child = run(["validate", "--config", child]).stdout
v_merged = run(["validate", "--config", merged]).stdout
check(values(v_child) == values(v_merged),
      "the child validates to the hand-merged configuration:\n" + "\n".join(values(v_child)))
check("  hidden: [8]" in v_child, "a list is replaced, not appended")
check("base:" not in "\n".join(values(v_child)), "base: is not a key of the resolved configuration")
check(v_child.startswith("name: child "), "the default name is the child's stem: " + v_child[:40])

# A list of bases: the later wins over the earlier, the file over both; a base of a base is read
# from the folder of the file that names it.
write("lib/deep/root.yaml", "base: ../base.yaml\nseed: 11\nlogging: {every_steps: 2}\n")
write("lib/faster.yaml", "optimizer: {lr: 0.03}\nseed: 12\n")
listed = write("exp/listed.yaml",
               "base: [../lib/deep/root.yaml, ../lib/faster.yaml]\nlogging: {every_steps: 3}\n")
v = run(["validate", "--config", listed]).stdout
check("seed: 12" in v, "the later base wins (seed)")
check(re.search(r"^  lr: 0\.03\b", v, re.M) is not None, "the later base's optimizer.lr")
check(re.search(r"^  weight_decay: 0\.05\b", v, re.M) is not None,
      "the base of a base (../base.yaml from lib/deep/) is merged")
check(re.search(r"^  every_steps: 3\b", v, re.M) is not None, "the file wins over its bases")

# ---- origins ----
v = run(["validate", "--config", child, "--set", "training.eval_every=5"]).stdout
check(origin(v, "lr:") == f"{child}:{line_of(CHILD_TEXT, 'lr: 0.002')}",
      "optimizer.lr's origin is the child's line: " + str(origin(v, "lr:")))
check(origin(v, "weight_decay:") == f"{base}:{line_of(BASE_TEXT, 'weight_decay')}",
      "optimizer.weight_decay's origin is the base's line: " + str(origin(v, "weight_decay:")))
check(origin(v, "activation:") == f"{base}:{line_of(BASE_TEXT, 'activation')}",
      "model.activation's origin is the base's line")
check(origin(v, "eval_every:") == "--set training.eval_every=5",
      "training.eval_every's origin is the --set: " + str(origin(v, "eval_every:")))
check(origin(v, "eps:") is None, "a default has no origin: " + str(origin(v, "eps:")))

# ---- problems ----
a = write("cycle/a.yaml", "base: b.yaml\nseed: 1\n")
b = write("cycle/b.yaml", "seed: 2\nbase: a.yaml\n")
for cmd in (["validate", "--config", a], ["train", "--config", a, "--run-dir",
                                          os.path.join(WORK, "cycle-run")]):
    p = run(cmd, expect=2)
    check("a.yaml" in p.stderr and "b.yaml" in p.stderr and "cycle" in p.stderr,
          f"{cmd[0]}: a cycle names both files: {p.stderr}")
    check(f"{b}:2:7: base: a cycle" in p.stderr, "the cycle is named at b.yaml's base: line: "
          + p.stderr)
check(not os.path.exists(os.path.join(WORK, "cycle-run")), "no run directory for a cycle")
selfish = write("cycle/self.yaml", "seed: 1\nbase: [self.yaml]\n")
p = run(["validate", "--config", selfish], expect=2)
check("cycle" in p.stderr and p.stderr.count("self.yaml") >= 2, "a file its own base: " + p.stderr)

missing = write("missing/child.yaml", "seed: 1\nbase: ../nowhere/base.yaml\n")
for cmd in (["validate", "--config", missing], ["train", "--config", missing, "--run-dir",
                                                os.path.join(WORK, "missing-run")]):
    p = run(cmd, expect=2)
    check(f"{missing}:2:7: base: cannot read the base file" in p.stderr and
          "nowhere/base.yaml" in p.stderr, f"{cmd[0]}: a missing base: {p.stderr}")
check(not os.path.exists(os.path.join(WORK, "missing-run")), "no run directory for a missing base")

bad_base_text = BASE_TEXT + "scaler: {growth_factor: 0.5}\n"
bad_base = write("bad/base.yaml", bad_base_text)
bad_child = write("bad/child.yaml", "base: base.yaml\nseed: 1\n")
p = run(["validate", "--config", bad_child], expect=2)
check(f"{bad_base}:{line_of(bad_base_text, 'growth_factor')}:" in p.stderr and
      "scaler.growth_factor" in p.stderr, "a bad value in the base names the base's line: "
      + p.stderr)
p = run(["validate", "--config", write("bad/kind.yaml", "base: {a: 1}\n")], expect=2)
check("base: expected a file name or a list of file names" in p.stderr, "base: a mapping: "
      + p.stderr)

swept = write("bad/swept.yaml", BASE_TEXT + "sweep:\n  grid: {seed: [1, 2]}\n")
p = run(["validate", "--config", write("bad/on_sweep.yaml", "base: swept.yaml\n")], expect=2)
check(f"{swept}:{line_of(BASE_TEXT, 'logging') + 1}:1: sweep: a base file holds configuration keys "
      "only" in p.stderr, "a base with a sweep: section: " + p.stderr)

# ---- paths ----
write("p/common/base.yaml", BASE_TEXT.replace(
    "  train: {source: synthetic, task: classification, samples: 256, features: 8, classes: 4}",
    "  train: {source: csv, path: rows.csv, label_column: -1}\n"
    "  eval: {source: csv, path: eval.csv, label_column: -1}"))
p_child = write("p/exp/child.yaml", "base: ../common/base.yaml\n"
                "data: {eval: {source: csv, path: mine.csv, label_column: -1}}\n")
cwd = os.path.join(WORK, "p", "cwd")
os.makedirs(cwd)
v = run(["validate", "--config", "../exp/child.yaml"], cwd=cwd).stdout
check(f"path: {os.path.join(WORK, 'p', 'common', 'rows.csv')}" in v,
      "the base's path is read from the base's folder")
check(f"path: {os.path.join(WORK, 'p', 'exp', 'mine.csv')}" in v,
      "the child's path is read from the child's folder")
v = run(["validate", "--config", p_child, "--set", "data.train.path=set.csv"], cwd=cwd).stdout
check(f"path: {os.path.join(cwd, 'set.csv')}" in v, "a --set path is read from the current directory")

# ---- run ----
run_dir = os.path.join(WORK, "run")
run(["train", "--config", child, "--run-dir", run_dir, "--set", "training.max_steps=6"])
with open(os.path.join(run_dir, "config.yaml")) as f:
    saved = f.read()
check(re.search(r"^base:", saved, re.M) is None, "config.yaml holds no base:")
v_saved = run(["validate", "--config", os.path.join(run_dir, "config.yaml")]).stdout
v_run = run(["validate", "--config", child, "--set", "training.max_steps=6"]).stdout
check(values(v_saved) == values(v_run), "config.yaml is the merged configuration")
moved = os.path.join(WORK, "lib-moved")
os.rename(os.path.join(WORK, "lib"), moved)
run(["resume", "--checkpoint", run_dir, "--set", "training.max_steps=10"])
last = train_lines(run_dir)[-1]
check(last["step"] == 10, f"the resumed run reached step 10 without its base file: {last['step']}")
os.rename(moved, os.path.join(WORK, "lib"))

# ---- sweep ----
# A sweep file on a base: every run is the base merged under the file, then the run's values;
# a relative path in the sweep section is the sweep file's, the base's the base's.
write("sw/data/rows.csv", "".join(f"{i % 7},{(i * 3) % 5},{i % 2}\n" for i in range(64)))
write("sw/lib/base.yaml", BASE_TEXT.replace(
    "  train: {source: synthetic, task: classification, samples: 256, features: 8, classes: 4}",
    "  train: {source: csv, path: ../data/rows.csv, label_column: -1}"))
write("sw/exp/other.csv", "".join(f"{i % 5},{(i * 7) % 3},{(i + 1) % 2}\n" for i in range(64)))
sweep_file = write("sw/exp/sweep.yaml", """base: ../lib/base.yaml
training: {max_steps: 4}
sweep:
  runs:
    - {name: theirs, seed: 1}
    - {name: mine, data.train.path: other.csv}
""")
out = os.path.join(WORK, "sw", "out")
run(["sweep", "--config", sweep_file, "--out", out])
for name, data in (("theirs", os.path.join(WORK, "sw", "data", "rows.csv")),
                   ("mine", os.path.join(WORK, "sw", "exp", "other.csv"))):
    with open(os.path.join(out, name, "config.yaml")) as f:
        saved = f.read()
    check(f"path: {data}\n" in saved and "max_steps: 4\n" in saved and
          re.search(r"^base:", saved, re.M) is None,
          f"sweep run {name}: merged, its data {data}:\n{saved[:600]}")
    check(train_lines(os.path.join(out, name))[-1]["step"] == 4, f"sweep run {name} ran 4 steps")

# --set cannot name a base: bases are merged before overrides.
p = run(["validate", "--config", merged, "--set", "base=../lib/base.yaml"], expect=2)
check("base: only a configuration file names its bases" in p.stderr, "--set base=: " + p.stderr)

# ---- shipped ----
elsewhere = os.path.join(WORK, "elsewhere")
os.makedirs(elsewhere)
fortunes = os.path.join(ROOT, "configs", "gpt_fortunes.yaml")
for name in ("gpt_finetune", "sweep_policies"):
    cfg = os.path.join(ROOT, "configs", name + ".yaml")
    v = run(["validate", "--config", cfg], cwd=elsewhere).stdout
    check(v.startswith(f"name: {name} "), f"{name}: its own name")
    o = origin(v, "n_embd:")
    check(o is not None and re.fullmatch(re.escape(os.path.normpath(fortunes)) + r":\d+", o),
          f"{name}: model.n_embd comes from gpt_fortunes.yaml: {o}")
    check(f"path: {os.path.join(ROOT, 'data')}" in v, f"{name}: the data path is the repository's")

if FAILURES:
    print(f"{len(FAILURES)} check(s) failed")
    sys.exit(1)
print("config_base: every check passed")
