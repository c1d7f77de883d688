#!/usr/bin/env bash
# Runs the GPU checks on a lent GPU machine, from the repository root, with gpu-bundle/ (made on a
# development machine by scripts/gpu-bundle.sh) carried along: it unpacks
# gpu-bundle/ampctl-gpu-bundle.tar.xz into a fresh temporary folder and runs from there. It needs
# nothing else from the development machines: no Debian dev packages, no network, no build. What
# it needs on the GPU machine: the NVIDIA driver, a CUDA 13 cuBLAS (the CUDA toolkit's, or the one
# PyTorch's cu13 wheels ship), bash, coreutils, and xz or python3 to unpack.
#
# Steps, each under `timeout` so that one hang cannot eat the device budget. The seconds are those
# measured on an H200 (two full runs, 2026-12), except two estimates for what was added after them:
# scaler_retry + init_from, and bench_gpt's PyTorch SDPA row and profiled ampctl run (25 s of its
# 200). `--dry-run` prints the table; GPU marks what needs the GPU:
# PLAN  step                        est_s  GPU  what
# PLAN  nvidia-smi                      1  yes  the GPU is there
# PLAN  ldd                             1  no   every bundled binary's shared libraries resolve
# PLAN  ldd_app_no_cuda                 1  no   ampctl itself links no CUDA library (the plugin does)
# PLAN  version                         1  no   --version lists sm_75, sm_80, sm_90 and compute_90 PTX
# PLAN  fatbin                          1  no   the plugin's cubins and PTX are those (fatbin_archs.py)
# PLAN  test_cuda                      26  yes  the CUDA table tests against the CPU (must not skip)
# PLAN  test_cuda_sm75                 29  yes  the same table with AMPCTL_FORCE_SM75=1 (T4 decisions)
# PLAN  attention_fused_fma             1  yes  the attention rows on the FMA variant
# PLAN  attention_materialised          1  yes  the attention rows on the materialised composition
# PLAN  test_* (CPU tests)             30  no   every other test binary, cheap
# PLAN  bench_cuda                      1  yes  op throughput on the GPU (numbers for reading)
# PLAN  bench_torch                    12  yes  PyTorch on the same ops, when torch imports
# PLAN  train quickstart x3 + compare   2  yes  MLP: CPU vs GPU decisions, GPU bitwise repeatable
# PLAN  gpt_train x4 + compare          4  yes  GPT, fused attention (and composed GELU)
# PLAN  gpt_sm75 + bf16 refusal         2  yes  GPT fp16 with AMPCTL_FORCE_SM75=1 vs the CPU; bf16 exits 2
# PLAN  gelu_composed                  20  yes  the GELU rows with AMPCTL_GELU=composed
# PLAN  gpt grad_amax + auto            2  yes  GPT composed on the GPU: grad_amax vs the CPU's; auto from 2^40
# PLAN  gpt/cnn e2e x3 + compare        5  yes  GPT with dropout (materialised attention) and CNN
# PLAN  numerics + tensorboard          2  yes  the numerics op; TensorBoard's reader on its events
# PLAN  scaler_retry + init_from        15  yes  retry, the stop at the floor, --init-from and eval on the GPU
# PLAN  bench MLPs (ampctl + torch)    40  yes  fp16 step time against PyTorch AMP
# PLAN  nccl_reference + one_rank       2  yes  the NCCL communicator on one rank, bitwise
# PLAN  bench_gpt                     200  yes  GPT-2 small against PyTorch AMP (when torch imports)
# Total about 400 s, 6.7 minutes (GPU_CHECK_GPT_ARGS unset: no scaling table), plus about 30 s to
# start the machine. The summary table is printed last.
# Exit status 0 only when every step passed. The full log of every
# step goes to one file, gpu-check.log, with the table in summary.txt beside it, in $OUT where the
# caller provides one (two files, so they fit tools that bring back only a few) or else in
# gpu-bundle/check-logs/ (gitignored). Both are rewritten after every step, so a run stopped from
# outside leaves what it did. GPU_CHECK_BUDGET_S (default 560) bounds the whole check: each step
# gets at most what is left, and the steps past it are SKIPPED(budget), so the script ends, with
# its summary, inside the device tool's 600 s per command. The steps run in the order above: the
# table tests first.
#
# Usage (on the GPU machine, repo root): bash scripts/gpu-check.sh
#        (here, no GPU):               bash scripts/gpu-check.sh --dry-run [BUILD_DIR]
# --dry-run runs the steps that need no GPU on a build folder (default build/): the app's ldd,
# --version, the plugin's fat binaries and the CPU run of train_cpu, and prints the plan above
# with its total; exit 0 when they pass (the ctest gpu_check.dry_run).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

