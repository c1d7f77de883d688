#!/usr/bin/env bash
# Data-parallel training through mpirun (docs/distributed.md), end to end on the CPU:
#   dist_mpi.sh AMPCTL MPIRUN WORK CASE
# CASE is one of: lm_equivalence, equivalence, grad_amax, lm_grad_amax, auto, one_rank, inject_rank, resume, kill_rank, bad_data_rank,
# config_error, sigterm, zero_inject, zero_equal, zero_resume, usr1_zero0, usr1_zero1,
# config_mismatch, data_mismatch, retry_zero0, retry_zero1. Each case takes a few seconds;
# ctest runs each as cli.dist_<case>. No case can hang: every mpirun runs under `timeout` (MPI_LIMIT seconds), and a
# job it kills fails its case.
set -uo pipefail

AMPCTL=$1
MPIRUN=$2
WORK=$3
CASE=$4
DIR="$WORK/dist_$CASE"
rm -rf "$DIR"
mkdir -p "$DIR"
cd "$DIR" || exit 1
# As root in CI containers; oversubscribed on a 2-core machine; one thread per rank.
MPI_LIMIT=${MPI_LIMIT:-90}
MPI=(timeout -k 5 "$MPI_LIMIT" "$MPIRUN" --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1
  -x OPENBLAS_NUM_THREADS=1)
export OPENBLAS_NUM_THREADS=1
# Under the sanitizer build (scripts/test.sh step 2) the ranks run without LeakSanitizer: Open
# MPI's components keep allocations from MPI_Init to exit and are dlclose'd at MPI_Finalize, so
# their leaks have no module to suppress by. Every other ASan/UBSan check stays on, and the
# single-process runs of these cases keep leak detection.
if [[ -n "${ASAN_OPTIONS:-}" ]]; then
  MPI+=(-x "ASAN_OPTIONS=${ASAN_OPTIONS}:detect_leaks=0")
fi

fail() {
  echo "FAIL [$CASE]: $*" >&2
  exit 1
}

# The pid of rank R of the job that `timeout` (pid LAUNCHER) runs: mpirun is timeout's child, the
# ranks are mpirun's.
rank_pid() {
  local launcher=$1 rank=$2 mpirun pid
  for mpirun in $(pgrep -P "$launcher" 2>/dev/null); do
    for pid in $(pgrep -P "$mpirun" 2>/dev/null); do
      if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then
        echo "$pid"
        return 0
      fi
    done
  done
  return 1
}

# A small classification run; every step's metrics are logged.
cat >base.yaml <<'EOF'
name: dist
seed: 3
device: cpu
precision: fp16
model: {type: mlp, hidden: [32], activation: relu}
data:
  train: {source: synthetic, task: classification, samples: 512, features: 16, classes: 4}
  eval: {split_fraction: 0.25}
  batch_size: 16
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
scaler: {init_scale: 1024.0, growth_interval: 2}
training: {max_steps: 8}
logging: {every_steps: 4, metrics_every: 1}
EOF

# The per-step decisions of a run: "step found_inf skipped scale" lines.
decisions() {
  python3 - "$1" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if "step" in m and "scale" in m:
        print(m["step"], json.dumps(m.get("found_inf")), json.dumps(m.get("skipped")), m["scale"])
EOF
}

# The per-step gradient norms of a run: "step grad_norm" lines (the norm's exact decimal form).
norms() {
  python3 - "$1" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("kind") == "train":
        print(m["step"], repr(m.get("grad_norm")))
EOF
}

# The checkpoint's model tensors ({name: crc32}) of a run directory's newest checkpoint.
param_crcs() {
  python3 - "$1" <<'EOF'
import json, os, sys
d = os.path.join(sys.argv[1], "checkpoints")
names = sorted(f for f in os.listdir(d) if f.endswith(".json") or f.startswith("step"))
ck = json.load(open(os.path.join(d, names[-1])))
def walk(o, path=""):
    if isinstance(o, dict):
        if "crc32" in o and "data" in o:
            print(path, o["crc32"])
            return
        for k in sorted(o):
            walk(o[k], path + "/" + k)
    elif isinstance(o, list):
        for i, v in enumerate(o):
            walk(v, path + "/" + str(i))
for section in ("model", "params", "optimizer"):
    if section in ck:
        walk(ck[section], section)
EOF
}

case "$CASE" in
lm_equivalence)
  # A GPT on text across ranks: 2 ranks x batch 2 against 1 rank x batch 4. Training batch k is
  # global (the 4 windows window_indices draws for a batch of 4) and rank r takes windows
  # [2 r, 2 r + 2); evaluation batch j likewise. So both runs see the same windows: the same
  # decisions at every step (an overflow injected at step 3), and losses and the evaluation
  # loss within the tolerance below. fp32 with the scaler on leaves summation order as the only
  # difference.
  python3 -c "
import random
r = random.Random(7)
words = 'the loss scale grows and backs off when a gradient overflows in half precision'.split()
print('\n'.join(' '.join(r.choice(words) for _ in range(12)) for _ in range(400)))" >corpus.txt
  cat >lm.yaml <<'EOF'
name: distlm
seed: 5
device: cpu
precision: fp32
model: {type: gpt, n_layer: 2, n_head: 2, n_embd: 16, block_size: 16, dropout: 0.0}
data:
  train: {source: text, path: corpus.txt, vocab: char, split_fraction: 0.25}
  batch_size: 2
