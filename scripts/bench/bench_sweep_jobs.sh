#!/usr/bin/env bash
# Benchmark (not a test): the 2x2 quickstart scaler sweep (scaler.init_scale x
# scaler.growth_interval, 4 runs) with `--jobs 1` (each run's threads = all cores) against
# `--jobs N` (cores divided among the runs), side by side: the two modes alternate, REPEATS pairs,
# each into a fresh directory; prints every pair's wall times, then the medians and their ratio.
#   AMPCTL=build/ampctl scripts/bench/bench_sweep_jobs.sh [REPEATS] [STEPS] [JOBS]
set -euo pipefail
cd "$(dirname "$0")/../.."

AMPCTL=${AMPCTL:-build/ampctl}
REPEATS=${1:-5}
STEPS=${2:-2500}
JOBS=${3:-2}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

run_sweep() {  # $1 = jobs, $2 = output dir; prints the wall time in seconds
  local t0 t1
  t0=$(date +%s.%N)
  "$AMPCTL" sweep --config configs/quickstart.yaml \
    --grid scaler.init_scale=1024,65536 --grid scaler.growth_interval=20,2000 \
    --grid "training.max_steps=$STEPS" --jobs "$1" --out "$2" >"$2.log" 2>&1 ||
    { echo "sweep failed: $(tail -3 "$2.log")" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f\n", b - a}'
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "cores: $(nproc); 4 runs x $STEPS steps; --jobs 1 vs --jobs $JOBS, $REPEATS alternating pairs"
printf '%-6s %12s %12s %8s\n' pair "jobs=1 (s)" "jobs=$JOBS (s)" ratio
seq_times=() par_times=()
for i in $(seq 1 "$REPEATS"); do
  # Alternate which mode goes first so a drift in machine load hits both alike.
  if ((i % 2)); then
    s=$(run_sweep 1 "$WORK/seq$i"); p=$(run_sweep "$JOBS" "$WORK/par$i")
  else
    p=$(run_sweep "$JOBS" "$WORK/par$i"); s=$(run_sweep 1 "$WORK/seq$i")
  fi
  seq_times+=("$s") par_times+=("$p")
  printf '%-6s %12.2f %12.2f %8.3f\n' "$i" "$s" "$p" "$(awk -v a="$p" -v b="$s" 'BEGIN {print a / b}')"
  rm -rf "$WORK/seq$i" "$WORK/par$i"
done
ms=$(printf '%s\n' "${seq_times[@]}" | median)
mp=$(printf '%s\n' "${par_times[@]}" | median)
printf '%-6s %12.2f %12.2f %8.3f\n' median "$ms" "$mp" "$(awk -v a="$mp" -v b="$ms" 'BEGIN {print a / b}')"