# The checks that need no GPU, on a built app and plugin ($1 the folder holding ampctl; the plugin
# beside it or in lib/). Prints one line per check; returns 1 when one fails.
cpu_checks() {
  local dir=$1 app=$1/ampctl plugin bad=0 libs version sass ptx
  plugin=$dir/libampctl_cuda.so
  [[ -f $plugin ]] || plugin=$dir/lib/libampctl_cuda.so
  libs=$(ldd "$app" 2>&1)
  if grep -qE 'lib(cuda|cudart|cublas|cublasLt|nccl)[^ ]*\.so' <<<"$libs"; then
    echo "ldd_app_no_cuda: FAIL: ampctl links CUDA at load time:"
    grep -E 'cuda|cublas|nccl' <<<"$libs"
    bad=1
  else
    echo "ldd_app_no_cuda: PASS"
  fi
  version=$("$app" --version 2>&1)
  if grep -q "cuda (sm_75, sm_80, sm_90; PTX compute_90)" <<<"$version"; then
    echo "version: PASS ($(grep backends: <<<"$version"))"
  else
    echo "version: FAIL: not the default architectures: $(grep backends: <<<"$version")"
    bad=1
  fi
  if [[ -f $plugin ]] && python3 scripts/dev/fatbin_archs.py --expect-sass 75,80,90 --expect-ptx 90 \
    "$plugin" >/dev/null; then
    echo "fatbin: PASS ($plugin: sm_75, sm_80, sm_90 cubins, compute_90 PTX)"
  else
    echo "fatbin: FAIL: $plugin missing or not sm_75/80/90 + compute_90 PTX"
    bad=1
  fi
  return "$bad"
}

if [[ ${1:-} == --dry-run ]]; then
  build=${2:-build}
  echo "gpu-check --dry-run: the steps that need no GPU, on $build/"
  cpu_checks "$build"
  rc=$?
  # The CPU side of the first comparison (train_cpu), as the GPU machine runs it.
  runs=$(mktemp -d "${TMPDIR:-/tmp}/ampctl-gpu-check-dry.XXXXXX")
  if "$build/ampctl" train --config configs/quickstart.yaml --set device=cpu \
    --set training.max_steps=60 --set logging.metrics_every=1 --set logging.every_steps=20 \
    --set "debug.inject_nonfinite_at=[5,40]" --set scaler.growth_interval=25 \
    --set training.eval_every=0 --run-dir "$runs/cpu" >"$runs/train_cpu.log" 2>&1 &&
    grep -q '"status": *"ok"' "$runs/cpu/summary.json"; then
    echo "train_cpu: PASS (the quickstart, 60 steps, two injected overflows)"
  else
    echo "train_cpu: FAIL:"
    tail -5 "$runs/train_cpu.log"
    rc=1
  fi
  rm -rf "$runs"
  echo
  echo "the plan on a GPU machine (device seconds, estimated):"
  sed -n 's/^# PLAN  //p' "$0"
  total=$(grep -oE '^# PLAN  .* [0-9]+  (yes|no) ' "$0" | grep -oE '[0-9]+  (yes|no) $' |
    awk '{s += $1} END {print s}')
  echo "total: about $total s of device time"
  exit "$rc"
fi

ARCHIVE=${GPU_CHECK_BUNDLE:-gpu-bundle/ampctl-gpu-bundle.tar.xz}
RESULT_DIR=${OUT:-gpu-bundle/check-logs}
mkdir -p "$RESULT_DIR"
# The whole check's budget in seconds, from the script's start: a step is given at most what is
# left of it (its own timeout otherwise), and a step that would start with under 5 s left is
# SKIPPED(budget). The default ends the script before the device tool's 600 s per command, so
# the summary is written and comes back; the summary and the joined log are also rewritten after
# every step, so even a run killed from outside leaves the steps done so far in $RESULT_DIR.
BUDGET_S=${GPU_CHECK_BUDGET_S:-560}
: >"$RESULT_DIR/gpu-check.log"
export AMPCTL_TEST_DATA=$PWD/tests/data
export GTEST_COLOR=no

if [[ ! -f $ARCHIVE ]]; then
  echo "gpu-check: $ARCHIVE not found: run scripts/gpu-bundle.sh on a development machine and" \
    "carry gpu-bundle/ along" >&2
  exit 2
fi
B=$(mktemp -d "${TMPDIR:-/tmp}/ampctl-gpu-bundle.XXXXXX")
LOG_DIR=$B/logs  # one log per step, joined into $RESULT_DIR/gpu-check.log at the end
mkdir -p "$LOG_DIR"
if command -v xz >/dev/null; then
  tar -C "$B" -xJf "$ARCHIVE"
else  # Python's tarfile reads xz without the xz program
  python3 -m tarfile -e "$ARCHIVE" "$B"
fi || {
  echo "gpu-check: could not unpack $ARCHIVE" >&2
  exit 2
}
echo "gpu-check: bundle unpacked in $B"
head -3 "$B/MANIFEST"