optimizer: {type: sgd, lr: 0.05}
scaler: {enabled: true, init_scale: 1024.0, growth_interval: 2}
training: {max_steps: 6, eval_every: 3, eval_batches: 2}
logging: {every_steps: 3, metrics_every: 1}
debug: {inject_nonfinite_at: [3]}
EOF
  "${MPI[@]}" -np 2 "$AMPCTL" train --config lm.yaml --run-dir "$DIR/two" \
    >two.out 2>two.err || fail "2-rank run: $(cat two.err)"
  "$AMPCTL" train --config lm.yaml --run-dir "$DIR/one" --set data.batch_size=4 \
    >one.out 2>one.err || fail "1-rank run: $(cat one.err)"
  diff <(decisions two/metrics.jsonl) <(decisions one/metrics.jsonl) ||
    fail "found_inf / skipped / scale differ"
  [ "$(decisions one/metrics.jsonl | wc -l)" = 6 ] || fail "expected 6 metrics lines"
  decisions one/metrics.jsonl | awk '$1 == 3 && $3 != "true" { exit 1 }' ||
    fail "the injected step 3 was not skipped"
  grep -q "parameters bitwise identical on all 2 ranks" two.out two.err ||
    fail "no replica agreement line"
  # Tolerance. Step 1 sees identical parameters: the 1-rank loss is the f32 mean of 64 token
  # losses (4 windows x 16) in one order, the 2-rank loss the mean of two means of 32, within
  # 2 * 64 * 2^-24 = 7.6e-6 relative (the losses are positive); the evaluation means likewise.
  # Each gradient element is a sum over the 64 rows in two orders, within 7.6e-6 of the sum of
  # its terms' magnitudes; plain SGD at lr 0.05 over at most 5 applied steps moves the two runs'
  # parameters apart by at most 5 * 0.05 * 7.6e-6 * max|g|, which moves the loss by that times
  # |dL/dtheta|_1: small for this model's small gradients. Tolerance: 2e-5 relative at every
  # line, 2.6x step 1's bound (measured worst over all lines: 3.2e-7). A sharding mistake (both ranks on the same windows, an
  # evaluation shard counted twice or missed) moves a loss by 1e-2 or more.
  python3 - two/metrics.jsonl one/metrics.jsonl <<'EOF' || fail "losses differ beyond the tolerance"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
worst, n = 0.0, 0
for x, y in zip(a, b):
    if x.get("kind") != y.get("kind") or x.get("step") != y.get("step"):
        print("lines differ", x, y, file=sys.stderr)
        sys.exit(1)
    if x.get("loss") is None or y.get("loss") is None:
        continue
    n += 1
    rel = abs(x["loss"] - y["loss"]) / abs(y["loss"])
    worst = max(worst, rel)
    if rel > 2e-5:
        print(x.get("kind", "step"), x.get("step"), x["loss"], y["loss"], rel, file=sys.stderr)
        sys.exit(1)
if n < 8 or len(a) != len(b):
    print("only", n, "losses compared", file=sys.stderr)
    sys.exit(1)
print("worst relative loss difference", worst, "over", n)
EOF
  # The totals count both ranks' windows: the same samples as the 1-rank run.
  python3 - two one <<'EOF' || fail "the 2-rank checkpoint counts one rank's windows"
import json, os, sys
def samples(run):
    d = os.path.join(run, "checkpoints")
    return json.load(open(os.path.join(d, sorted(os.listdir(d))[-1])))["metrics"]["samples"]
a, b = samples(sys.argv[1]), samples(sys.argv[2])
print("samples", a, b)
sys.exit(0 if a == b == 24 else 1)
EOF
  ;;
equivalence)
  # 2 ranks x batch 16 against 1 rank x batch 32: the same global batches (one global shuffle,
  # rank r taking rows [16 r, 16 r + 16) of each), so the same decisions at every step; losses
  # agree within the tolerance derived below. fp32 arithmetic (with the scaler on, so that the
  # scale moves) leaves summation order as the only difference between the two runs.
  sets=(--set precision=fp32 --set scaler.enabled=true --set debug.inject_nonfinite_at=[4])
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/two" "${sets[@]}" \
    >two.out 2>two.err || fail "2-rank run: $(cat two.err)"
  "$AMPCTL" train --config base.yaml --run-dir "$DIR/one" "${sets[@]}" \
    --set data.batch_size=32 >one.out 2>one.err || fail "1-rank run: $(cat one.err)"
  diff <(decisions two/metrics.jsonl) <(decisions one/metrics.jsonl) ||
    fail "found_inf / skipped / scale differ"
  [ "$(decisions one/metrics.jsonl | wc -l)" = 8 ] || fail "expected 8 metrics lines"
  decisions one/metrics.jsonl | awk '$1 == 4 && $3 != "true" { exit 1 }' ||
    fail "the injected step 4 was not skipped"
  grep -q "parameters bitwise identical on all 2 ranks" two.out two.err ||
    fail "no replica agreement line"
  # Tolerance. Step 1 sees identical parameters: the 1-rank loss is the f32 mean of 32 per-sample
  # losses in one order, the 2-rank loss the mean of two f32 means of 16; two orders of n = 32
  # additions differ by at most 2 * gamma_n * sum|l_i| with gamma_n = n u / (1 - n u), u = 2^-24,
  # i.e. relative 2 * 32 * 2^-24 = 3.8e-6 of the mean loss (losses are positive). Later steps
  # add the parameters' drift: each gradient element is a sum over the 32 rows taken in two
  # orders (one gemm over 32 rows, or two over 16 and an f32 mean), again within relative
  # 3.8e-6 of the sum of |terms|; SGD with momentum 0.9 applies lr * (1 + 0.9 + ...) < 10 lr of
  # each gradient, so after k <= 8 steps every parameter moved by at most 8 * 10 * 0.05 *
  # 3.8e-6 * max|g| and, with |dL/dtheta|_1 * max|g| below 1 for this model at init (measured
  # 0.2), the loss by at most 1.5e-5 relative. Tolerance: 2e-5 relative at every step.
  python3 - two/metrics.jsonl one/metrics.jsonl <<'EOF' || fail "losses differ beyond the tolerance"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
worst = 0.0
for x, y in zip(a, b):
    if x.get("loss") is None or y.get("loss") is None:
        continue
    rel = abs(x["loss"] - y["loss"]) / abs(y["loss"])
    worst = max(worst, rel)
    if rel > 2e-5:
        print("step", x["step"], x["loss"], y["loss"], rel, file=sys.stderr)
        sys.exit(1)
print("worst relative loss difference", worst)
EOF
  ;;
