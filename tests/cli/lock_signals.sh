#!/usr/bin/env bash
# Run-directory locks and signals through the real binary, with processes in the background (run
# by output_paths.cmake: lock_signals.sh AMPCTL WORK). Each case prints "ok: ..." or
# "FAIL: ..."; the exit status is the number of failures (0: all passed). Every wait is bounded,
# and an unfixed binary that never stops is killed, so the script always ends.
set -u
A=$1
W=$2/locks
rm -rf "$W"
mkdir -p "$W"
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
ok() { echo "ok: $*"; }

# wait_for FILE SECONDS: until FILE exists (status 1 on time-out).
wait_for() {
  local n=$(($2 * 20))
  while [ ! -e "$1" ] && [ $n -gt 0 ]; do
    sleep 0.05
    n=$((n - 1))
  done
  [ -e "$1" ]
}
# wait_holder DIR PID SECONDS: until DIR/.lock names PID (status 1 on time-out).
wait_holder() {
  local n=$(($3 * 20))
  while ! grep -qs "^pid $2\$" "$1/.lock" && [ $n -gt 0 ]; do
    sleep 0.05
    n=$((n - 1))
  done
  grep -qs "^pid $2\$" "$1/.lock"
}
# wait_exit PID SECONDS: RC := its exit status, or 124 after killing it when still running.
wait_exit() {
  local n=$(($2 * 20))
  while kill -0 "$1" 2>/dev/null && [ $n -gt 0 ]; do
    sleep 0.05
    n=$((n - 1))
  done
  if kill -0 "$1" 2>/dev/null; then
    kill -KILL "$1" 2>/dev/null
    wait "$1" 2>/dev/null
    RC=124
  else
    wait "$1"
    RC=$?
  fi
}
# The step of DIR's checkpoints/latest (0 when there is none).
latest_step() {
  local name
  name=$(cat "$1/checkpoints/latest" 2>/dev/null) || {
    echo 0
    return
  }
  name=${name#step-}
  name=${name%.json}
  echo $((10#$name))
}

cat >"$W/slow.yaml" <<'YAML'
name: slow
seed: 0
device: cpu
precision: fp16
model: {type: mlp, hidden: [256, 256], activation: relu, dropout: 0.1}
data:
  train: {source: synthetic, task: classification, samples: 8192, features: 32, classes: 10}
  batch_size: 128
optimizer: {type: adamw, lr: 1.0e-3}
training: {max_steps: 100000, eval_every: 0}
checkpoint: {every_steps: 20, keep_last: 2}
logging: {every_steps: 10}
YAML
S="$W/slow.yaml"

# --- L1: two trains started together into one --run-dir: exactly one runs ---
"$A" train --config "$S" --set training.max_steps=100 --run-dir "$W/l1" >"$W/l1a.out" 2>"$W/l1a.err" &
PA=$!
"$A" train --config "$S" --set training.max_steps=100 --run-dir "$W/l1" >"$W/l1b.out" 2>"$W/l1b.err" &
PB=$!
wait_exit $PA 120
RA=$RC
wait_exit $PB 120
RB=$RC
if [ "$RA$RB" = "02" ]; then
  loser=b
  holder=$PA
elif [ "$RA$RB" = "20" ]; then
  loser=a
  holder=$PB
else
  loser=
fi
if [ -z "$loser" ]; then
  fail "two trains into one run directory exited $RA and $RB: one must be refused with exit 2"
elif grep -q "in use by another ampctl process (pid $holder: \|already holds a run" "$W/l1$loser.err"; then
  lines=$(grep -c '"kind":"train"' "$W/l1/metrics.jsonl")
  if [ "$lines" = 100 ]; then ok "two trains: one ran (100 lines), the other refused"; else
    fail "two trains: metrics.jsonl holds $lines train lines, expected 100"
  fi
else
  fail "two trains: the refusal does not name the holder: $(cat "$W/l1$loser.err")"
fi

# --- L1b: two trains started together without --run-dir: never one directory for both (the
# second takes runs/slow-2, or is refused if both chose runs/slow before either locked it) ---
mkdir -p "$W/l1b"
(cd "$W/l1b" && "$A" train --config "$S" --set training.max_steps=100 >a.out 2>a.err) &
PA=$!
(cd "$W/l1b" && "$A" train --config "$S" --set training.max_steps=100 >b.out 2>b.err) &
PB=$!
wait_exit $PA 120
RA=$RC
wait_exit $PB 120
RB=$RC
dirs=$(ls "$W/l1b/runs" 2>/dev/null | tr '\n' ' ')
if [ "$RA$RB" = "00" ] && [ "$dirs" = "slow slow-2 " ]; then
  ok "two trains without --run-dir: runs/slow and runs/slow-2"
elif { [ "$RA$RB" = "02" ] || [ "$RA$RB" = "20" ]; } && grep -qs "in use by another ampctl process" "$W/l1b/a.err" "$W/l1b/b.err"; then
  ok "two trains without --run-dir: one ran, the other was refused (both chose runs/slow)"
else
  fail "two trains without --run-dir: exits $RA and $RB, run directories: $dirs"
fi

# --- L2: resume while train writes the run ---
"$A" train --config "$S" --run-dir "$W/l2" >"$W/l2.out" 2>"$W/l2.err" &
P=$!
if wait_for "$W/l2/checkpoints/latest" 60; then
  timeout -s KILL 30 "$A" resume --checkpoint "$W/l2" >/dev/null 2>"$W/l2r.err"
  R=$?
  if [ $R = 2 ] && grep -q "error: run directory $W/l2 is in use by another ampctl process (pid $P: .*train" "$W/l2r.err"; then
    ok "resume while train runs: refused naming the trainer"
  else
    fail "resume while train runs: exit $R: $(cat "$W/l2r.err")"
  fi
else
  fail "train wrote no checkpoint in 60 s"
fi
kill -TERM $P 2>/dev/null
wait_exit $P 30
if [ $RC = 143 ]; then ok "the trainer went on and stopped cleanly on SIGTERM"; else
  fail "the trainer exited $RC after the resume attempt (expected 143): $(tail -3 "$W/l2.err")"
fi

# --- L3: two resumes of one run ---
"$A" resume --checkpoint "$W/l2" >"$W/l3a.out" 2>"$W/l3a.err" &
PA=$!
wait_holder "$W/l2" $PA 30 || sleep 2  # an unfixed binary writes no lock: give it time to start
timeout -s KILL 30 "$A" resume --checkpoint "$W/l2" >/dev/null 2>"$W/l3b.err"
R=$?
if [ $R = 2 ] && grep -q "in use by another ampctl process (pid $PA: .*resume" "$W/l3b.err"; then
  ok "two resumes: the second refused naming the first"
else
  fail "two resumes: the second exited $R: $(cat "$W/l3b.err")"
fi
kill -TERM $PA 2>/dev/null
wait_exit $PA 30
[ $RC = 143 ] || fail "the first resume exited $RC (expected 143 on SIGTERM)"

# --- L4: a resume of a sweep's run while the sweep trains it ---
"$A" sweep --config "$S" --out "$W/sw" >"$W/sw.out" 2>"$W/sw.err" &
PS=$!
if wait_for "$W/sw/base/checkpoints/latest" 60; then
  timeout -s KILL 30 "$A" resume --checkpoint "$W/sw/base" >/dev/null 2>"$W/l4.err"
  R=$?
  if [ $R = 2 ] && grep -q "in use by another ampctl process (pid [0-9]*: .*train" "$W/l4.err"; then
    ok "resume of a sweep's running run: refused naming the sweep's trainer"
  else
    fail "resume of a sweep's running run: exit $R: $(cat "$W/l4.err")"
  fi
else
  fail "the sweep's run wrote no checkpoint in 60 s"
fi
# SIGUSR1 to the sweep: forwarded, the run writes a checkpoint and goes on (and the sweep too).
kill -USR1 $PS 2>/dev/null
sleep 1
kill -TERM $PS 2>/dev/null
wait_exit $PS 30
[ $RC = 143 ] || fail "the sweep exited $RC on SIGUSR1 then SIGTERM (expected 143)"
if grep -q "SIGUSR1: checkpoint after step" "$W/sw/base/stdout.log"; then
  ok "SIGUSR1 to a sweep: forwarded, its run checkpointed and went on"
else
  fail "SIGUSR1 to a sweep: its run wrote no checkpoint for it: $(tail -2 "$W/sw/base/stderr.log")"
fi

# The other way round: a resume of the sweep's run started by hand, then the sweep again: the
# sweep leaves that run alone (failed: in use) instead of resuming it too.
"$A" resume --checkpoint "$W/sw/base" >"$W/l4r.out" 2>"$W/l4r.err" &
PR=$!
wait_holder "$W/sw/base" $PR 30 || sleep 2
timeout -s KILL 60 "$A" sweep --config "$S" --out "$W/sw" >"$W/sw2.out" 2>&1
R=$?
if [ $R = 1 ] && grep -q "base: not started: run directory .* is in use by another ampctl process (pid $PR: " "$W/sw2.out"; then
  ok "a sweep while its run is resumed by hand: that run is left alone, named as in use"
else
  fail "a sweep while its run is resumed by hand: exit $R: $(tail -3 "$W/sw2.out")"
fi
kill -TERM $PR 2>/dev/null
wait_exit $PR 30
[ $RC = 143 ] || fail "the hand-started resume exited $RC (expected 143 on SIGTERM)"

# --- L5 + prune: a SIGKILLed holder frees the lock; prune keeps a live writer's temp file ---
"$A" train --config "$S" --run-dir "$W/l5" >"$W/l5.out" 2>"$W/l5.err" &
P=$!
wait_for "$W/l5/checkpoints/latest" 60
kill -KILL $P 2>/dev/null
wait $P 2>/dev/null
sleep 60 &
LIVE=$!
(exit 0) &
DEAD=$!
wait $DEAD
live_tmp="$W/l5/checkpoints/.step-00000999.json.tmp-$LIVE-0123456789abcdef"
dead_tmp="$W/l5/checkpoints/.step-00000998.json.tmp-$DEAD-0123456789abcdef"
echo partial >"$live_tmp"
echo partial >"$dead_tmp"
k=$(latest_step "$W/l5")
timeout -s KILL 60 "$A" resume --checkpoint "$W/l5" --set training.max_steps=$((k + 5)) \
  --set checkpoint.every_steps=1 >/dev/null 2>"$W/l5r.err"
R=$?
if [ $R = 0 ]; then ok "resume after the holder was SIGKILLed"; else
  fail "resume after the holder was SIGKILLed: exit $R: $(cat "$W/l5r.err")"
fi
if [ -e "$live_tmp" ]; then ok "prune kept a live writer's temporary file"; else
  fail "prune removed the temporary file of a live process ($LIVE)"
fi
if [ ! -e "$dead_tmp" ]; then ok "prune removed a dead writer's temporary file"; else
  fail "prune left a dead writer's temporary file"
fi
kill $LIVE 2>/dev/null
wait $LIVE 2>/dev/null

# --- S1: SIGTERM with grad_accum_steps = 2^31-1 (one step never ends) ---
"$A" train --config "$S" --set training.grad_accum_steps=2147483647 --set training.max_steps=1 \
  --run-dir "$W/s1" >"$W/s1.out" 2>"$W/s1.err" &
P=$!
wait_for "$W/s1/metrics.jsonl" 60
sleep 0.5
t0=$(date +%s%N)
kill -TERM $P
wait_exit $P 20
ms=$((($(date +%s%N) - t0) / 1000000))
if [ $RC = 143 ] && [ $ms -lt 5000 ] && grep -q "stopped by SIGTERM" "$W/s1.err" &&
  [ -e "$W/s1/checkpoints/latest" ]; then
  ok "SIGTERM inside a 2^31-1 micro-batch step: exit 143 after $ms ms with a checkpoint"
else
  fail "SIGTERM inside a 2^31-1 micro-batch step: exit $RC after $ms ms: $(tail -2 "$W/s1.err")"
fi

# --- S2: a stop between micro-batches resumes bitwise to the uninterrupted run ---
# A metrics line after every step, so the signal can follow the first step closely whatever the
# machine's speed.
exact=(--set training.grad_accum_steps=20 --set training.max_steps=30 --set checkpoint.every_steps=0
  --set logging.every_steps=1)
"$A" train --config "$S" "${exact[@]}" --run-dir "$W/s2a" >/dev/null 2>"$W/s2a.err" ||
  fail "the uninterrupted run failed: $(tail -2 "$W/s2a.err")"
"$A" export --checkpoint "$W/s2a" --format safetensors --out "$W/s2a.safetensors" >/dev/null
mid=0
for attempt in 1 2 3; do
  rm -rf "$W/s2b"
  "$A" train --config "$S" "${exact[@]}" --run-dir "$W/s2b" >/dev/null 2>"$W/s2b.err" &
  P=$!
  n=1200
  while ! grep -qs '"kind":"train"' "$W/s2b/metrics.jsonl" && [ $n -gt 0 ]; do
    sleep 0.05
    n=$((n - 1))
  done
  sleep 0.0$((attempt * 3))
  kill -TERM $P 2>/dev/null
  wait_exit $P 30
  if [ $RC != 143 ]; then
    echo "attempt $attempt: the run exited $RC before the signal landed"
    continue
  fi
  timeout -s KILL 120 "$A" resume --checkpoint "$W/s2b" >/dev/null 2>"$W/s2r.err" ||
    fail "resume after the stop failed: $(tail -2 "$W/s2r.err")"
  "$A" export --checkpoint "$W/s2b" --format safetensors --out "$W/s2b.safetensors" >/dev/null
  if cmp -s "$W/s2a.safetensors" "$W/s2b.safetensors"; then
    strip() { grep '"kind":"train"' "$1" | sed 's/"time_s":[^,}]*//'; }
    if [ "$(strip "$W/s2a/metrics.jsonl")" = "$(strip "$W/s2b/metrics.jsonl")" ]; then
      ok "attempt $attempt: stopped ($(grep -o 'stopped by SIGTERM [^;]*' "$W/s2b.err")), resumed: parameters and metrics bitwise equal"
    else
      fail "attempt $attempt: parameters equal but the metrics differ from the uninterrupted run"
    fi
  else
    fail "attempt $attempt: the resumed run's parameters differ from the uninterrupted run's ($(grep -o 'stopped by SIGTERM [^;]*' "$W/s2b.err"))"
  fi
  if grep -q "between micro-batches" "$W/s2b.err"; then
    mid=1
    break
  fi
done
[ $mid = 1 ] || fail "no SIGTERM landed between micro-batches in 3 attempts (no mid-step stop tested)"

# --- S3: SIGHUP stops with a checkpoint, exit 129 ---
"$A" train --config "$S" --set checkpoint.every_steps=0 --run-dir "$W/s3" >"$W/s3.out" 2>"$W/s3.err" &
P=$!
wait_for "$W/s3/metrics.jsonl" 60
sleep 0.5
kill -HUP $P
wait_exit $P 20
if [ $RC = 129 ] && grep -q "stopped by SIGHUP" "$W/s3.err" && [ -e "$W/s3/checkpoints/latest" ]; then
  ok "SIGHUP: exit 129 with checkpoint step $(latest_step "$W/s3")"
else
  fail "SIGHUP: exit $RC, checkpoint step $(latest_step "$W/s3"): $(tail -2 "$W/s3.err")"
fi

# --- S3b: under nohup (SIGHUP ignored at start) a SIGHUP is ignored, as nohup asks: the run goes
# on, and SIGTERM still stops it with a checkpoint ---
nohup "$A" train --config "$S" --set checkpoint.every_steps=0 --run-dir "$W/s3b" \
  >"$W/s3b.out" 2>"$W/s3b.err" &
P=$!
wait_for "$W/s3b/metrics.jsonl" 60
sleep 0.5
kill -HUP $P
sleep 1
if kill -0 $P 2>/dev/null; then
  kill -TERM $P
  wait_exit $P 20
  if [ $RC = 143 ] && [ -e "$W/s3b/checkpoints/latest" ]; then
    ok "nohup: SIGHUP ignored, then SIGTERM: exit 143 with checkpoint step $(latest_step "$W/s3b")"
  else
    fail "nohup: after an ignored SIGHUP, SIGTERM gave exit $RC: $(tail -2 "$W/s3b.err")"
  fi
else
  wait_exit $P 5
  fail "nohup: SIGHUP stopped the run (exit $RC): $(tail -2 "$W/s3b.err")"
fi

# --- S4: SIGUSR1 writes a checkpoint and training goes on ---
"$A" train --config "$S" --set checkpoint.every_steps=0 --set checkpoint.keep_last=10 \
  --run-dir "$W/s4" >"$W/s4.out" 2>"$W/s4.err" &
P=$!
wait_for "$W/s4/metrics.jsonl" 60
sleep 0.5
kill -USR1 $P
if wait_for "$W/s4/checkpoints/latest" 20 && sleep 0.5 && kill -0 $P 2>/dev/null; then
  k1=$(latest_step "$W/s4")
  kill -TERM $P
  wait_exit $P 20
  k2=$(latest_step "$W/s4")
  if [ $RC = 143 ] && [ "$k1" -gt 0 ] && [ "$k2" -gt "$k1" ]; then
    ok "SIGUSR1: checkpoint at step $k1, training went on to step $k2"
  else
    fail "SIGUSR1: checkpoint at step $k1, then exit $RC at step $k2"
  fi
else
  kill -KILL $P 2>/dev/null
  wait_exit $P 5
  fail "SIGUSR1: no checkpoint while the run goes on (exit $RC): $(tail -2 "$W/s4.err")"
fi

# --- S5: SIGQUIT stops with a checkpoint too (exit 131); a second one would dump core ---
"$A" train --config "$S" --set checkpoint.every_steps=0 --run-dir "$W/s5" >"$W/s5.out" 2>"$W/s5.err" &
P=$!
wait_for "$W/s5/metrics.jsonl" 60
sleep 0.5
kill -QUIT $P
wait_exit $P 20
if [ $RC = 131 ] && grep -q "stopped by SIGQUIT" "$W/s5.err" && [ -e "$W/s5/checkpoints/latest" ]; then
  ok "SIGQUIT: exit 131 with checkpoint step $(latest_step "$W/s5")"
else
  fail "SIGQUIT: exit $RC, checkpoint step $(latest_step "$W/s5"): $(tail -2 "$W/s5.err")"
fi

# --- S6: SIGTERM while the data loads (a 12-million-line CSV): honoured inside the reader's
# loop within moments, exit 143, nothing trained and the new run directory removed ---
yes "0.5,1.25,-3.0,2.5,1" | head -n 12000000 >"$W/big.csv"
cat >"$W/big.yaml" <<YAML
name: big
device: cpu
model: {type: mlp, hidden: [8]}
data:
  train: {source: csv, path: $W/big.csv, label_column: 4, header: false}
  batch_size: 64
training: {max_steps: 10}
YAML
"$A" train --config "$W/big.yaml" --run-dir "$W/s6" >"$W/s6.out" 2>"$W/s6.err" &
P=$!
# The run directory is made once the handlers are installed and before the data loads (a CUDA
# build may take a while to start: a signal before that would find the default action).
wait_for "$W/s6" 60
sent=$(date +%s%N)
kill -TERM $P
wait_exit $P 30
ms=$(((($(date +%s%N) - sent)) / 1000000))
if [ $RC = 143 ] && grep -q "stopped by SIGTERM while " "$W/s6.err" && [ ! -e "$W/s6" ]; then
  ok "SIGTERM during data loading: exit 143 ${ms} ms after the signal ($(grep -o 'while [^;]*' "$W/s6.err"))"
else
  fail "SIGTERM during data loading: exit $RC after ${ms} ms, run dir $([ -e "$W/s6" ] && echo kept || echo removed): $(tail -2 "$W/s6.err")"
fi
rm -f "$W/big.csv"

echo "$failures failure(s)"
exit $failures