# ---- libraries: the bundle's, then the machine's CUDA 13 cuBLAS and NCCL ----
# find_lib_dir SONAME DIR...: the first folder holding SONAME among DIR..., else in the Python
# site's nvidia/ tree (PyTorch's cu13 wheels: nvidia/cu13/lib, nvidia/cublas/lib, nvidia/nccl/lib),
# else where ldconfig knows it. Prints the folder; returns 1 when there is none.
find_lib_dir() {
  local soname=$1 d site
  shift
  for d in "$@"; do
    [[ -e $d/$soname ]] && { echo "$d"; return 0; }
  done
  site=$(timeout 30 python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
  if [[ -n $site && -d $site/nvidia ]]; then
    d=$(find "$site/nvidia" -maxdepth 4 -name "$soname*" 2>/dev/null | sort | head -1)
    [[ -n $d ]] && { dirname "$d"; return 0; }
  fi
  d=$(ldconfig -p 2>/dev/null | awk -v so="$soname" '$1 == so {print $NF; exit}')
  [[ -n $d ]] && { dirname "$d"; return 0; }
  return 1
}
# cuBLAS (libcublasLt.so.13; the bundle leaves it out for its size): the CUDA 13 toolkit's first.
find_cublas_dir() {
  find_lib_dir libcublasLt.so.13 /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    /usr/local/cuda-13*/lib64 /usr/local/cuda-13*/targets/x86_64-linux/lib
}
# NCCL, which the plugin links (libnccl.so.2, left out of the bundle for its size): the CUDA
# toolkit's, else the one PyTorch's nvidia-nccl-cu13 wheel ships.
find_nccl_dir() {
  find_lib_dir libnccl.so.2 /usr/local/cuda/lib /usr/local/cuda/lib64 \
    /usr/local/cuda/targets/x86_64-linux/lib
}
lib_path=$B/lib
if cublas_dir=$(find_cublas_dir); then
  lib_path+=:$cublas_dir
else
  echo "gpu-check: no libcublasLt.so.13 found on this machine" >&2
fi
if nccl_dir=$(find_nccl_dir); then
  [[ :$lib_path: == *:$nccl_dir:* ]] || lib_path+=:$nccl_dir
else
  echo "gpu-check: no libnccl.so.2 found on this machine (the CUDA plugin will not load)" >&2
fi
export LD_LIBRARY_PATH=$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The bundled libstdc++/libgcc_s only when this machine's are older than the build machine's.
if ldd "$B/ampctl" 2>&1 | grep -q "version .GLIBCXX\|version .CXXABI\|libstdc++.*not found"; then
  export LD_LIBRARY_PATH=$B/lib/fallback:$LD_LIBRARY_PATH
  echo "gpu-check: using the bundled libstdc++ (this machine's is older)"
fi
echo "gpu-check: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

# ---- steps ----
names=() results=() seconds=() details=()
BENCH_ROWS=() GPT_TABLE=()  # filled by the benchmark steps; the summary reads them from the start
failed=0

# The summary so far, into $RESULT_DIR/summary.txt (after every step, and with `final` at the
# end): the table of steps, the benchmark tables, the failing tests by name.
write_summary() {
  local stage=${1:-step}
  {
    echo "==== gpu-check summary ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
    printf '%-14s %-12s %8s  %s\n' step result seconds detail
    for i in "${!names[@]}"; do
      printf '%-14s %-12s %8s  %s\n' "${names[$i]}" "${results[$i]}" "${seconds[$i]}" "${details[$i]}"
    done
    if ((${#BENCH_ROWS[@]})); then
      echo
      echo "fp16 training step, ampctl vs PyTorch AMP (autocast + GradScaler + fused AdamW):"
      printf '%-26s %10s %10s %8s %10s %10s\n' model "ampctl ms" "torch ms" "speedup" "ampctl TF/s" "torch TF/s"
      printf '%s\n' "${BENCH_ROWS[@]}"
      grep -h "gemm f16" "$LOG_DIR/bench_cuda.log" 2>/dev/null | sed 's/^/cuBLAS reference: /'
      grep -h -E "unscale|copy \(reference\)" "$LOG_DIR/bench_cuda.log" 2>/dev/null | sed 's/^/ampctl: /'
      grep -h -E "torch unscale|torch copy" "$LOG_DIR/bench_torch.log" 2>/dev/null | sed 's/^/torch: /'
    fi
    if ((${#GPT_TABLE[@]})); then
      echo
      printf '%s\n' "${GPT_TABLE[@]}"
    fi
    if ((failed)); then
      # The failing tests by name (GoogleTest lists them last), at most 30.
      grep -h '^\[  FAILED  \] [A-Za-z]' "$LOG_DIR"/*.log | sed 's/, where GetParam.*//' | sort -u | head -30
    fi
    if [[ $stage != final ]]; then
      echo "gpu-check: unfinished, ${#names[@]} steps so far, ${SECONDS}s in (a run stopped from outside ends here)"
    elif ((failed)); then
      echo "gpu-check: FAILED (full log: $RESULT_DIR/gpu-check.log)"
    else
      echo "gpu-check: all steps passed"
    fi
  } >"$RESULT_DIR/summary.txt"
}

# run_step NAME TIMEOUT_S COMMAND...: runs the command, tees its output to $LOG_DIR/NAME.log and
# records PASS/FAIL/TIMEOUT with a detail line (set by the caller's check, see below).
run_step() {
  local name=$1 limit=$2
  shift 2
  local log=$LOG_DIR/$name.log start end rc left=$((BUDGET_S - SECONDS))
  names+=("$name")
  details+=("")
  if ((left < 5)); then
    echo
    echo "==== $name: skipped, the budget of ${BUDGET_S}s is spent (GPU_CHECK_BUDGET_S)"
    echo "skipped: the budget of ${BUDGET_S}s is spent" >"$log"
    seconds+=("0")
    results+=("SKIPPED(budget)")
    failed=1
    write_summary
    return
  fi
  ((limit > left)) && limit=$left
  echo
  echo "==== $name: $* (timeout ${limit}s)"
  start=$(date +%s.%N)
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  end=$(date +%s.%N)
  seconds+=("$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", b - a}')")
  if ((rc == 124 || rc == 137)); then
    results+=("TIMEOUT")
  elif ((rc != 0)); then
    results+=("FAIL(rc=$rc)")
  else
    results+=("PASS")
  fi
  [[ ${results[-1]} == PASS ]] || failed=1
  { echo "==== $name"; cat "$log"; } >>"$RESULT_DIR/gpu-check.log"
  write_summary
}

# Marks the last step failed with a reason (a check on its output).
fail_last() {
  [[ ${results[-1]} == SKIPPED* ]] && return  # not run: nothing to judge
  results[-1]="FAIL"
  details[-1]=$1
  failed=1
}

# The GoogleTest tally of a log: "N passed, N failed, N skipped".
gtest_tally() {
  local log=$1 passed failed_n skipped
  passed=$(grep -o '^\[  PASSED  \] [0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  failed_n=$(grep -o '^\[  FAILED  \] [0-9]* test' "$log" | grep -o '[0-9]* ' | tail -1)
  skipped=$(grep -o '^\[  SKIPPED \] [0-9]* test' "$log" | grep -o '[0-9]* ' | tail -1)
  echo "${passed:-0} passed, ${failed_n:-0} failed, ${skipped:-0} skipped" | tr -s ' '
}

run_step nvidia-smi 30 nvidia-smi -L
[[ ${results[-1]} == PASS ]] && details[-1]=$(head -1 "$LOG_DIR/nvidia-smi.log" | cut -c1-60)

run_step ldd 30 bash -c "! ldd $B/ampctl $B/lib/libampctl_cuda.so $B/ampctl_test_* | grep -B20 'not found'"
[[ ${results[-1]} == PASS ]] && details[-1]="every shared library resolves" ||
  details[-1]="missing libraries: see the ldd section of gpu-check.log"

run_step version 30 "$B/ampctl" --version
if [[ ${results[-1]} == PASS ]]; then
  if grep -q "cuda (sm_" "$LOG_DIR/version.log"; then
    details[-1]=$(grep "backends:" "$LOG_DIR/version.log")
  else
    fail_last "no cuda backend listed"
  fi
fi

export -f cpu_checks
run_step ldd_app_no_cuda_fatbin 30 bash -c 'cpu_checks "$0"' "$B"
details[-1]=$(grep -c ': PASS' "$LOG_DIR/ldd_app_no_cuda_fatbin.log")" of 3 build checks pass"

if [[ -x $B/ampctl_test_cuda ]]; then
  run_step test_cuda 240 "$B/ampctl_test_cuda" --gtest_brief=1
  details[-1]=$(gtest_tally "$LOG_DIR/test_cuda.log")
  if [[ ${results[-1]} == PASS ]] && grep -q '^\[  SKIPPED \] [1-9]' "$LOG_DIR/test_cuda.log"; then
    fail_last "$(gtest_tally "$LOG_DIR/test_cuda.log") -- skipped on a GPU machine: no usable GPU?"
  fi
else
  names+=(test_cuda) results+=(FAIL) seconds+=(0) details+=("not in the bundle")
  : >"$LOG_DIR/test_cuda.log"
  failed=1
fi

# The whole table again as a T4 would decide (AMPCTL_FORCE_SM75=1, device_support.h): the bf16
# attention rows take the FMA products, and bf16 runs are refused (CudaSm75.*).
if [[ -x $B/ampctl_test_cuda ]]; then
  run_step test_cuda_sm75 240 env AMPCTL_FORCE_SM75=1 "$B/ampctl_test_cuda" --gtest_brief=1
  details[-1]=$(gtest_tally "$LOG_DIR/test_cuda_sm75.log")
fi

# The attention cases again under the GPU's other attention paths (AMPCTL_ATTENTION, read once
# per process; the default run above took the tensor-core kernels): the FMA variant of the fused
# kernels and the materialised composition, each against the CPU.
if [[ -x $B/ampctl_test_cuda ]]; then
  for path in fused_fma materialised; do
    run_step "attention_$path" 60 env AMPCTL_ATTENTION=$path "$B/ampctl_test_cuda" \
      --gtest_brief=1 --gtest_filter='*MatchesCpuReference/attention_*:CudaAttention.Repeated*'
    details[-1]=$(gtest_tally "$LOG_DIR/attention_$path.log")
  done
fi

for t in "$B"/ampctl_test_*; do
  name=$(basename "$t")
  [[ $name == ampctl_test_cuda ]] && continue
  run_step "${name#ampctl_}" 120 "$t" --gtest_brief=1
  details[-1]=$(gtest_tally "$LOG_DIR/${name#ampctl_}.log")
done

if [[ -x $B/ampctl_bench ]]; then
  run_step bench_cuda 120 "$B/ampctl_bench" --device cuda --quick
  [[ ${results[-1]} == PASS ]] && details[-1]="numbers above and in the log"
fi

HAVE_TORCH=0
if command -v python3 >/dev/null && python3 -c 'import torch' 2>/dev/null; then
  HAVE_TORCH=1
  run_step bench_torch 150 python3 scripts/bench/bench_pytorch_ops.py
  [[ ${results[-1]} == PASS ]] && details[-1]="PyTorch on the same ops and sizes"
fi

# ---- training: the same run on the CPU and the GPU, and the GPU twice ----
RUNS=$B/runs
common=(--set training.max_steps=60 --set logging.metrics_every=1 --set logging.every_steps=20
  --set "debug.inject_nonfinite_at=[5,40]" --set scaler.growth_interval=25
  --set training.eval_every=0)
run_step train_cpu 120 "$B/ampctl" train --config configs/quickstart.yaml --set device=cpu \
  "${common[@]}" --run-dir "$RUNS/cpu"
run_step train_gpu 120 "$B/ampctl" train --config configs/quickstart.yaml --set device=cuda \
  "${common[@]}" --run-dir "$RUNS/gpu"
run_step train_gpu_again 120 "$B/ampctl" train --config configs/quickstart.yaml \
  --set device=cuda "${common[@]}" --run-dir "$RUNS/gpu2"
run_step cpu_vs_gpu 30 python3 scripts/dev/compare_runs.py "$RUNS/cpu" "$RUNS/gpu" --mode backends
details[-1]=$(tail -1 "$LOG_DIR/cpu_vs_gpu.log" | cut -c1-70)
run_step gpu_repeat 30 python3 scripts/dev/compare_runs.py "$RUNS/gpu" "$RUNS/gpu2" --mode bitwise
details[-1]=$(tail -1 "$LOG_DIR/gpu_repeat.log" | cut -c1-70)

# ---- a GPT on both backends: the fused attention end to end ----
# A small GPT (heads of 16: the fused kernels) on synthetic token ids, fp16 with two injected
# overflows: the GPU run must make the CPU run's skip and scale decisions, and repeat bitwise.
python3 -c 'import random, struct, sys
r = random.Random(0)
open(sys.argv[1], "wb").write(struct.pack("<%dH" % 65536, *(r.randrange(300) for _ in range(65536))))' \
  "$B/gpt_tokens.bin"
cat >"$B/gpt_small.yaml" <<YAML
name: gpt_small
seed: 7
precision: fp16
model: {type: gpt, n_layer: 2, n_head: 4, n_embd: 64, block_size: 96, dropout: 0.0, bias: true}
data:
  train: {source: tokens, path: $B/gpt_tokens.bin, vocab_size: 320}
  batch_size: 6
optimizer: {type: adamw, lr: 1.0e-3, weight_decay: 0.1, decay_on: matrices}
training: {max_steps: 40, eval_every: 0}
logging: {every_steps: 10, metrics_every: 1}
YAML
gpt_common=(--config "$B/gpt_small.yaml" --set "debug.inject_nonfinite_at=[5,25]"
  --set scaler.growth_interval=10)
run_step gpt_train_cpu 120 "$B/ampctl" train "${gpt_common[@]}" --set device=cpu --run-dir "$RUNS/gpt_cpu"
run_step gpt_train_gpu 120 "$B/ampctl" train "${gpt_common[@]}" --set device=cuda --run-dir "$RUNS/gpt_gpu"
run_step gpt_train_gpu_again 120 "$B/ampctl" train "${gpt_common[@]}" --set device=cuda \
  --run-dir "$RUNS/gpt_gpu2"
run_step gpt_cpu_vs_gpu 30 python3 scripts/dev/compare_runs.py "$RUNS/gpt_cpu" "$RUNS/gpt_gpu" --mode backends
details[-1]=$(tail -1 "$LOG_DIR/gpt_cpu_vs_gpu.log" | cut -c1-70)
run_step gpt_gpu_repeat 30 python3 scripts/dev/compare_runs.py "$RUNS/gpt_gpu" "$RUNS/gpt_gpu2" --mode bitwise
details[-1]=$(tail -1 "$LOG_DIR/gpt_gpu_repeat.log" | cut -c1-70)
# The same GPT as a T4 would run it (AMPCTL_FORCE_SM75=1): the CPU's decisions; bf16 refused
# with exit 2 and the reason, before a run directory exists.
run_step gpt_train_gpu_sm75 120 env AMPCTL_FORCE_SM75=1 "$B/ampctl" train "${gpt_common[@]}" \
  --set device=cuda --run-dir "$RUNS/gpt_gpu_sm75"
run_step gpt_sm75_cpu_vs_gpu 30 python3 scripts/dev/compare_runs.py "$RUNS/gpt_cpu" \
  "$RUNS/gpt_gpu_sm75" --mode backends
details[-1]=$(tail -1 "$LOG_DIR/gpt_sm75_cpu_vs_gpu.log" | cut -c1-70)
run_step bf16_refused_sm75 30 bash -c 'AMPCTL_FORCE_SM75=1 "$0" train --config "$1" \
  --set precision=bf16 --set device=cuda --run-dir "$2"; [[ $? == 2 && ! -e $2 ]]' \
  "$B/ampctl" "$B/gpt_small.yaml" "$RUNS/gpt_bf16_sm75"
if ! grep -q "bf16 needs compute capability 8.0; this GPU is 7.5: use fp16" \
  "$LOG_DIR/bf16_refused_sm75.log"; then
  fail_last "no T4 refusal message"
elif [[ ${results[-1]} == PASS ]]; then
  details[-1]="exit 2: bf16 needs compute capability 8.0"
fi

# The same GPU run with cuBLASLt's GELU epilogues off (AMPCTL_GELU=composed, read once per
# process; the runs above fused c_fc + GELU, width 256): the composed path must make the fused
# run's skip and scale decisions, and the table's linear_gelu cases hold on it too.
run_step gpt_train_gpu_gelu_composed 120 env AMPCTL_GELU=composed "$B/ampctl" train \
  "${gpt_common[@]}" --set device=cuda --run-dir "$RUNS/gpt_gpu_gelu_composed"
run_step gpt_gelu_fused_vs_composed 30 python3 scripts/dev/compare_runs.py "$RUNS/gpt_gpu" \
  "$RUNS/gpt_gpu_gelu_composed" --mode backends
details[-1]=$(tail -1 "$LOG_DIR/gpt_gelu_fused_vs_composed.log" | cut -c1-70)
if [[ -x $B/ampctl_test_cuda ]]; then
  run_step gelu_composed 60 env AMPCTL_GELU=composed "$B/ampctl_test_cuda" --gtest_brief=1 \
    --gtest_filter='*MatchesCpuReference/linear_gelu_*:CudaLinearGelu.*'
  details[-1]=$(gtest_tally "$LOG_DIR/gelu_composed.log")
fi

# The GPT measured on the GPU (docs/reference.md, "grad_amax"): its fused attention and Linear +
# GELU are not, so they run composed (AMPCTL_ATTENTION=materialised AMPCTL_GELU=composed), and
# every rounding is measured there: grad_amax on every line, near the CPU's on the steps without
# an injected overflow (the same composition; the runs drift apart by rounding only), and
# scaler.policy auto from 2^40 finishes with at most 3 skipped steps beyond the injected two.
run_step gpt_amax_cpu 120 "$B/ampctl" train "${gpt_common[@]}" --set device=cpu \
  --set logging.grad_amax=true --run-dir "$RUNS/gpt_amax_cpu"
run_step gpt_amax_gpu 120 env AMPCTL_ATTENTION=materialised AMPCTL_GELU=composed "$B/ampctl" \
  train "${gpt_common[@]}" --set device=cuda --set logging.grad_amax=true \
  --run-dir "$RUNS/gpt_amax_gpu"
run_step gpt_amax_cpu_vs_gpu 30 python3 -c '
import json, sys
def lines(d):
    return [l for l in map(json.loads, open(d + "/metrics.jsonl")) if l.get("kind") == "train"]
cpu, gpu = lines(sys.argv[1]), lines(sys.argv[2])
assert len(cpu) == len(gpu) == 40, (len(cpu), len(gpu))
assert all("grad_amax" in l for l in gpu), "a GPU line without grad_amax"
rel = [abs(g["grad_amax"] - c["grad_amax"]) / c["grad_amax"] for c, g in zip(cpu, gpu)
       if not c["found_inf"] and c["grad_amax"] and g["grad_amax"] is not None]
assert len(rel) >= 30 and max(rel) <= 0.05, ("grad_amax apart by", max(rel), len(rel))
print("grad_amax on %d steps: GPU within %.2g%% of the CPU" % (len(rel), 100 * max(rel)))
' "$RUNS/gpt_amax_cpu" "$RUNS/gpt_amax_gpu"
details[-1]=$(tail -1 "$LOG_DIR/gpt_amax_cpu_vs_gpu.log" | cut -c1-70)
run_step gpt_auto_gpu 120 env AMPCTL_ATTENTION=materialised AMPCTL_GELU=composed "$B/ampctl" \
  train "${gpt_common[@]}" --set device=cuda --set scaler.policy=auto \
  --set scaler.init_scale=1099511627776.0 --run-dir "$RUNS/gpt_auto_gpu"
if [[ ${results[-1]} == PASS ]]; then
  skipped=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["skipped_steps"])' \
    "$RUNS/gpt_auto_gpu/summary.json" 2>/dev/null || echo "?")
  if [[ $skipped == "?" ]] || ((skipped > 5)); then
    fail_last "auto from 2^40: $skipped skipped steps (at most 2 injected + 3)"
  else
    details[-1]="auto from 2^40: $skipped skipped (2 injected)"
  fi
fi

# ---- the GPT (with dropout: the materialised attention) and the CNN: the same runs on the CPU and the GPU, and the GPU twice ----
# The same skip decisions and scale on every step (the injected overflows at steps 5 and 40 and a
# growth every 25 steps), losses within 5 %; the GPU bitwise repeatable. The GPT trains on a
# character corpus made from the repository's own docs (the lent machine has no fortunes
# package); the CNN on a small IDX image set written here (no Fashion-MNIST package there).
cat docs/*.md README.md >"$B/corpus.txt"
python3 - "$B" <<'PYIDX'
import random, struct, sys
b = sys.argv[1]
rng = random.Random(0)
n, side = 512, 28
labels = [rng.randrange(10) for _ in range(n)]
with open(f"{b}/img.idx", "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, side, side))
    for y in labels:
        # a class-dependent bright bar on noise, so the net has something to learn
        px = [rng.randrange(64) for _ in range(side * side)]
        for r in range(side):
            px[r * side + 2 + 2 * y] = 255
        f.write(bytes(px))
with open(f"{b}/lbl.idx", "wb") as f:
    f.write(struct.pack(">II", 0x801, n))
    f.write(bytes(labels))
PYIDX
cat >"$B/gpt_e2e.yaml" <<YAML
name: gpt_e2e
seed: 1337
precision: fp16
model: {type: gpt, n_layer: 2, n_head: 4, n_embd: 64, block_size: 32, dropout: 0.1, bias: true}
data:
  train: {source: text, path: $B/corpus.txt, vocab: byte, split_fraction: 0.1}
  batch_size: 8
optimizer: {type: adamw, lr: 1.0e-3, betas: [0.9, 0.99], weight_decay: 0.1, decay_on: matrices}
scheduler: {type: cosine, warmup_steps: 10, min_lr: 1.0e-4}
training: {grad_clip_norm: 1.0, eval_batches: 4}
YAML
cat >"$B/cnn_e2e.yaml" <<YAML
name: cnn_e2e
seed: 0
precision: fp16
model: {type: cnn, conv: [[8, 3], [16, 3]], pool: 2, batch_norm: true, hidden: [32], activation: relu}
data:
  train: {source: idx, images: $B/img.idx, labels: $B/lbl.idx}
  batch_size: 32
optimizer: {type: adamw, lr: 1.0e-4}
YAML
for model in gpt cnn; do
  run_step "${model}_e2e_cpu" 180 "$B/ampctl" train --config "$B/${model}_e2e.yaml" --set device=cpu \
    "${common[@]}" --run-dir "$RUNS/${model}_e2e_cpu"
  run_step "${model}_e2e_gpu" 120 "$B/ampctl" train --config "$B/${model}_e2e.yaml" --set device=cuda \
    "${common[@]}" --run-dir "$RUNS/${model}_e2e_gpu"
  run_step "${model}_e2e_gpu_again" 120 "$B/ampctl" train --config "$B/${model}_e2e.yaml" \
    --set device=cuda "${common[@]}" --run-dir "$RUNS/${model}_e2e_gpu2"
  run_step "${model}_e2e_cpu_vs_gpu" 30 python3 scripts/dev/compare_runs.py "$RUNS/${model}_e2e_cpu" \
    "$RUNS/${model}_e2e_gpu" --mode backends
  details[-1]=$(tail -1 "$LOG_DIR/${model}_e2e_cpu_vs_gpu.log" | cut -c1-70)
  run_step "${model}_e2e_gpu_repeat" 30 python3 scripts/dev/compare_runs.py "$RUNS/${model}_e2e_gpu" \
    "$RUNS/${model}_e2e_gpu2" --mode bitwise
  details[-1]=$(tail -1 "$LOG_DIR/${model}_e2e_gpu_repeat.log" | cut -c1-70)
done

# ---- gradient numerics and TensorBoard on the GPU (docs/reference.md) ----
# Sampling every step must leave the run bitwise the one above (train lines, time aside); the
# event file must read back through TensorBoard's own EventAccumulator where it is installed.
run_step numerics_gpu 120 "$B/ampctl" train --config configs/quickstart.yaml --set device=cuda \
  "${common[@]}" --set logging.numerics_every=1 --set logging.tensorboard=true \
  --run-dir "$RUNS/gpu_numerics"
run_step numerics_bitwise 30 python3 -c '
import json, sys
def train(run):
    out = []
    for line in open(run + "/metrics.jsonl"):
        m = json.loads(line)
        if m["kind"] == "train":
            m.pop("time_s")
            out.append(m)
    return out
a, b = train(sys.argv[1]), train(sys.argv[2])
bad = sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
print(f"{len(a)} train lines, {bad} differ with numerics_every 1")
sys.exit(1 if bad else 0)' "$RUNS/gpu" "$RUNS/gpu_numerics"
details[-1]=$(tail -1 "$LOG_DIR/numerics_bitwise.log" | cut -c1-70)
if python3 -c 'import tensorboard' 2>/dev/null; then
  run_step tensorboard 60 python3 scripts/dev/check_tensorboard.py "$RUNS/gpu_numerics"
  details[-1]=$(tail -1 "$LOG_DIR/tensorboard.log" | cut -c1-70)
else
  echo "gpu-check: python3 cannot import tensorboard: the EventAccumulator check is skipped"
fi

# ---- retry, the stop at the floor, and starting from weights, on the GPU ----
# The CPU tests of on_overflow: retry / on_min_scale: stop (scaler_retry.py: a retried step's loss
# bitwise the clean run's, lr, data cursor and dropout RNG in line, the stop's exit 1 and
# checkpoint, resume from it) and of --init-from / eval / the exports (init_from.py: step-0 eval
# bitwise the source's last, the hf round trip bitwise), every run on the GPU.
run_step scaler_retry_gpu 120 env AMPCTL_TEST_DEVICE=cuda python3 tests/cli/scaler_retry.py \
  "$B/ampctl" "$RUNS"
details[-1]=$(tail -1 "$LOG_DIR/scaler_retry_gpu.log" | cut -c1-70)
run_step init_from_gpu 120 env AMPCTL_TEST_DEVICE=cuda python3 tests/cli/init_from.py \
  "$B/ampctl" configs "$RUNS"
details[-1]=$(tail -1 "$LOG_DIR/init_from_gpu.log" | cut -c1-70)

# ---- benchmark: ampctl against PyTorch AMP on the same MLPs ----
# name features hidden classes batch steps samples
bench_model() {
  local name=$1 features=$2 hidden=$3 classes=$4 batch=$5 steps=$6 samples=$7
  cat >"$B/bench_$name.yaml" <<YAML
name: bench_$name
device: cuda
precision: fp16
model: {type: mlp, hidden: [$hidden], activation: relu}
data:
  train: {source: synthetic, task: classification, samples: $samples, features: $features, classes: $classes}
  batch_size: $batch
optimizer: {type: adamw, lr: 1.0e-3}
training: {max_steps: $steps}
logging: {every_steps: 20}
YAML
  run_step "ampctl_$name" 200 "$B/ampctl" train --config "$B/bench_$name.yaml" --run-dir "$RUNS/bench_$name"
  local a_ms="?" t_ms="?"
  if [[ -f $RUNS/bench_$name/summary.json ]]; then
    a_ms=$(python3 -c "import json;s=json.load(open('$RUNS/bench_$name/summary.json'));print('%.3f'%s['steady_step_ms'])")
    details[-1]="step $a_ms ms"
  fi
  if ((HAVE_TORCH)); then
    run_step "torch_$name" 200 python3 scripts/bench/bench_pytorch.py --features "$features" \
      --hidden "$hidden" --classes "$classes" --batch "$batch" --steps "$steps" --samples "$samples"
    t_ms=$(python3 -c "import json,sys;print('%.3f'%json.loads(open('$LOG_DIR/torch_$name.log').read().strip().splitlines()[-1])['step_ms'])" 2>/dev/null || echo "?")
    details[-1]="step $t_ms ms"
  fi
  local widths="$features,$hidden,$classes"
  local gflop
  gflop=$(python3 -c "w=[int(x) for x in '$widths'.split(',')];print(6*sum(w[i]*w[i+1] for i in range(len(w)-1))*$batch/1e9)")
  BENCH_ROWS+=("$(python3 -c "
a='$a_ms'; t='$t_ms'; g=$gflop
fa=float(a) if a!='?' else None; ft=float(t) if t!='?' else None
r=('%.2fx' % (ft/fa)) if fa and ft else '?'
tf=lambda ms: ('%.0f' % (g/ms)) if ms else '?'
print('%-26s %10s %10s %8s %10s %10s' % ('$name', a, t, r, tf(fa), tf(ft)))")")
}
bench_model mlp784_b256 784 1024,1024 10 256 600 8192
bench_model w4096x4_b4096 4096 4096,4096,4096 10 4096 120 8192

# ---- data parallel: the NCCL communicator on one rank (docs/distributed.md, "NCCL") ----
# One GPU cannot host two NCCL ranks (NCCL refuses two ranks of one communicator on one device),
# so this runs one rank, through NCCL because it is named (distributed.backend: nccl; a plain
# one-rank run uses no communicator at all). ZeRO-1 and an injected overflow send every kind of
# collective through NCCL on the backend's stream: the gradients' reduce-scatter, found_inf's max,
# the parameters' all-gather, the loss's mean. A one-rank reduce and broadcast change no bit, so
# the run must end with bitwise the checkpoint tensors of the plain single-process run.
if "$B/ampctl" --version 2>/dev/null | grep -q "nccl yes"; then
  cat >"$B/nccl_smoke.yaml" <<YAML
name: nccl_smoke
device: cuda
precision: fp16
model: {type: mlp, hidden: [64], activation: relu}
data:
  train: {source: synthetic, task: classification, samples: 1024, features: 32, classes: 4}
  batch_size: 64
optimizer: {type: adamw, lr: 1.0e-3}
training: {max_steps: 20, grad_clip_norm: 1.0}
debug: {inject_nonfinite_at: [5]}
YAML
  run_step nccl_reference 120 "$B/ampctl" train --config "$B/nccl_smoke.yaml" \
    --run-dir "$RUNS/nccl_reference"
  run_step nccl_one_rank 120 "$B/ampctl" train --config "$B/nccl_smoke.yaml" \
    --run-dir "$RUNS/nccl_one_rank" --set distributed.backend=nccl --set distributed.zero=1
  # The tensors' CRCs and the scaler's state (not the document's own CRC, which covers its config:
  # distributed differs there).
  nccl_crcs() {
    python3 -c 'import json, sys
for f in sys.argv[1:]:
    d = json.load(open(f))
    print(f.rsplit("/", 1)[-1], json.dumps(d["scaler"], sort_keys=True))
    for part in ("model", "optimizer"):
        for k, t in sorted(d[part]["tensors"].items()):
            print(part, k, t["crc32"])' "$1"/checkpoints/step-*.json
  }
  if [[ ${results[-1]} == PASS ]]; then
    if ! grep -q '"status": *"ok"' "$RUNS/nccl_one_rank/summary.json" 2>/dev/null; then
      fail_last "the NCCL run did not finish"
    elif [[ -z $(nccl_crcs "$RUNS/nccl_one_rank") ]] ||
      ! diff <(nccl_crcs "$RUNS/nccl_one_rank") <(nccl_crcs "$RUNS/nccl_reference") >/dev/null; then
      fail_last "checkpoint tensors differ from the single-process run's"
    else
      details[-1]="bitwise the single-process run"
    fi
  fi
else
  echo "gpu-check: this build has no NCCL: the NCCL step is skipped"
fi

# ---- GPT-2 small: ampctl against PyTorch AMP eager and compiled (scripts/bench/bench_gpt_gpu.py) ----
# ms/step, tokens/s, MFU against the H200's dense fp16 peak and against the cuBLAS rate measured
# in the same run, peak memory; about 2.5 minutes (torch.compile's compilation most of it). The
# T x n_embd scaling table takes as long again, so it is a device call of its own:
# scripts/bench/bench_gpt_gpu.sh (GPU_CHECK_GPT_ARGS= here adds it, if the budget allows).
if ((HAVE_TORCH)); then
  # shellcheck disable=SC2086  # word splitting of the extra arguments is intended
  run_step bench_gpt 300 python3 scripts/bench/bench_gpt_gpu.py --ampctl "$B/ampctl" \
    --json "$RESULT_DIR/bench_gpt.json" ${GPU_CHECK_GPT_ARGS---no-scaling}
  mapfile -t GPT_TABLE < <(sed -n '/^GPT-2 small/,/^bench_gpt_gpu:/p' "$LOG_DIR/bench_gpt.log")
  details[-1]=$(grep -m1 '^ampctl fp16' "$LOG_DIR/bench_gpt.log" | tr -s ' ' | cut -c1-70)
else
  echo "gpu-check: python3 cannot import torch: the GPT benchmark (bench_gpt) is skipped"
fi

# ---- summary ----
write_summary final
echo
cat "$RESULT_DIR/summary.txt"
rm -rf "$B"
exit "$failed"
