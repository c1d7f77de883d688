#!/usr/bin/env bash
# scripts/gpu-check.sh's own bookkeeping, on a fake bundle (no GPU needed): the budget
# (GPU_CHECK_BUDGET_S) ends the script in time, with the steps past it SKIPPED(budget) and the
# summary written; a run killed from outside leaves summary.txt and gpu-check.log with the steps
# done so far. The fake bundle's test binary passes after 2 s; its ampctl only prints --version
# (anything else fails after 1 s).
# Usage: gpu_check_budget.sh WORK_DIR   (run from anywhere)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$1/gpu_check_budget
rm -rf "$work"
mkdir -p "$work/bundle/lib"
cat >"$work/bundle/ampctl" <<'SH'
#!/usr/bin/env bash
if [[ ${1:-} == --version ]]; then
  echo "ampctl (fake bundle)"
  echo "backends: cpu, cuda (sm_75, sm_80, sm_90; PTX compute_90)"
  exit 0
fi
# Any other command takes a second, as a real one would: the steps then outlast a short budget
# whatever else the machine has (the fake test binary's steps alone take only 10 s).
sleep 1
exit 1
SH
cat >"$work/bundle/ampctl_test_cuda" <<'SH'
#!/usr/bin/env bash
sleep 2
echo "[  PASSED  ] 3 tests."
SH
chmod +x "$work/bundle/ampctl" "$work/bundle/ampctl_test_cuda"
echo "fake bundle" >"$work/bundle/MANIFEST"
if command -v xz >/dev/null; then
  tar -C "$work/bundle" -cJf "$work/bundle.tar.xz" .
else
  (cd "$work/bundle" && python3 -c 'import sys, tarfile
with tarfile.open(sys.argv[1], "w:xz") as t: t.add(".")' "$work/bundle.tar.xz")
fi

fail=0
check() {  # check CONDITION-STATUS MESSAGE
  if [[ $1 != 0 ]]; then
    echo "FAIL: $2"
    fail=1
  fi
}

# PyTorch hidden (an import of torch fails), so that no real benchmark takes the budget.
mkdir -p "$work/notorch"
echo 'raise ImportError("hidden by gpu_check_budget.sh")' >"$work/notorch/torch.py"
export PYTHONPATH=$work/notorch

# 1. A budget of 20 s (test_cuda, the fifth step, starts within a few seconds even on a loaded
# machine): the script ends soon after, exit 1, the later steps SKIPPED(budget).
start=$SECONDS
GPU_CHECK_BUNDLE=$work/bundle.tar.xz GPU_CHECK_BUDGET_S=20 OUT=$work/out \
  bash "$repo/scripts/gpu-check.sh" >"$work/stdout" 2>&1
rc=$?
elapsed=$((SECONDS - start))
summary=$work/out/summary.txt
check "$([[ $rc == 1 ]]; echo $?)" "exit 1 with steps skipped, got $rc"
check "$( ((elapsed < 80)); echo $?)" "the budget ends the script: ${elapsed}s"
check "$(grep -qE '^test_cuda +PASS' "$summary"; echo $?)" "test_cuda ran and passed"
check "$(grep -qE '^[a-z_0-9]+ +SKIPPED\(budget\) ' "$summary"; echo $?)" "steps past the budget are SKIPPED(budget)"
check "$(grep -qE 'SKIPPED\(budget\).*FAIL|FAIL +0 ' "$summary"; echo $((1 - $?)))" \
  "a skipped step is not judged (FAIL)"
check "$(tail -1 "$summary" | grep -q '^gpu-check: FAILED'; echo $?)" "the final line"
check "$(grep -q '^==== test_cuda$' "$work/out/gpu-check.log"; echo $?)" "gpu-check.log holds the steps' logs"

# 2. Killed from outside after 5 s (budget 100): the summary so far is there, unfinished.
rm -rf "$work/out2"
GPU_CHECK_BUNDLE=$work/bundle.tar.xz GPU_CHECK_BUDGET_S=100 OUT=$work/out2 \
  setsid bash "$repo/scripts/gpu-check.sh" >"$work/stdout2" 2>&1 &
pid=$!
sleep 5
kill -KILL -- -"$pid" 2>/dev/null
{ wait "$pid"; } 2>/dev/null
check "$(grep -qE '^nvidia-smi ' "$work/out2/summary.txt"; echo $?)" "a killed run's summary has its first steps"
check "$(tail -1 "$work/out2/summary.txt" | grep -q '^gpu-check: unfinished'; echo $?)" \
  "a killed run's summary says it is unfinished"

if ((fail)); then
  echo "--- summary"; cat "$summary"; echo "--- killed run's summary"; cat "$work/out2/summary.txt"
  exit 1
fi
echo "gpu_check_budget: all checks passed"
rm -rf "$work"
