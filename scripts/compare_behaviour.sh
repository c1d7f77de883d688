#!/usr/bin/env bash
# Behaviour unchanged? Runs the same training cases with two ampctl binaries (for example a build
# of main before a refactor and one after it) and compares, bitwise:
#   * metrics.jsonl, line by line, without the time fields (time_s);
#   * summary.json, every field but the timings (wall/train time, samples/s, step ms, phases) and
#     the backend's description;
#   * every checkpoint: model tensors, optimizer state and tensors, scaler state_dict, scheduler,
#     rng, data cursor and the metrics object (its timings aside), and the resolved config (keys
#     the new binary adds are listed, not counted as a difference).
# Output fields (summary, metrics lines, checkpoint objects) that only the new binary writes
# are listed and not counted, as config keys are; a field only the old one writes differs.
# Cases: configs/quickstart.yaml in fp16, bf16 and fp32, configs/overflow_demo.yaml, a short
# Fashion-MNIST run, a quickstart with dropout + LayerNorm + accumulation + clipping + SGD
# momentum, a resume split (train to 200 with a checkpoint at 100, resume from 100 to 400), and
# one quickstart per other scale rule (scaler.policy deepspeed, megatron, fairseq, auto) with
# injected overflows and a checkpoint at 60, its rule's state included.
# Every run pins optimizer.weight_decay, so a change of its default does not count as a change
# of behaviour. Prints a table, then exits 0 when every case is equal, 1 otherwise.
#
#   bash scripts/compare_behaviour.sh OLD_AMPCTL NEW_AMPCTL [WORK_DIR]
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 OLD_AMPCTL NEW_AMPCTL [WORK_DIR]" >&2
  exit 2
fi
old=$(realpath "$1")
new=$(realpath "$2")
root=$(cd "$(dirname "$0")/.." && pwd)
work=${3:-$(mktemp -d /tmp/ampctl-compare.XXXXXX)}
mkdir -p "$work"
cfg="$root/configs"
pin=(--set device=cpu --set optimizer.weight_decay=0.0)

# run BIN SIDE CASE ARGS...: one training run into WORK/SIDE/CASE (its console in CASE.log).
run() {
  local bin=$1 side=$2 case=$3
  shift 3
  local dir="$work/$side/$case"
  rm -rf "$dir"
  mkdir -p "$work/$side"
  "$bin" train "$@" "${pin[@]}" --run-dir "$dir" >"$dir.log" 2>&1 || {
    echo "compare_behaviour: $side $case failed (exit $?), see $dir.log" >&2
    return 1
  }
}

rules=(deepspeed megatron fairseq auto)
cases=(quickstart_fp16 quickstart_bf16 quickstart_fp32 overflow_demo fashion_mnist kitchen_sink resume_split
  "${rules[@]/#/rule_}")
for side in old new; do
  bin=$old
  [[ $side == new ]] && bin=$new
  run "$bin" $side quickstart_fp16 --config "$cfg/quickstart.yaml"
  run "$bin" $side quickstart_bf16 --config "$cfg/quickstart_bf16.yaml"
  run "$bin" $side quickstart_fp32 --config "$cfg/quickstart_fp32.yaml"
  run "$bin" $side overflow_demo --config "$cfg/overflow_demo.yaml"
  run "$bin" $side fashion_mnist --config "$cfg/fashion_mnist_mlp.yaml" \
    --set training.max_steps=300 --set training.eval_every=150 --set logging.every_steps=100
  run "$bin" $side kitchen_sink --config "$cfg/quickstart.yaml" --set model.dropout=0.1 \
    --set model.layer_norm=true --set model.activation=gelu --set training.grad_accum_steps=2 \
    --set training.grad_clip_norm=1.0 --set optimizer.type=sgd --set optimizer.momentum=0.9 \
    --set optimizer.lr=0.01 --set training.max_steps=200 --set scaler.growth_interval=20 \
    --set debug.inject_nonfinite_at=[7,8,50]
  for rule in "${rules[@]}"; do
    run "$bin" $side rule_$rule --config "$cfg/quickstart.yaml" --set scaler.policy=$rule \
      --set training.max_steps=120 --set scaler.growth_interval=10 --set checkpoint.every_steps=60 \
      --set debug.inject_nonfinite_at=[3,4,5,40,41,90]
  done
  run "$bin" $side resume_split --config "$cfg/quickstart.yaml" --set training.max_steps=200 \
    --set checkpoint.every_steps=100 --set checkpoint.keep_last=5
  # From step 100, the run's later checkpoint removed first (as --rewind would; a binary from
  # before that flag resumes the same way).
  rm "$work/$side/resume_split/checkpoints/step-00000200.json"
  "$bin" resume --checkpoint "$work/$side/resume_split/checkpoints/step-00000100.json" \
    --set training.max_steps=400 >"$work/$side/resume_split.resume.log" 2>&1 || {
    echo "compare_behaviour: $side resume_split's resume failed, see $work/$side/resume_split.resume.log" >&2
    exit 1
  }