grad_amax)
  # grad_amax (docs/reference.md) is the same for 1 and 2 ranks: training.global_batch 32 makes
  # 1 rank run two micro-batches of 16 (seed scale / 2) and 2 ranks one each (seed scale) over
  # the same rows (docs/distributed.md, "the shuffle"). Every rounding of a rank's backward is
  # then exactly twice the 1-rank micro-batch's (power-of-two seeds; the gradient mean over the
  # ranks, (2a + 2b) / 2, is a + b bitwise), so the max over the ranks' roundings divided by the
  # seed is bitwise the max over the micro-batches: the same decimal on every line. fp16 with
  # the scaler moving the scale, and an overflow injected at step 4 (a skipped step still has
  # its amax).
  sets=(--set training.global_batch=32 --set debug.inject_nonfinite_at=[4] --set logging.grad_amax=true)
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/two" "${sets[@]}" \
    >two.out 2>two.err || fail "2-rank run: $(cat two.err)"
  "$AMPCTL" train --config base.yaml --run-dir "$DIR/one" "${sets[@]}" \
    >one.out 2>one.err || fail "1-rank run: $(cat one.err)"
  diff <(decisions two/metrics.jsonl) <(decisions one/metrics.jsonl) ||
    fail "found_inf / skipped / scale differ"
  amaxes() {
    python3 - "$1" <<'EOF2'
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("kind") == "train":
        a = m.get("grad_amax")
        assert isinstance(a, float) and a > 0, m
        print(m["step"], repr(a), m.get("grad_amax_exact"))
EOF2
  }
  amaxes one/metrics.jsonl >one.amax || fail "a train line without a positive grad_amax"
  amaxes two/metrics.jsonl >two.amax || fail "a 2-rank train line without a positive grad_amax"
  [ "$(wc -l <one.amax)" = 8 ] || fail "expected 8 train lines"
  diff two.amax one.amax || fail "grad_amax differs between 1 and 2 ranks"
  ;;
auto)
  # scaler.policy auto (docs/reference.md, "Set from measurement") decides the same on every rank
  # and as one rank would: each rank's update reads the max over the ranks' grad_amax. With the
  # 1-rank equivalence of the grad_amax case (training.global_batch 32: 1 rank runs two
  # micro-batches seeded with scale / 2, 2 ranks one each seeded with scale) the rule keeps the
  # roundings in range, so it picks the same seed: the 1-rank scale is twice the 2-rank one, and
  # the seeds, skips and grad_amax of 2 ranks (ZeRO-0 and ZeRO-1) equal one rank's on every line.
  # From 2^30 the first steps overflow; auto measures grad_amax without logging.grad_amax.
  sets=(--set training.global_batch=32 --set scaler.policy=auto --set scaler.init_scale=1073741824.0)
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/two" "${sets[@]}" \
    >two.out 2>two.err || fail "2-rank run: $(cat two.err)"
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/zero" "${sets[@]}" \
    --set distributed.zero=1 >zero.out 2>zero.err || fail "2-rank ZeRO-1 run: $(cat zero.err)"
  # One rank starts at twice the scale: the same first seed.
  "$AMPCTL" train --config base.yaml --run-dir "$DIR/one" "${sets[@]}" \
    --set scaler.init_scale=2147483648.0 >one.out 2>one.err || fail "1-rank run: $(cat one.err)"
  auto_lines() {  # RUN_METRICS MICRO_BATCHES: step, seed (scale / micro-batches), decisions
    python3 - "$1" "$2" <<'EOF2'
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("kind") == "train":
        seed = m["scale"] / int(sys.argv[2])
        print(m["step"], repr(seed), m["found_inf"], m["skipped"], repr(m["grad_amax"]))
EOF2
  }
  auto_lines one/metrics.jsonl 2 >one.auto || fail "a 1-rank train line without grad_amax"
  auto_lines two/metrics.jsonl 1 >two.auto || fail "a 2-rank train line without grad_amax"
  auto_lines zero/metrics.jsonl 1 >zero.auto || fail "a ZeRO-1 train line without grad_amax"
  [ "$(wc -l <one.auto)" = 8 ] || fail "expected 8 train lines"
  grep -q " True True " one.auto || fail "no step overflowed from 2^30: the case proves less"
  diff two.auto one.auto || fail "2 ranks and 1 rank differ under auto"
  diff zero.auto one.auto || fail "ZeRO-1 and 1 rank differ under auto"
  ;;
lm_grad_amax)
  # grad_amax of a GPT (every backward rounding instrumented) is the same for 1 and 2 ranks, as
  # the grad_amax case argues for the MLP: training.global_batch 8 makes 1 rank run two
  # micro-batches of 4 windows (seed scale / 2) and 2 ranks one each (seed scale) over the same
  # windows, so each rank's roundings are exactly twice the micro-batch's (every op of the
  # backward is linear in its gradient input, and the values the max is taken over are normal
  # halves) and the max over the ranks divided by the seed is bitwise the 1-rank max.
  # That holds for a step that starts from the same parameters, and only the first step is sure
  # to: the GPT's update is not bitwise the same for 1 and 2 ranks (the tied wte's gradient
  # adds its head and embedding parts in another association, and the attention's key bias
  # gradient, zero in exact arithmetic, is rounding noise deep in fp16's subnormal range, where
  # half the seed rounds differently), so from step 2 the two runs measure slightly different
  # models. With the OpenBLAS kernels of an AVX2 CPU (AMPCTL_CPU_ISA=avx2,
  # OPENBLAS_CORETYPE=Haswell) that moved step 2's max, a bias gradient's sum, by 2^-12 (147.75
  # against 147.7502441 at the 1-rank seed). So the learning rate is 0: every step starts from the initial parameters while
  # the batches, the scale (it grows every 2 steps) and so the seeds change, and grad_amax must
  # be bitwise equal on every step, on every CPU path.
  python3 -c "
import random
r = random.Random(7)
words = 'the loss scale grows and backs off when a gradient overflows in half precision'.split()
print('\n'.join(' '.join(r.choice(words) for _ in range(12)) for _ in range(400)))" >corpus.txt
  for prec in fp16 bf16; do
    cat >lm.yaml <<EOF
name: distlm
seed: 5
device: cpu
precision: $prec
model: {type: gpt, n_layer: 2, n_head: 2, n_embd: 16, block_size: 16, dropout: 0.0}
data:
  train: {source: text, path: corpus.txt, vocab: char, split_fraction: 0.25}
  batch_size: 4
