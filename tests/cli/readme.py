#!/usr/bin/env python3
"""The README as a user reads it: at most 120 lines; the "Train, report, replay" commands run as
written (from a folder holding the repository's configs/, `ampctl` the built binary) and make
what they say; every command of "Commands" has a --help; the sample console lines have the
fields, in the order, of the lines the quickstart really prints; the config shown is the
shipped quickstart's, key for key.

  readme.py AMPCTL REPO WORK
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_harness import FAILURES, check  # noqa: E402


def blocks(text, lang):
    """The fenced blocks of TEXT whose info string is LANG ("" for a bare fence), in order."""
    out, cur, info = [], None, None
    for ln in text.splitlines(keepends=True):
        if ln.startswith("```"):
            if cur is None:
                cur, info = [], ln[3:].strip()
            else:
                if info == lang:
                    out.append("".join(cur))
                cur = None
        elif cur is not None:
            cur.append(ln)
    return out


def section(text, title):
    start = text.index("## " + title)
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def shape(line):
    """A console line's words with every number replaced by N."""
    return re.sub(r"-?[0-9][0-9.e+\-]*", "N", line.strip())


def main():
    ampctl, repo, work = sys.argv[1], sys.argv[2], sys.argv[3]
    work = os.path.join(work, "readme")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    shutil.copytree(os.path.join(repo, "configs"), os.path.join(work, "configs"))
    with open(os.path.join(repo, "README.md"), encoding="utf-8") as f:
        text = f.read()
    check(len(text.splitlines()) <= 120, f"README has {len(text.splitlines())} lines, over 120")

    # The tour, as written.
    tour = blocks(section(text, "Train, report, replay"), "sh")
    check(len(tour) == 1, "one sh block in the tour")
    lines = [ln.split("#")[0].strip() for ln in tour[0].splitlines()]
    lines = [ln for ln in lines if ln]
    check(len(lines) == 3, f"three commands in the tour: {lines}")
    out = {}
    for ln in lines:
        words = ln.split()
        check(words[0] == "ampctl", f"a tour command starts with ampctl: {ln}")
        p = subprocess.run([ampctl] + words[1:], cwd=work, capture_output=True, text=True,
                           timeout=300)
        check(p.returncode == 0, f"'{ln}' exits {p.returncode}: {p.stderr[-2000:]}")
        out[words[1]] = p
    run = os.path.join(work, "runs", "quickstart")
    with open(os.path.join(run, "summary.json")) as f:
        check(json.load(f)["status"] == "ok", "the tour's run ends ok")
    check(os.path.getsize(os.path.join(work, "quickstart.html")) > 1000, "the report is written")
    replay = out.get("replay")
    if replay:
        for rule in ("pytorch", "deepspeed", "megatron", "fairseq", "auto"):
            check(rule in replay.stdout, f"replay's table has a row for {rule}")

    # The sample console lines: the fields of the real ones, in their order.
    sample = [ln for ln in blocks(section(text, "A run"), "")[0].splitlines() if ln.strip()]
    real = [ln for ln in out["train"].stdout.splitlines() if ln.startswith("step ")]
    check(len(real) >= 3, f"the quickstart prints step lines: {out['train'].stdout[-1000:]}")
    for s, r in zip(sample, real):
        check(shape(s) == shape(r), f"README's console line\n  {s}\nis not shaped as the real\n  {r}")
        check(s.split()[1] == r.split()[1], f"README's line is for step {s.split()[1]}, "
              f"the real one for {r.split()[1]}")

    # The config shown is the shipped one, key for key.
    shown = blocks(section(text, "A run"), "yaml")[0]
    shown_path = os.path.join(work, "shown.yaml")
    with open(shown_path, "w") as f:
        f.write(shown)
    v_shown = subprocess.run([ampctl, "validate", "--config", shown_path], capture_output=True,
                             text=True)
    v_real = subprocess.run([ampctl, "validate", "--config", "configs/quickstart.yaml"], cwd=work,
                            capture_output=True, text=True)
    check(v_shown.returncode == 0 and v_real.returncode == 0, "both configs validate")

    def resolved(t):
        keep = []
        for ln in t.splitlines():
            ln = ln.split("#")[0].rstrip()
            if ln.strip():
                keep.append(ln)
        return keep

    check(resolved(v_shown.stdout) == resolved(v_real.stdout),
          "the README's config resolves to the shipped quickstart's")

    # Every command of "Commands" has a --help.
    cmds = set()
    for ln in blocks(section(text, "Commands"), "sh")[0].splitlines():
        words = ln.split("#")[0].split()
        if len(words) >= 2 and words[0] == "ampctl":
            # "ampctl eval | inspect | export ..." lists several commands.
            i = 1
            cmds.add(words[i])
            while i + 2 < len(words) and words[i + 1] == "|":
                i += 2
                cmds.add(words[i])
    for c in sorted(cmds):
        p = subprocess.run([ampctl, c, "--help"], capture_output=True, text=True)
        check(p.returncode == 0, f"ampctl {c} --help exits {p.returncode}")
    check(len(cmds) >= 11, f"the commands listed: {sorted(cmds)}")

    if FAILURES:
        sys.exit(1)
    print("readme: ok")


if __name__ == "__main__":
    main()
