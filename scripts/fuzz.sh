#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz: config, checkpoint, idx, csv, sweep, lm) with clang into their
# own build directory and runs each for SECONDS_PER_TARGET seconds (default 60), two at a time.
#
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Each target starts from its checked-in seed corpus (tests/fuzz/corpus/TARGET, read only) and
# writes what it discovers to a scratch folder, so the checked-in corpus never grows. A finding
# (crash, sanitizer report, uncaught exception, broken invariant, timeout, memory past the
# limit, leak) is saved under BUILD/findings/TARGET/; reproduce it with
#   BUILD/tests/fuzz/fuzz_TARGET BUILD/findings/TARGET/crash-...
# Exits 1 if any target found anything (or did not run to the end), else 0. Prints executions
# per target last.
#
# Environment: FUZZ_BUILD_DIR (default build-fuzz), FUZZ_JOBS (targets at a time, default 2),
# FUZZ_NICE (nice level of the fuzzers, default 0), FUZZ_SEED (libFuzzer's -seed: 0, the default,
# draws a new one each run, for exploring; a fixed N makes a run repeat the same inputs in the
# same order, as scripts/test.sh, CI's command, does so that its verdict does not depend on luck).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]" >&2
  exit 2
fi
shift $(($# > 0 ? 1 : 0))
all_targets=(config checkpoint idx csv sweep lm)
targets=("$@")
((${#targets[@]} > 0)) || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || {
    echo "fuzz.sh: unknown target '$t' (targets: ${all_targets[*]})" >&2
    exit 2
  }
done

# Inputs longer than this are not generated: room for the largest seed and its mutations; the
# readers' handling of size is tested on what headers claim, not on megabytes of input.
declare -A max_len=([config]=8192 [checkpoint]=16384 [idx]=4096 [csv]=4096 [sweep]=8192 [lm]=4096)

build=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${FUZZ_JOBS:-2}
nice_level=${FUZZ_NICE:-0}
seed=${FUZZ_SEED:-0}
[[ "$seed" =~ ^[0-9]+$ ]] || {
  echo "fuzz.sh: FUZZ_SEED must be a non-negative integer, got '$seed'" >&2
  exit 2
}
command -v clang++ >/dev/null || {
  echo "fuzz.sh: clang++ not found (bash scripts/setup.sh installs clang and libclang-rt-14-dev)" >&2
  exit 2
}

# -O1 -g1 without NDEBUG: line numbers in reports, assertions on.
# ccache as in scripts/test.sh (AMPCTL_CCACHE=0: without).
launcher=()
if [[ "${AMPCTL_CCACHE:-1}" == 1 ]] && command -v ccache >/dev/null; then
  # NOHASHDIR: the debug builds (-g1) would otherwise hash the clone's path and never hit.
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" \
  -DAMPCTL_FUZZ=ON -DAMPCTL_CUDA=OFF -DAMPCTL_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/#/fuzz_}"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/ampctl-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

run_one() {
  local t=$1
  local findings="$build/findings/$t"
  rm -rf "$findings"
  mkdir -p "$findings" "$scratch/$t"
  local dict=()
  [[ -f tests/fuzz/dict/$t.dict ]] && dict=(-dict="tests/fuzz/dict/$t.dict")
  # -timeout: one input running 10 s is a hang. -rss_limit_mb (and the malloc limit, which
  # follows it): an input needing 2 GiB is an allocation sized by the input, not by its data.
  # The outer timeout only guards against libFuzzer itself never returning.
  local rc=0
  timeout -k 10 $((seconds * 2 + 120)) nice -n "$nice_level" \
    "$build/tests/fuzz/fuzz_$t" "${dict[@]}" -max_total_time="$seconds" \
    -max_len="${max_len[$t]}" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -seed="$seed" \
    -artifact_prefix="$findings/" "$scratch/$t" "tests/fuzz/corpus/$t" \
    >"$scratch/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$scratch/$t.rc"
}

pids=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  if ((${#pids[@]} >= jobs)); then
    wait "${pids[0]}"
    pids=("${pids[@]:1}")
  fi
done
wait

failed=0
summary=()
for t in "${targets[@]}"; do
  log="$scratch/$t.log"
  rc=$(cat "$scratch/$t.rc")
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  new=$(sed -n 's/^stat::new_units_added: *//p' "$log" | tail -1)
  found=$(find "$build/findings/$t" -type f | head -5)
  if [[ "$rc" != 0 || -n "$found" ]]; then
    failed=1
    echo "=== fuzz_$t: FINDING (exit $rc); the end of its log:" >&2
    tail -n 60 "$log" >&2
    [[ -n "$found" ]] && echo "saved: $found" >&2
    summary+=("$(printf '%-12s %12s runs  %6s s  peak %5s MiB  FINDING' "$t" "${runs:-?}" "$seconds" "${rss:-?}")")
  else
    summary+=("$(printf '%-12s %12s runs  %6s s  peak %5s MiB  %5s new inputs  ok' "$t" "${runs:-?}" "$seconds" "${rss:-?}" "${new:-?}")")
  fi
done
if [[ "$seed" == 0 ]]; then
  echo "fuzz: ${seconds} s per target, each from its own random seed (its log's 'INFO: Seed:')"
else
  echo "fuzz: ${seconds} s per target, seed $seed (FUZZ_SEED; repeat with the same)"
fi
printf '%s\n' "${summary[@]}"
exit "$failed"