optimizer: {type: sgd, lr: 0.0}
scaler: {init_scale: 1024.0, growth_interval: 2}
training: {max_steps: 6, eval_every: 0, global_batch: 8}
logging: {every_steps: 3, metrics_every: 1, grad_amax: true}
EOF
    "${MPI[@]}" -np 2 "$AMPCTL" train --config lm.yaml --run-dir "$DIR/two_$prec" \
      >two.out 2>two.err || fail "$prec 2-rank run: $(cat two.err)"
    "$AMPCTL" train --config lm.yaml --run-dir "$DIR/one_$prec" \
      >one.out 2>one.err || fail "$prec 1-rank run: $(cat one.err)"
    diff <(decisions "$DIR/two_$prec/metrics.jsonl") <(decisions "$DIR/one_$prec/metrics.jsonl") ||
      fail "$prec: found_inf / skipped / scale differ"
    lm_amaxes() {
      python3 - "$1" <<'EOF2'
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("kind") == "train":
        a = m.get("grad_amax")
        assert isinstance(a, float) and a > 0, m
        print(m["step"], repr(a), m.get("grad_amax_exact"))
EOF2
    }
    lm_amaxes "$DIR/one_$prec/metrics.jsonl" >one.amax || fail "$prec: a train line without a positive grad_amax"
    lm_amaxes "$DIR/two_$prec/metrics.jsonl" >two.amax || fail "$prec: a 2-rank train line without a positive grad_amax"
    [ "$(wc -l <one.amax)" = 6 ] || fail "$prec: expected 6 train lines"
    diff two.amax one.amax || fail "$prec: the GPT's grad_amax differs between 1 and 2 ranks"
  done
  ;;
one_rank)
  # One rank under mpirun is the single-process program, bitwise.
  "${MPI[@]}" -np 1 "$AMPCTL" train --config base.yaml --run-dir "$DIR/mpi" >/dev/null 2>mpi.err ||
    fail "mpirun -np 1: $(cat mpi.err)"
  "$AMPCTL" train --config base.yaml --run-dir "$DIR/plain" >/dev/null 2>plain.err ||
    fail "plain run: $(cat plain.err)"
  [ -n "$(param_crcs mpi)" ] || fail "no tensors found in the checkpoint"
  diff <(param_crcs mpi) <(param_crcs plain) || fail "1-rank mpirun parameters differ"
  diff <(decisions mpi/metrics.jsonl) <(decisions plain/metrics.jsonl) || fail "decisions differ"
  diff <(norms mpi/metrics.jsonl) <(norms plain/metrics.jsonl) || fail "grad_norm differs"
  python3 - mpi/metrics.jsonl plain/metrics.jsonl <<'EOF' || fail "losses differ"
import json, sys
a = [json.loads(l).get("loss") for l in open(sys.argv[1])]
b = [json.loads(l).get("loss") for l in open(sys.argv[2])]
sys.exit(a != b)
EOF
  ;;
inject_rank)
  # An overflow on rank 1 only: the averaged gradients of both ranks hold it, both skip step 3
  # and back off, and the run goes on (as the 1-rank run with the overflow at step 3 does).
  sets=(--set debug.inject_nonfinite_at=[3] --set debug.inject_rank=1)
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/two" "${sets[@]}" \
    >two.out 2>two.err || fail "2-rank run: $(cat two.err)"
  "$AMPCTL" train --config base.yaml --run-dir "$DIR/one" --set debug.inject_nonfinite_at=[3] \
    --set data.batch_size=32 >/dev/null 2>one.err || fail "1-rank run: $(cat one.err)"
  decisions two/metrics.jsonl | awk '$1 == 3 { found = ($3 == "true") } END { exit !found }' ||
    fail "step 3 not skipped"
  # A line's scale is the one its step used: the backoff shows at step 4.
  decisions two/metrics.jsonl | awk '$1 == 3 { s3 = $4 } $1 == 4 { s4 = $4 } END { exit !(s4 < s3) }' ||
    fail "no backoff after step 3"
  diff <(decisions two/metrics.jsonl) <(decisions one/metrics.jsonl) || fail "decisions differ"
  grep -q '"status": *"ok"' two/summary.json || fail "the run did not finish"
  grep -q "parameters bitwise identical on all 2 ranks" two.out two.err ||
    fail "no replica agreement line"
  # The same with the overflow on rank 0, and buckets of 26 floats (13 per rank: most shards
  # span several buckets, the last one partial): the same decisions and, since the poisoned
  # step is skipped whichever rank overflowed and every element is still summed once in rank
  # order, bitwise the same parameters.
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/zero" \
    --set debug.inject_nonfinite_at=[3] --set debug.inject_rank=0 \
    --set distributed.bucket_mb=0.0001 >/dev/null 2>zero.err || fail "inject_rank=0: $(cat zero.err)"
  diff <(decisions zero/metrics.jsonl) <(decisions two/metrics.jsonl) || fail "rank 0 vs rank 1"
  diff <(norms zero/metrics.jsonl) <(norms two/metrics.jsonl) || fail "grad_norm: rank 0 vs rank 1"
  diff <(param_crcs zero) <(param_crcs two) || fail "rank 0 vs rank 1 (or the bucket size): parameters"
  ;;