done

python3 - "$work" "${cases[@]}" <<'EOF'
import json, os, sys

work, cases = sys.argv[1], sys.argv[2:]
TIME_KEYS = {"time_s", "wall_time_s", "train_time_s", "samples_per_s", "steady_samples_per_s",
             "steady_step_ms", "phase_ms", "backend", "train_seconds", "eval_seconds",
             "steady_seconds", "ampctl_version"}

def strip(v):
    if isinstance(v, dict):
        return {k: strip(x) for k, x in v.items() if k not in TIME_KEYS}
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v

NEW_FIELDS = set()  # output fields only the new binary writes: listed, not a difference

def first_diff(a, b, path=""):
    if type(a) != type(b):
        return f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                label = "checkpoint" + path.split(".json", 1)[1] if ".json" in path else path
                NEW_FIELDS.add(f"{label}.{k}")
                continue
            if k not in b:
                return f"{path}.{k}: only in old"
            d = first_diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_diff(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {str(a)[:60]} vs {str(b)[:60]}"

def metrics(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [strip(json.loads(line)) for line in f if line.strip()]

def config_diff(old, new):
    """Keys of old must be in new with equal values; keys only in new are listed."""
    added = []
    def walk(a, b, path):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in b:
                if k not in a:
                    added.append(f"{path}{k}")
            for k in a:
                if k not in b:
                    return f"{path}{k}: missing in new"
                d = walk(a[k], b[k], f"{path}{k}.")
                if d:
                    return d
            return None
        return None if a == b else f"{path[:-1]}: {a} vs {b}"
    return walk(old, new, ""), added

failed = False
rows = []
for case in cases:
    o, n = os.path.join(work, "old", case), os.path.join(work, "new", case)
    notes = []
    mo, mn = metrics(o), metrics(n)
    d = first_diff(mo, mn, "metrics")
    m_ok = d is None
    if d:
        notes.append(d)
    so = strip(json.load(open(os.path.join(o, "summary.json"))))
    sn = strip(json.load(open(os.path.join(n, "summary.json"))))
    d = first_diff(so, sn, "summary")
    s_ok = d is None
    if d:
        notes.append(d)
    ck_o = sorted(f for f in os.listdir(os.path.join(o, "checkpoints")) if f.endswith(".json"))
    ck_n = sorted(f for f in os.listdir(os.path.join(n, "checkpoints")) if f.endswith(".json"))
    c_ok = ck_o == ck_n
    if not c_ok:
        notes.append(f"checkpoints {ck_o} vs {ck_n}")
    tensors = 0
    added = []
    for f in ck_o if c_ok else []:
        a = json.load(open(os.path.join(o, "checkpoints", f)))
        b = json.load(open(os.path.join(n, "checkpoints", f)))
        # The document's CRC-32 covers every field, the timings in its metrics object and the
        # config too: two runs of one binary differ there, and so does a run with a config key
        # the new binary adds; every field it covers is compared here and above instead.
        a.pop("crc32", None)
        b.pop("crc32", None)
        cd, added = config_diff(a.pop("config"), b.pop("config"))
        if cd:
            c_ok = False
            notes.append(f"{f}: config {cd}")
        tensors += len(a["model"]["tensors"]) + len(a["optimizer"].get("tensors", {}))
        d = first_diff(strip(a), strip(b), f)
        if d:
            c_ok = False
            notes.append(d)
    ok = m_ok and s_ok and c_ok
    failed |= not ok
    rows.append((case, f"{len(mo)} {'equal' if m_ok else 'DIFFER'}", "equal" if s_ok else "DIFFER",
                 f"{len(ck_o)} files, {tensors} tensors {'equal' if c_ok else 'DIFFER'}",
                 "; ".join(notes)[:200], added))

print(f"{'case':<16} {'metrics lines':<18} {'summary':<8} {'checkpoints':<32} verdict")
for case, m, s, c, note, added in rows:
    print(f"{case:<16} {m:<18} {s:<8} {c:<32} {'EQUAL' if not note else 'DIFFERENT: ' + note}")
extra = sorted({k for r in rows for k in r[5]})
if extra:
    print("config keys only the new binary writes (not compared): " + ", ".join(extra))
if NEW_FIELDS:
    print("output fields only the new binary writes (not compared): " + ", ".join(sorted(NEW_FIELDS)))
print("all cases bitwise equal" if not failed else "some cases differ")
sys.exit(1 if failed else 0)
EOF
