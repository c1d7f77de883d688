#!/usr/bin/env bash
# configs/gpt_finetune.yaml as its header says to use it: both corpora from their Debian packages
# (scripts/examples/fortunes_corpus.sh), a short source run of configs/gpt_fortunes.yaml, then the
# fine-tuning config with init.from pointing at it. Checks: `validate` resolves the config's
# relative init.from and data path from the config's folder; the fine-tuning run logs a step-0
# evaluation of the loaded weights, keeps the source's vocabulary, and ends below its step-0 loss.
# Skipped (exit 77) without the fortunes and fortunes-bofh-excuses packages.
#   gpt_finetune.sh AMPCTL ROOT WORK
set -euo pipefail
ampctl=$1 root=$2 work=$3/gpt-finetune-test
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
corpus="$root/scripts/examples/fortunes_corpus.sh"
if ! bash "$corpus" "$work/fortunes.txt" >/dev/null 2>&1 ||
  ! bash "$corpus" "$work/bofh.txt" fortunes-bofh-excuses >/dev/null 2>&1; then
  echo "SKIPPED: the fortunes and fortunes-bofh-excuses packages are needed (scripts/setup.sh)"
  exit 77
fi
resolved=$("$ampctl" validate --config "$root/configs/gpt_finetune.yaml")
grep -q "^  from: $root/runs/gpt_fortunes " <<<"$resolved" ||
  fail "init.from is not resolved from the config's folder: $(grep 'from:' <<<"$resolved")"
grep -q "path: $root/data/bofh.txt" <<<"$resolved" ||
  fail "the data path is not resolved from the config's folder"

small=(--set device=cpu --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2
  --set training.eval_batches=4 --set checkpoint.every_steps=0 --set scheduler.warmup_steps=10)
"$ampctl" train --config "$root/configs/gpt_fortunes.yaml" --run-dir "$work/src" "${small[@]}" \
  --set data.train.path="$work/fortunes.txt" --set training.max_steps=60 \
  --set training.eval_every=0 >/dev/null 2>&1 || fail "the source run failed"
"$ampctl" train --config "$root/configs/gpt_finetune.yaml" --run-dir "$work/ft" "${small[@]}" \
  --set init.from="$work/src" --set data.train.path="$work/bofh.txt" \
  --set training.max_steps=40 --set training.eval_every=40 >"$work/ft.log" 2>&1 ||
  fail "the fine-tuning run failed: $(tail -3 "$work/ft.log")"
cmp -s "$work/src/vocab.json" "$work/ft/vocab.json" || fail "the source's vocabulary was not kept"
python3 - "$work/ft/metrics.jsonl" <<'PY'
import json, sys
ev = [d for d in map(json.loads, open(sys.argv[1])) if d.get("kind") == "eval"]
if not ev or ev[0]["step"] != 0:
    sys.exit(f"FAIL: no step-0 evaluation: {ev}")
if not ev[-1]["loss"] < ev[0]["loss"]:
    sys.exit(f"FAIL: fine-tuning did not lower the loss: {ev[0]['loss']} -> {ev[-1]['loss']}")
print(f"gpt_finetune: eval loss {ev[0]['loss']:.4f} at step 0 -> {ev[-1]['loss']:.4f} at step {ev[-1]['step']}")
PY