resume)
  # 4 steps, a checkpoint, resumed to 8 on 2 ranks: bitwise the straight 8-step run.
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/straight" >/dev/null \
    2>s.err || fail "straight run: $(cat s.err)"
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/split" \
    --set training.max_steps=4 >/dev/null 2>a.err || fail "first half: $(cat a.err)"
  "${MPI[@]}" -np 2 "$AMPCTL" resume --checkpoint "$DIR/split" --set training.max_steps=8 \
    >/dev/null 2>b.err || fail "resume: $(cat b.err)"
  diff <(param_crcs straight) <(param_crcs split) || fail "resumed parameters differ"
  diff <(decisions straight/metrics.jsonl) <(decisions split/metrics.jsonl) ||
    fail "resumed decisions differ"
  # The step-4 checkpoint is older than the run's newest (8): refused once, by rank 0, every rank
  # exiting 2 without an abort; on 2 ranks a branch from it (--run-dir) is the straight run again.
  "${MPI[@]}" -np 2 "$AMPCTL" resume --checkpoint "$DIR/split/checkpoints/step-00000004.json" \
    >out 2>err
  rc=$?
  [ "$rc" = 2 ] || fail "an older checkpoint in place: exit $rc, expected 2: $(cat err)"
  [ "$(grep -c '^error: ' err)" = 1 ] || fail "expected one error line: $(cat err)"
  grep -q "later checkpoints (step-00000008.json)" err || fail "the refusal: $(cat err)"
  if grep -q "MPI_ABORT" err; then fail "an agreed refusal aborted the job: $(cat err)"; fi
  "${MPI[@]}" -np 2 "$AMPCTL" resume --checkpoint "$DIR/split/checkpoints/step-00000004.json" \
    --run-dir "$DIR/branch" --set training.max_steps=8 >/dev/null 2>c.err || fail "branch: $(cat c.err)"
  diff <(param_crcs straight) <(param_crcs branch) || fail "the branch's parameters differ"
  diff <(decisions straight/metrics.jsonl) <(decisions branch/metrics.jsonl) ||
    fail "the branch's decisions differ"
  ;;
kill_rank)
  # SIGKILL to rank 1 mid-run: the job ends within 30 s, non-zero, and says which rank died.
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/run" \
    --set training.max_steps=1000000 --set logging.every_steps=1000 >out 2>err &
  launcher=$!
  rank1=""
  for _ in $(seq 1 200); do
    rank1=$(rank_pid "$launcher" 1)
    [ -n "$rank1" ] && [ -f "$DIR/run/metrics.jsonl" ] && break
    sleep 0.05
  done
  [ -n "$rank1" ] || fail "rank 1 not found"
  sleep 0.5
  start=$(date +%s)
  kill -9 "$rank1"
  wait "$launcher"
  rc=$?
  took=$(($(date +%s) - start))
  [ "$rc" != 0 ] || fail "exit 0 after a rank was killed"
  [ "$took" -le 30 ] || fail "the job took ${took}s to end"
  grep -qi "rank 1" err || fail "the launcher does not name rank 1: $(cat err)"
  ;;
bad_data_rank)
  # Rank 1 reads a malformed CSV (its own working directory, MPMD launch): the job ends with
  # rank 1's error naming the file and line.
  mkdir -p good bad
  python3 -c "
import random
random.seed(1)
print('a,b,label')
for i in range(64): print(f'{random.random():.4f},{random.random():.4f},{i % 2}')" >good/data.csv
  cp good/data.csv bad/data.csv
  sed -i '10s/.*/0.5,oops,1/' bad/data.csv
  cat >csv.yaml <<'EOF'
name: csv
device: cpu
model: {type: mlp, hidden: [8]}
data:
  train: {source: csv, path: data.csv, label_column: label}
  batch_size: 8
training: {max_steps: 4}
EOF
  start=$(date +%s)
  # (--set: a path an override gives is read from each rank's own current directory.)
  "${MPI[@]}" -np 1 -wdir "$DIR/good" "$AMPCTL" train --config "$DIR/csv.yaml" --run-dir "$DIR/run" \
    --set data.train.path=data.csv \
    : -np 1 -wdir "$DIR/bad" "$AMPCTL" train --config "$DIR/csv.yaml" --run-dir "$DIR/run" \
    --set data.train.path=data.csv \
    >out 2>err
  rc=$?
  [ "$rc" != 0 ] || fail "exit 0 with a bad data file on rank 1"
  [ $(($(date +%s) - start)) -le 30 ] || fail "took longer than 30 s"
  grep -q "error: rank 1 of 2: .*data.csv.*10" err || fail "rank 1's error missing: $(cat err)"
  ;;
config_error)
  # A configuration error is reported once (by rank 0) and every rank exits 2.
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/run" \
    --set optimizer.lr=-1 >out 2>err
  rc=$?
  [ "$rc" = 2 ] || fail "exit $rc, expected 2: $(cat err)"
  [ "$(grep -c '^error: ' err)" = 1 ] || fail "expected one error line: $(cat err)"
  grep -q "optimizer.lr" err || fail "the error does not name the key"
  [ ! -e "$DIR/run" ] || fail "a run directory was left"
  ;;
inject_rank_beyond)
  # debug.inject_rank names a rank the job does not have: exit 2 naming the key, no run
  # directory (it injected nothing, and the run looked like one whose injection was absorbed).
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/run" \
    --set debug.inject_rank=2 --set 'debug.inject_nonfinite_at=[2]' >out 2>err
  rc=$?
  [ "$rc" = 2 ] || fail "exit $rc, expected 2: $(cat err)"
  grep -q "debug.inject_rank: 2, but the run has 2 ranks" err || fail "the error: $(cat err)"
  [ ! -e "$DIR/run" ] || fail "a run directory was left"
  ;;
sigterm)
  # SIGTERM to every rank, once, as a batch scheduler's cancel delivers it (Slurm signals every
  # process of the step): the ranks agree on the step, write one checkpoint (rank 0), print one
  # stop message and exit 143 each; mpirun then exits non-zero itself, so any non-zero status is
  # accepted here. A SIGTERM to mpirun alone starts Open MPI's own termination instead (SIGTERM,
  # then SIGKILL after odls_base_sigkill_timeout, 1 s), which on Open MPI 4.1.4 was seen to kill
  # the ranks before they stopped (docs/distributed.md).
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/run" \
    --set training.max_steps=1000000 --set logging.every_steps=1000 >out 2>err &
  launcher=$!
  for _ in $(seq 1 200); do
    [ -f "$DIR/run/metrics.jsonl" ] && break
    sleep 0.05
  done
  sleep 0.5
  # The ranks, not the timeout process above mpirun: timeout forwards a signal to its child and
  # then to its whole process group.
  kill -TERM "$(rank_pid "$launcher" 0)" "$(rank_pid "$launcher" 1)"
  wait "$launcher"
  rc=$?
  [ "$rc" != 0 ] || fail "exit 0 after SIGTERM: $(cat err)"
  [ "$(ls "$DIR/run/checkpoints" | grep -c '^step')" = 1 ] ||
    fail "expected one checkpoint: $(ls "$DIR/run/checkpoints")"
  [ "$(grep -c 'stopped by SIGTERM' err)" = 1 ] || fail "expected one stop message: $(cat err)"
  ;;
