#!/usr/bin/env bash
# export --format hf against a PyTorch module with Hugging Face's GPT-2 structure and names
# (scripts/dev/hf_gpt2.py): a tiny GPT with biases trains a few steps; its hf folder loads with
# strict=True, its logits on 4 windows agree with nanoGPT's layout of the same weights, and its
# losses on those windows with `ampctl eval` (ampctl's forward, fp32), within the derived bounds.
# Skipped (exit 77) when no python3 with torch is found (apt-get install python3-torch).
#   hf_gpt2.sh AMPCTL CONFIGS SCRIPT WORK
set -euo pipefail
ampctl=$1 configs=$2 script=$3 work=$4/hf-gpt2-test
py=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c "import torch" 2>/dev/null; then py=$p; break; fi
done
if [[ -z $py ]]; then
  echo "SKIPPED: no python3 with torch (apt-get install python3-torch)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
for i in $(seq 40); do echo "the cat sat on the mat; a dog ate the hat."; done > "$work/tiny.txt"
"$ampctl" train --config "$configs/gpt_fortunes.yaml" --run-dir "$work/run" --set device=cpu \
  --set data.train.path="$work/tiny.txt" --set model.n_layer=2 --set model.n_head=2 \
  --set model.n_embd=16 --set model.block_size=16 --set model.bias=true \
  --set model.tie_embeddings=false --set data.batch_size=4 --set training.max_steps=6 \
  --set scheduler.warmup_steps=2 --set training.eval_every=0 --set training.eval_batches=2 \
  --set checkpoint.every_steps=0 >/dev/null
"$ampctl" export --checkpoint "$work/run" --format hf --out "$work/hf" >/dev/null
"$ampctl" export --checkpoint "$work/run" --format safetensors --out "$work/run.safetensors" \
  >/dev/null
"$py" "$script" --hf "$work/hf" --safetensors "$work/run.safetensors" --text "$work/tiny.txt" \
  --ampctl "$ampctl" --checkpoint "$work/run"