zero_inject)
  # ZeRO-1 (distributed.zero: 1): rank 1 poisons its gradient element 0. After the
  # reduce-scatter that element is in rank 0's shard, so only rank 0's own check sees the inf;
  # found_inf's max over the ranks makes both skip step 3 and back off, and the run goes on.
  # The ZeRO-0 run with the same injection makes the same decisions and ends with bitwise the
  # same parameters and optimizer state (the checkpoints have one format).
  sets=(--set debug.inject_nonfinite_at=[3] --set debug.inject_rank=1)
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/z1" "${sets[@]}" \
    --set distributed.zero=1 >z1.out 2>z1.err || fail "ZeRO-1 run: $(cat z1.err)"
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/z0" "${sets[@]}" \
    >/dev/null 2>z0.err || fail "ZeRO-0 run: $(cat z0.err)"
  decisions z1/metrics.jsonl | awk '$1 == 3 { found = ($3 == "true") } END { exit !found }' ||
    fail "step 3 not skipped"
  decisions z1/metrics.jsonl | awk '$1 == 3 { s3 = $4 } $1 == 4 { s4 = $4 } END { exit !(s4 < s3) }' ||
    fail "no backoff after step 3"
  [ "$(decisions z1/metrics.jsonl | wc -l)" = 8 ] || fail "the run did not go on to step 8"
  grep -q '"status": *"ok"' z1/summary.json || fail "the run did not finish"
  grep -q "parameters bitwise identical on all 2 ranks" z1.out z1.err ||
    fail "no replica agreement line"
  diff <(decisions z1/metrics.jsonl) <(decisions z0/metrics.jsonl) || fail "decisions: ZeRO-1 vs 0"
  diff <(norms z1/metrics.jsonl) <(norms z0/metrics.jsonl) || fail "grad_norm: ZeRO-1 vs 0"
  [ -n "$(param_crcs z1)" ] || fail "no tensors found in the checkpoint"
  diff <(param_crcs z1) <(param_crcs z0) || fail "ZeRO-1 checkpoint differs from ZeRO-0's"
  # The other way round: rank 0 poisons the output layer's bias, which is in rank 1's shard.
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/z1b" \
    --set debug.inject_nonfinite_at=[3] --set debug.inject_rank=0 \
    --set debug.inject_tensor=layers.2.bias --set distributed.zero=1 >/dev/null 2>z1b.err ||
    fail "ZeRO-1, rank 0 poisoning rank 1's shard: $(cat z1b.err)"
  diff <(decisions z1b/metrics.jsonl) <(decisions z1/metrics.jsonl) || fail "decisions differ"
  diff <(param_crcs z1b) <(param_crcs z1) || fail "parameters differ"
  ;;
zero_equal)
  # ZeRO-1 against ZeRO-0 where every sharded piece matters: AdamW with weight decay on the
  # matrices only (the shard's mask by global position), clipping (the global norm: ZeRO-1
  # gathers the unscaled shards and takes ZeRO-0's norm), fp16 masters and copy, and buckets
  # of 26 floats (shards over several buckets, the last partial). Bitwise the same checkpoint
  # and losses, and half the optimizer state per rank (two moments over 2 ranks).
  sed 's/^optimizer:.*/optimizer: {type: adamw, lr: 0.01, weight_decay: 0.1, decay_on: matrices}/' \
    base.yaml >adamw.yaml
  sets=(--set training.grad_clip_norm=0.05 --set distributed.bucket_mb=0.0001)
  "${MPI[@]}" -np 2 "$AMPCTL" train --config adamw.yaml --run-dir "$DIR/z1" "${sets[@]}" \
    --set distributed.zero=1 >z1.out 2>z1.err || fail "ZeRO-1 run: $(cat z1.err)"
  "${MPI[@]}" -np 2 "$AMPCTL" train --config adamw.yaml --run-dir "$DIR/z0" "${sets[@]}" \
    >z0.out 2>z0.err || fail "ZeRO-0 run: $(cat z0.err)"
  [ -n "$(param_crcs z1)" ] || fail "no tensors found in the checkpoint"
  diff <(param_crcs z1) <(param_crcs z0) || fail "ZeRO-1 checkpoint differs from ZeRO-0's"
  diff <(decisions z1/metrics.jsonl) <(decisions z0/metrics.jsonl) || fail "decisions differ"
  diff <(norms z1/metrics.jsonl) <(norms z0/metrics.jsonl) || fail "grad_norm: ZeRO-1 vs 0"
  python3 - z1/metrics.jsonl z0/metrics.jsonl <<'PY' || fail "losses differ"
import json, sys
a = [json.loads(l).get("loss") for l in open(sys.argv[1])]
b = [json.loads(l).get("loss") for l in open(sys.argv[2])]
sys.exit(a != b)
PY
  mib() { sed -n 's/.*distributed.zero: \([01]\); optimizer state .* MiB (\([0-9]*\) bytes).*/\1 \2/p' "$@"; }
  read -r z s1 <<<"$(mib z1.out z1.err)"
  [ "${z:-}" = 1 ] || fail "no ZeRO-1 state line: $(cat z1.out z1.err)"
  read -r z s0 <<<"$(mib z0.out z0.err)"
  [ "${z:-}" = 0 ] || fail "no ZeRO-0 state line"
  python3 -c "import sys; sys.exit(not 0.49 < $s1 / $s0 < 0.51)" ||
    fail "optimizer state per rank: ZeRO-1 $s1 bytes, ZeRO-0 $s0 bytes"
  ;;
zero_resume)
  # ZeRO-1: 4 steps, a checkpoint (the shards gathered on rank 0, ZeRO-0's format), resumed
  # to 8 on 2 ranks: bitwise the straight 8-step ZeRO-1 run. (That the format is ZeRO-0's, so
  # that either setting resumes it, zero_inject and zero_equal check tensor by tensor.) Resumed
  # by 1 rank (another world size: the global batch halves, so the run is another one and only
  # its finishing is checked), it trains on to the end.
  z=(--set distributed.zero=1)
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/straight" "${z[@]}" \
    >/dev/null 2>s.err || fail "straight run: $(cat s.err)"
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/split" "${z[@]}" \
    --set training.max_steps=4 >/dev/null 2>a.err || fail "first half: $(cat a.err)"
  cp -r split one_rank
  "${MPI[@]}" -np 2 "$AMPCTL" resume --checkpoint "$DIR/split" --set training.max_steps=8 \
    >/dev/null 2>b.err || fail "resume: $(cat b.err)"
  diff <(param_crcs straight) <(param_crcs split) || fail "resumed parameters differ"
  diff <(decisions straight/metrics.jsonl) <(decisions split/metrics.jsonl) ||
    fail "resumed decisions differ"
  "$AMPCTL" resume --checkpoint "$DIR/one_rank" --set training.max_steps=8 >/dev/null 2>d.err ||
    fail "1-rank resume of a 2-rank ZeRO-1 checkpoint: $(cat d.err)"
  grep -q '"status": *"ok"' one_rank/summary.json || fail "the 1-rank resume did not finish"
  ;;
usr1_zero0 | usr1_zero1)
  # SIGUSR1 (checkpoint and go on) to one rank only, and to mpirun (which forwards it, so the
  # ranks see it at different step boundaries): 20 times to rank 1 and 20 times to mpirun,
  # interleaved, and 5 times to rank 0. Every request is agreed by both ranks at one step
  # boundary, so each gives a checkpoint and none hangs (before the agreement, ZeRO-1 deadlocked
  # in the checkpoint's gather and ZeRO-0 ignored rank 1's request). Then SIGTERM to the ranks stops
  # the job with one checkpoint, which inspect reads and resume continues from.
  zero=${CASE#usr1_zero}
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/run" \
    --set training.max_steps=100000000 --set logging.every_steps=1000 \
    --set checkpoint.keep_last=2 --set distributed.zero="$zero" >out 2>err &
  launcher=$!
  rank0="" rank1=""
  for _ in $(seq 1 400); do
    rank0=$(rank_pid "$launcher" 0) rank1=$(rank_pid "$launcher" 1)
    [ -n "$rank0" ] && [ -n "$rank1" ] && [ -f "$DIR/run/metrics.jsonl" ] && break
    sleep 0.05
  done
  [ -n "$rank0" ] && [ -n "$rank1" ] || fail "ranks not found"
  mpirun=$(pgrep -P "$launcher" | head -1)
  checkpoints() { cat out err | grep -c 'SIGUSR1: checkpoint after step'; }
  sent_rank1=0 sent_mpirun=0 sent_rank0=0
  for i in $(seq 1 45); do
    if ((i % 9 == 0)); then
      target=$rank0 sent_rank0=$((sent_rank0 + 1))
    elif ((i % 2 == 0)); then
      target=$rank1 sent_rank1=$((sent_rank1 + 1))
    else
      target=$mpirun sent_mpirun=$((sent_mpirun + 1))
    fi
    before=$(checkpoints)
    kill -USR1 "$target" || fail "signal $i: the job is gone: $(cat err)"
    ok=""
    for _ in $(seq 1 400); do
      [ "$(checkpoints)" -gt "$before" ] && ok=1 && break
      sleep 0.05
    done
    if [ -z "$ok" ]; then
      kill -KILL "$rank0" "$rank1" 2>/dev/null
      wait "$launcher"
      fail "SIGUSR1 number $i (to pid $target) gave no checkpoint within 20 s: $(tail -3 err)"
    fi
  done
  kill -TERM "$rank0" "$rank1"  # once, to every rank (see the sigterm case)
  wait "$launcher"
  rc=$?
  [ "$rc" != 124 ] && [ "$rc" != 137 ] || fail "the job hung (killed by timeout): $(tail -5 err)"
  [ "$rc" != 0 ] || fail "exit 0 after SIGTERM"
  [ "$(grep -c 'stopped by SIGTERM' err)" = 1 ] || fail "expected one stop message: $(cat err)"
  [ "$sent_rank1" -ge 20 ] && [ "$sent_mpirun" -ge 20 ] ||
    fail "sent $sent_rank1 to rank 1 and $sent_mpirun to mpirun, expected 20 each"
  [ "$(checkpoints)" -ge 45 ] || fail "$(checkpoints) checkpoints for 45 requests"
  "$AMPCTL" inspect "$DIR/run" >/dev/null 2>insp.err || fail "the last checkpoint: $(cat insp.err)"
  last=$(sed 's/[^0-9]//g; s/^0*//' "$DIR/run/checkpoints/latest")  # step-00101421.json
  "${MPI[@]}" -np 2 "$AMPCTL" resume --checkpoint "$DIR/run" --set training.max_steps=$((last + 3)) \
    >rout 2>rerr || fail "resume after the signals: $(tail -3 rerr)"
  ;;
config_mismatch)
  # Rank 1 started with another --set: every rank exits 2 (no MPI abort, no hang), rank 1 names
  # the key and both values, and nothing is written.
  "${MPI[@]}" -np 1 "$AMPCTL" train --config "$DIR/base.yaml" --run-dir "$DIR/run" \
    : -np 1 "$AMPCTL" train --config "$DIR/base.yaml" --run-dir "$DIR/run" \
    --set training.max_steps=9 >out 2>err
  rc=$?
  [ "$rc" = 2 ] || fail "exit $rc, expected 2: $(cat err)"
  grep -q "error: rank 1 of 2: its configuration differs from rank 0's: training.max_steps: 9 here, 8 on rank 0" err ||
    fail "the error does not name rank 1 and the key: $(cat err)"
  [ "$(grep -c '^error: ' err)" = 1 ] || fail "expected one error line: $(cat err)"
  [ ! -e "$DIR/run" ] || fail "a run directory was left"
  ;;
data_mismatch)
  # Rank 1 reads a text whose vocabulary has one character more (its own working directory):
  # every rank exits 2 naming rank 1 and the vocabulary size, nothing written (before:
  # MPI_ERR_TRUNCATE inside the gradient all-reduce, and a run directory left behind).
  mkdir -p a b
  python3 -c "
import random
r = random.Random(3)
print(''.join(r.choice('abcdefgh \n') for _ in range(4000)))" >a/corpus.txt
  { cat a/corpus.txt; echo "z"; } >b/corpus.txt
  printf '%s\n' 'name: lm' 'device: cpu' 'precision: fp32' \
    'model: {type: gpt, n_layer: 1, n_head: 2, n_embd: 8, block_size: 8}' \
    'data:' '  train: {source: text, path: corpus.txt, vocab: char}' '  batch_size: 2' \
    'training: {max_steps: 4}' >lm.yaml
  "${MPI[@]}" -np 1 -wdir "$DIR/a" "$AMPCTL" train --config "$DIR/lm.yaml" --run-dir "$DIR/run" \
    --set data.train.path=corpus.txt \
    : -np 1 -wdir "$DIR/b" "$AMPCTL" train --config "$DIR/lm.yaml" --run-dir "$DIR/run" \
    --set data.train.path=corpus.txt \
    >out 2>err
  rc=$?
  [ "$rc" = 2 ] || fail "exit $rc, expected 2: $(cat err)"
  grep -q "error: rank 1 of 2: its data differs from rank 0's: data: vocabulary size: 11 here, 10 on rank 0" err ||
    fail "the error does not name rank 1 and the vocabulary: $(cat err)"
  [ ! -e "$DIR/run" ] || fail "a run directory was left"
  # The same vocabulary, another text: named by its contents.
  python3 -c "print(open('$DIR/a/corpus.txt').read()[::-1], end='')" >b/corpus.txt
  "${MPI[@]}" -np 1 -wdir "$DIR/a" "$AMPCTL" train --config "$DIR/lm.yaml" --run-dir "$DIR/run" \
    --set data.train.path=corpus.txt \
    : -np 1 -wdir "$DIR/b" "$AMPCTL" train --config "$DIR/lm.yaml" --run-dir "$DIR/run" \
    --set data.train.path=corpus.txt \
    >out 2>err
  rc=$?
  [ "$rc" = 2 ] || fail "exit $rc, expected 2: $(cat err)"
  grep -q "error: rank 1 of 2: its data differs from rank 0's: data: the training text (corpus.txt.*) contents" err ||
    fail "the error does not name the training text: $(cat err)"
  [ ! -e "$DIR/run" ] || fail "a run directory was left"
  ;;
retry_zero0 | retry_zero1)
  # scaler.on_overflow: retry with the overflow on rank 1 only (ZeRO-0: the averaged gradients
  # hold it on both ranks; ZeRO-1: rank 1 poisons element 0, which the reduce-scatter puts in
  # rank 0's shard, and found_inf's max over the ranks carries it back). Both ranks must run
  # step 3 again at the backed-off scale: a rank that did not would leave the other alone in the
  # next collective (the job would hang and be killed) or end with other parameters (the
  # replica check). No step is skipped, step 3 says retries: 1 with half step 2's scale, and the
  # decisions are those of the 1-rank run with the same global batch and the same retry. (No
  # growth: step 3's scale is then step 2's, backed off once.)
  zero=${CASE#retry_zero}
  sets=(--set scaler.on_overflow=retry --set scaler.growth_interval=1000)
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/two" "${sets[@]}" \
    --set debug.inject_nonfinite_at=[3] --set debug.inject_rank=1 \
    --set distributed.zero="$zero" >two.out 2>two.err || fail "2-rank run: $(cat two.err)"
  "$AMPCTL" train --config base.yaml --run-dir "$DIR/one" "${sets[@]}" \
    --set debug.inject_nonfinite_at=[3] --set data.batch_size=32 >/dev/null 2>one.err ||
    fail "1-rank run: $(cat one.err)"
  grep -q '"status": *"ok"' two/summary.json || fail "the run did not finish"
  grep -q "parameters bitwise identical on all 2 ranks" two.out two.err ||
    fail "no replica agreement line"
  python3 - two/metrics.jsonl two/summary.json <<'PY' || fail "step 3 was not retried once"
import json, sys
lines = {m["step"]: m for m in map(json.loads, open(sys.argv[1])) if m.get("kind") == "train"}
assert sorted(lines) == list(range(1, 9)), sorted(lines)
assert not any(m["skipped"] for m in lines.values()), "a step was skipped"
assert lines[3].get("retries") == 1, lines[3]
assert all("retries" not in m for s, m in lines.items() if s != 3)
assert lines[3]["scale"] == lines[2]["scale"] * 0.5, (lines[2]["scale"], lines[3]["scale"])
assert json.load(open(sys.argv[2]))["retries"] == 1
PY
  diff <(decisions two/metrics.jsonl) <(decisions one/metrics.jsonl) || fail "decisions differ"
  ;;
init_from)
  # --init-from with two ranks: every rank reads the source, rank 0's values are broadcast, and
  # the replicas start from the source's bits (after a step at lr 0 the checkpoint holds them).
  "$AMPCTL" train --config base.yaml --run-dir "$DIR/src" >/dev/null 2>src.err ||
    fail "the source run: $(cat src.err)"
  "${MPI[@]}" -np 2 "$AMPCTL" train --config base.yaml --run-dir "$DIR/two" --init-from "$DIR/src" \
    --set optimizer.lr=0 --set training.max_steps=1 >two.out 2>two.err ||
    fail "2-rank --init-from: $(cat two.err)"
  model_crcs() { param_crcs "$1" | grep '^/*model/'; }
  [ -n "$(model_crcs src)" ] || fail "no model tensors found in the checkpoint"
  diff <(model_crcs src) <(model_crcs two) || fail "the 2-rank run did not start from the source's weights"
  python3 - two/metrics.jsonl <<'EOF' || fail "no step-0 evaluation"
import json, sys
ev = [d for d in map(json.loads, open(sys.argv[1])) if d.get("kind") == "eval"]
sys.exit(not ev or ev[0]["step"] != 0)
EOF
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "ok [$CASE]"
