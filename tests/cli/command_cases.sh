#!/usr/bin/env bash
# Hardening round 3 (issue 30), single-process cases through the real binary; each checks the
# exit code, the message and what is left on disk:
#   command_cases.sh AMPCTL WORK CASE
# CASE (ctest runs each as cli.case_<case>):
#   ckpt_domains     a checkpoint with a NaN parameter, a negative Adam second moment, an
#                    optimizer step counter beyond the checkpoint's step, a negative BatchNorm
#                    running variance: refused (exit 2) naming the tensor
#   ckpt_document    an edited config (n_head 4 -> 8) or vocabulary in a checkpoint: refused by
#                    the document's crc32 (exit 2); a deleted or damaged vocab.json is restored
#                    on resume
#   own_files        export / report --out a run's vocab.json, events file, lock: refused (exit 2),
#                    before and after the file exists, the file unchanged
#   full_device      inspect, validate, --version, --help, sample, report writing to /dev/full
#                    fail (exit 1)
#   sample_stream    sample prints its text as it goes: SIGTERM / SIGINT / SIGHUP stop it
#                    between two tokens with the text so far printed (exit 143 / 130 / 129)
#   sample_options   --top-k 0, an out-of-range --seed, a --temperature that overflows the
#                    logits: exit 2; non-finite logits: exit 1 with the reason, nothing drawn
#   divergence_hint  a diverged run with no checkpoint is not told to resume
#   tensorboard      a resumed run's events file starts with a SessionLog START at its first step
#   cnn_eval_shape   a CNN evaluation set of 14x56 images against 28x28 training images: exit 2
#   cnn_batch_norm   a BatchNorm that would see one value per channel (1x1 maps at batch 1, or a
#                    last partial batch of one row): exit 2 before the run directory exists;
#                    validate / train refuse model.type: cnn on feature rows alike (exit 2)
#   sizes            sizes only a run used to find (internal: std::bad_alloc, exit 1, or an
#                    undefined cast): distributed.bucket_mb 1e30, training.eval_batches 2^31 - 1,
#                    a 3 GiB text (sparse), sample --tokens 1e14: exit 2 naming the key, the file
#                    or the option, from validate as from train, and no run directory; a
#                    debug.inject_tensor the model does not have, from validate too
#   sweep_runs       a sweep with two invalid runs (a value out of range, a parameter name only
#                    the model knows): validate and sweep name both (exit 2), no sweep folder; a
#                    sweep stopped by SIGTERM lists the runs it never started as not_started with
#                    no run_dir (not "skipped" at folders that do not exist), and report reads it
#   numerics_resume  with logging.numerics_every, a run stopped off a logging boundary and resumed
#                    writes metrics.jsonl line for line as the uninterrupted run (each numerics
#                    line right after its step's train line)
set -uo pipefail

AMPCTL=$1
WORK=$2
CASE=$3
DIR="$WORK/hardening3_$CASE"
rm -rf "$DIR"
mkdir -p "$DIR"
cd "$DIR" || exit 1
export OPENBLAS_NUM_THREADS=1

fail() {
  echo "FAIL [$CASE]: $*" >&2
  exit 1
}

# expect RC PATTERN COMMAND...: runs COMMAND (stdout to out, stderr to err), checks its exit
# code and that its stderr matches PATTERN (grep -E).
expect() {
  local want=$1 pattern=$2
  shift 2
  timeout -k 5 120 "$@" >out 2>err
  local rc=$?
  [ "$rc" = "$want" ] || fail "$* : exit $rc, expected $want: $(cat err)"
  grep -Eq -- "$pattern" err || fail "$* : stderr does not match '$pattern': $(cat err)"
}

# A small GPT on text: 4 steps, a checkpoint at the end.
gpt_run() {
  python3 -c "
import random
r = random.Random(1)
print(''.join(r.choice('abcdefgh \n') for _ in range(3000)))" >corpus.txt
  cat >gpt.yaml <<'EOF'
name: gpt
seed: 1
device: cpu
precision: fp16
model: {type: gpt, n_layer: 1, n_head: 4, n_embd: 16, block_size: 8}
data:
  train: {source: text, path: corpus.txt, vocab: char}
  batch_size: 2
optimizer: {type: adamw, lr: 1.0e-3}
training: {max_steps: 4}
EOF
  "$AMPCTL" train --config gpt.yaml --run-dir "$1" "${@:2}" >/dev/null 2>gpt.err ||
    fail "the GPT run: $(cat gpt.err)"
}

# edit CHECKPOINT PYTHON: runs PYTHON on the document `d` (with helpers get(t)/put(t, values)
# for a tensor's f32/i32 values, which also fix its own crc32) and writes it back without its
# top-level crc32 (as a checkpoint written before it had one), so that what is refused is the
# value, not the edit.
edit() {
  python3 - "$1" "$2" <<'EOF'
import base64, json, struct, sys, zlib
path, code = sys.argv[1], sys.argv[2]
d = json.load(open(path))
def fmt(t):
    return {"f32": "f", "i32": "i"}[t["dtype"]]
def get(t):
    raw = base64.b64decode(t["data"])
    return list(struct.unpack("<%d%s" % (len(raw) // 4, fmt(t)), raw))
def put(t, values):
    raw = struct.pack("<%d%s" % (len(values), fmt(t)), *values)
    t["data"] = base64.b64encode(raw).decode()
    t["crc32"] = "%08x" % (zlib.crc32(raw) & 0xffffffff)
exec(code)
d.pop("crc32", None)
json.dump(d, open(path, "w"), indent=1)
EOF
}

latest() { echo "$1/checkpoints/$(cat "$1/checkpoints/latest")"; }

case "$CASE" in
ckpt_domains)
  gpt_run run
  ck=$(latest run)
  cp "$ck" good.json
  # Unchanged but for the missing document crc32 (an older checkpoint): accepted.
  edit "$ck" "pass"
  "$AMPCTL" inspect "$ck" >/dev/null 2>err || fail "an unedited checkpoint: $(cat err)"
  cp good.json "$ck"
  edit "$ck" "
t = d['model']['tensors']['transformer.h.0.attn.c_attn.weight']; v = get(t); v[5] = float('nan'); put(t, v)"
  expect 2 "model tensor transformer.h.0.attn.c_attn.weight: element 5 is nan: not finite" \
    "$AMPCTL" resume --checkpoint "$ck"
  expect 2 "transformer.h.0.attn.c_attn.weight: element 5 is nan" "$AMPCTL" sample --checkpoint "$ck" --tokens 3
  cp good.json "$ck"
  edit "$ck" "
t = d['optimizer']['tensors']['param_groups.0.exp_avg_sq']; v = get(t); v[7] = -1.0; put(t, v)"
  expect 2 "optimizer tensor param_groups.0.exp_avg_sq: element 7 is -1: a variance or second moment must be >= 0" \
    "$AMPCTL" resume --checkpoint "$ck"
  cp good.json "$ck"
  edit "$ck" "
t = d['optimizer']['tensors']['param_groups.0.exp_avg']; v = get(t); v[0] = float('inf'); put(t, v)"
  expect 2 "optimizer tensor param_groups.0.exp_avg: element 0 is inf: not finite" \
    "$AMPCTL" resume --checkpoint "$ck"
  cp good.json "$ck"
  edit "$ck" "
t = d['optimizer']['tensors']['param_groups.0.step']; put(t, [99])"
  expect 2 "param_groups.0.step: element 0 is 99: the optimizer cannot have taken more steps than the checkpoint's 4" \
    "$AMPCTL" resume --checkpoint "$ck" --set training.max_steps=8
  # Resume falls back past a refused latest checkpoint to an older good one, saying why.
  cp good.json "$ck"
  "$AMPCTL" resume --checkpoint run --set training.max_steps=8 >/dev/null 2>err ||
    fail "the untouched checkpoint does not resume: $(cat err)"
  # A CNN with BatchNorm: a negative running variance.
  python3 - <<'EOF'
import random, struct
r = random.Random(2)
n = 64
with open("images.idx", "wb") as f:
    f.write(struct.pack(">I3I", 0x803, n, 8, 8))
    f.write(bytes(r.randrange(256) for _ in range(n * 64)))
with open("labels.idx", "wb") as f:
    f.write(struct.pack(">II", 0x801, n))
    f.write(bytes(r.randrange(4) for _ in range(n)))
EOF
  cat >cnn.yaml <<'EOF'
name: cnn
device: cpu
precision: fp32
model: {type: cnn, conv: [[4, 3]], pool: 2, batch_norm: true, hidden: [8]}
data:
  train: {source: idx, images: images.idx, labels: labels.idx}
  batch_size: 8
optimizer: {type: sgd, lr: 0.01}
training: {max_steps: 2}
EOF
  "$AMPCTL" train --config cnn.yaml --run-dir cnn >/dev/null 2>err || fail "the CNN run: $(cat err)"
  ck=$(latest cnn)
  var=$(python3 -c "
import json; d = json.load(open('$ck'))
print([k for k in d['model']['tensors'] if k.endswith('running_var')][0])")
  edit "$ck" "
t = d['model']['tensors']['$var']; v = get(t); v[1] = -0.5; put(t, v)"
  expect 2 "model tensor $var: element 1 is -0.5: a variance or second moment must be >= 0" \
    "$AMPCTL" resume --checkpoint "$ck" --set training.max_steps=4
  ;;
ckpt_document)
  gpt_run run
  ck=$(latest run)
  cp "$ck" good.json
  # An edited configuration (n_head 4 -> 8: another model over the same tensors) and an
  # edited vocabulary (what sample prints): the document's crc32 no longer matches.
  sed -i 's/"n_head": 4/"n_head": 8/' "$ck"
  grep -q '"n_head": 8' "$ck" || fail "the edit did not apply"
  expect 2 "crc32 mismatch over the document" "$AMPCTL" inspect "$ck"
  expect 2 "crc32 mismatch over the document" "$AMPCTL" sample --checkpoint "$ck" --tokens 2
  cp good.json "$ck"
  python3 - "$ck" <<'EOF'
import sys
p = sys.argv[1]
s = open(p).read()
i = s.index('"vocab"')
j = s.index('"a"', i)
open(p, "w").write(s[:j] + '"A"' + s[j + 3:])
EOF
  expect 2 "crc32 mismatch over the document" "$AMPCTL" sample --checkpoint "$ck" --tokens 2
  cp good.json "$ck"
  # A deleted, then a damaged vocab.json is written again on resume.
  cp run/vocab.json vocab.good
  rm run/vocab.json
  "$AMPCTL" resume --checkpoint run --set training.max_steps=6 >/dev/null 2>err ||
    fail "resume: $(cat err)"
  cmp -s run/vocab.json vocab.good || fail "a deleted vocab.json was not restored"
  echo '["x"' >run/vocab.json
  "$AMPCTL" resume --checkpoint run --set training.max_steps=8 >/dev/null 2>err ||
    fail "resume: $(cat err)"
  cmp -s run/vocab.json vocab.good || fail "a damaged vocab.json was not restored"
  ;;
own_files)
  gpt_run run --set logging.tensorboard=true
  ck=$(latest run)
  events=$(ls run | grep '^events.out.tfevents' | head -1)
  [ -n "$events" ] || fail "no events file"
  for f in vocab.json "$events" .lock summary.json; do
    [ -e "run/$f" ] && sha=$(sha256sum "run/$f") || sha=""
    expect 2 "is the run's own file" "$AMPCTL" export --checkpoint "$ck" --format safetensors \
      --out "run/$f"
    expect 2 "is the run's own file|which this command reads" "$AMPCTL" report run --out "run/$f"
    [ -z "$sha" ] || [ "$(sha256sum "run/$f")" = "$sha" ] || fail "run/$f was changed"
  done
  # Before they exist: a run without a vocabulary or events file yet.
  rm run/vocab.json run/events.out.tfevents.*
  for f in vocab.json events.out.tfevents.1700000000.host; do
    expect 2 "is the run's own file" "$AMPCTL" export --checkpoint "$ck" --format safetensors \
      --out "run/$f"
    [ ! -e "run/$f" ] || fail "run/$f was written"
  done
  # A file of another name beside them is the user's to ask for.
  "$AMPCTL" export --checkpoint "$ck" --format safetensors --out run/model.safetensors \
    >/dev/null 2>err || fail "export to a new file: $(cat err)"
  ;;
full_device)
  [ -w /dev/full ] || { echo "SKIP [$CASE]: no writable /dev/full"; exit 0; }
  gpt_run run
  timeout 60 "$AMPCTL" inspect "$(latest run)" >/dev/full 2>err
  [ $? = 1 ] && grep -q "cannot write the standard output" err || fail "inspect >/dev/full: $(cat err)"
  timeout 60 "$AMPCTL" validate --config gpt.yaml >/dev/full 2>err
  [ $? = 1 ] && grep -q "cannot write" err || fail "validate >/dev/full: $(cat err)"
  timeout 60 "$AMPCTL" --version >/dev/full 2>err
  [ $? = 1 ] && grep -q "cannot write" err || fail "--version >/dev/full: $(cat err)"
  timeout 60 "$AMPCTL" --help >/dev/full 2>err
  [ $? = 1 ] && grep -q "cannot write" err || fail "--help >/dev/full: $(cat err)"
  timeout 60 "$AMPCTL" train --help >/dev/full 2>err
  [ $? = 1 ] && grep -q "cannot write" err || fail "train --help >/dev/full: $(cat err)"
  timeout 60 "$AMPCTL" sample --checkpoint run --tokens 5 >/dev/full 2>err
  [ $? = 1 ] && grep -q "cannot write" err || fail "sample >/dev/full: $(cat err)"
  # The same commands to a real file exit 0.
  "$AMPCTL" --version >v.out 2>err && [ -s v.out ] || fail "--version: $(cat err)"
  ;;
sample_stream)
  gpt_run run
  for sig in TERM INT HUP; do
    # Long enough to be running when the signal comes; its first tokens are on stdout by then.
    timeout -k 5 120 "$AMPCTL" sample --checkpoint run --tokens 1000000 --prompt abc >"s.$sig" 2>"e.$sig" &
    pid=$!
    for _ in $(seq 1 400); do
      [ "$(stat -c %s "s.$sig")" -gt 20 ] && break
      sleep 0.05
    done
    [ "$(stat -c %s "s.$sig")" -gt 20 ] || fail "SIG$sig: no text streamed within 20 s: $(cat "e.$sig")"
    # The sample process is timeout's child.
    child=$(pgrep -P "$pid" | head -1)
    kill -"$sig" "$child"
    wait "$pid"
    rc=$?
    want=$((128 + $(kill -l "$sig")))
    [ "$rc" = "$want" ] || fail "SIG$sig: exit $rc, expected $want: $(cat "e.$sig")"
    grep -Eq "stopped by SIG$sig after [0-9]+ of 1000000 new tokens" "e.$sig" ||
      fail "SIG$sig: no stop message: $(cat "e.$sig")"
    n=$(sed -n 's/.*after \([0-9]*\) of.*/\1/p' "e.$sig")
    # The prompt, the tokens drawn, a newline: nothing lost.
    python3 -c "
import sys
t = open('s.$sig', encoding='utf-8').read()
sys.exit(not (t.startswith('abc') and t.endswith('\n') and len(t) == 3 + $n + 1))" ||
      fail "SIG$sig: the text does not hold the $n tokens drawn: $(wc -c <"s.$sig") bytes"
  done
  # Streaming prints what the whole run prints: the same text as a run left to finish.
  "$AMPCTL" sample --checkpoint run --tokens 40 --prompt abc --seed 7 >full.txt 2>err ||
    fail "sample: $(cat err)"
  [ "$(wc -c <full.txt)" = 44 ] || fail "40 tokens give $(wc -c <full.txt) bytes"
  ;;
sample_options)
  gpt_run run
  expect 2 "--top-k 0: expected an integer K >= 1" "$AMPCTL" sample --checkpoint run --top-k 0
  expect 2 "--seed 18446744073709551616: expected an integer in \[0, 2\^64 - 1\] \(it is out of range\)" \
    "$AMPCTL" sample --checkpoint run --seed 18446744073709551616
  expect 2 "--seed -1: expected an integer" "$AMPCTL" sample --checkpoint run --seed -1
  expect 2 "--seed 1.5: expected an integer" "$AMPCTL" sample --checkpoint run --seed 1.5
  "$AMPCTL" sample --checkpoint run --seed 18446744073709551615 --tokens 3 >/dev/null 2>err ||
    fail "the largest seed: $(cat err)"
  expect 2 "--temperature 9.9[0-9]*e-321 is too small: the logits .* divided by it overflow" \
    "$AMPCTL" sample --checkpoint run --temperature 1e-320 --tokens 3
  # Weights so large that the fp16 forward overflows: the logits are not finite.
  ck=$(latest run)
  edit "$ck" "
t = d['model']['tensors']['transformer.wte.weight']; put(t, [60000.0] * len(get(t)))"
  expect 1 "the model's logits are not finite at new token 0" "$AMPCTL" sample --checkpoint "$ck" --tokens 3
  ;;
divergence_hint)
  cat >div.yaml <<'EOF'
name: div
device: cpu
precision: fp32
model: {type: mlp, hidden: [8]}
data:
  train: {source: synthetic, task: classification, samples: 256, features: 4, classes: 2}
  batch_size: 16
optimizer: {type: sgd, lr: 0.1}
scaler: {enabled: false}
training: {max_steps: 20, divergence_patience: 2}
logging: {every_steps: 1}
debug: {inject_nonfinite_at: [1]}
EOF
  expect 1 "training diverged at step" "$AMPCTL" train --config div.yaml --run-dir run
  grep -q "none was written before" err || fail "the message does not say no checkpoint exists: $(cat err)"
  if grep -q "ampctl resume" err; then fail "the hint offers resume without a checkpoint: $(cat err)"; fi
  grep -q "hint: .*train again" err || fail "the hint does not say to train again: $(cat err)"
  # With a checkpoint of a good state, resume is offered.
  sed -i 's/inject_nonfinite_at: \[1\]/inject_nonfinite_at: [5]/' div.yaml
  expect 1 "training diverged at step" "$AMPCTL" train --config div.yaml --run-dir run2 \
    --set checkpoint.every_steps=2
  grep -q "hint: .*ampctl resume --checkpoint" err || fail "no resume hint with a checkpoint: $(cat err)"
  ;;
tensorboard)
  gpt_run run --set logging.tensorboard=true
  sleep 1.1  # a new events file name (its seconds)
  "$AMPCTL" resume --checkpoint run --set training.max_steps=7 >/dev/null 2>err ||
    fail "resume: $(cat err)"
  python3 - run <<'EOF' || fail "the events files"
import glob, os, struct, sys

def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1
        v |= (c & 0x7f) << s; s += 7
        if c < 0x80:
            return v, i

def fields(b):
    i, out = 0, []
    while i < len(b):
        k, i = varint(b, i)
        f, w = k >> 3, k & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 1:
            v = b[i:i + 8]; i += 8
        elif w == 5:
            v = b[i:i + 4]; i += 4
        elif w == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
        out.append((f, v))
    return out

def events(path):
    b = open(path, "rb").read()
    i, out = 0, []
    while i < len(b):
        (n,) = struct.unpack("<Q", b[i:i + 8])
        out.append(dict(fields(b[i + 12:i + 12 + n])))
        i += 12 + n + 4
    return out

files = sorted(glob.glob(os.path.join(sys.argv[1], "events.out.tfevents.*")), key=os.path.getmtime)
assert len(files) == 2, files
first, second = events(files[0]), events(files[1])
assert 6 not in first[0] and 3 in first[0], "the first file starts with a plain file_version"
# The resumed file: file_version at step 5, then SessionLog{status: START} at step 5.
assert first[0].get(2) is None
assert second[0].get(3) == b"brain.Event:2" and second[0].get(2) == 5, second[0]
assert second[1].get(2) == 5 and dict(fields(second[1][6])) == {1: 1}, second[1]
steps = sorted({e[2] for e in second[2:] if 5 in e})
assert steps == [5, 6, 7], steps
print("ok")
EOF
  ;;
cnn_eval_shape)
  python3 - <<'EOF'
import random, struct
r = random.Random(2)
def images(path, n, h, w):
    with open(path, "wb") as f:
        f.write(struct.pack(">I3I", 0x803, n, h, w))
        f.write(bytes(r.randrange(256) for _ in range(n * h * w)))
def labels(path, n):
    with open(path, "wb") as f:
        f.write(struct.pack(">II", 0x801, n))
        f.write(bytes(r.randrange(4) for _ in range(n)))
images("train.idx", 32, 28, 28); labels("train-labels.idx", 32)
images("eval.idx", 16, 14, 56); labels("eval-labels.idx", 16)
EOF
  cat >cnn.yaml <<'EOF'
name: cnn
device: cpu
model: {type: cnn, conv: [[4, 3]], pool: 2, hidden: [8]}
data:
  train: {source: idx, images: train.idx, labels: train-labels.idx}
  eval: {source: idx, images: eval.idx, labels: eval-labels.idx}
  batch_size: 8
training: {max_steps: 2}
EOF
  expect 2 "data.eval holds images of 1x14x56 \(channels x height x width\) and data.train of 1x28x28" \
    "$AMPCTL" train --config cnn.yaml --run-dir run
  [ ! -e run ] || fail "a run directory was left"
  ;;
cnn_batch_norm)
  python3 - <<'EOF'
import random, struct
r = random.Random(2)
def images(path, n, h, w):
    with open(path, "wb") as f:
        f.write(struct.pack(">I3I", 0x803, n, h, w))
        f.write(bytes(r.randrange(256) for _ in range(n * h * w)))
def labels(path, n):
    with open(path, "wb") as f:
        f.write(struct.pack(">II", 0x801, n))
        f.write(bytes(r.randrange(4) for _ in range(n)))
images("px.idx", 17, 1, 1); labels("px-labels.idx", 17)
EOF
  cat >bn.yaml <<'EOF'
name: bn
device: cpu
model: {type: cnn, conv: [[4, 1]], pool: 1, batch_norm: true, hidden: [8]}
data:
  train: {source: idx, images: px.idx, labels: px-labels.idx}
  batch_size: 1
  drop_last: false
training: {max_steps: 40}
EOF
  # 1x1 images (one pixel per channel): at batch 1 the BatchNorm sees one value per channel.
  expect 2 "model.batch_norm: the BatchNorm after model.conv\[0\] would see 1 value per channel \(1 row of 1x1 maps, data.batch_size 1\)" \
    "$AMPCTL" train --config bn.yaml --run-dir run
  [ ! -e run ] || fail "a run directory was left"
  # Batch 8 of 17 samples without drop_last: the last batch holds one row.
  expect 2 "model.batch_norm: the BatchNorm after model.conv\[0\] would see 1 value per channel \(1 row of 1x1 maps: the last batch of 1 of .*'s 17 samples, with data.drop_last: false\)" \
    "$AMPCTL" train --config bn.yaml --run-dir run --set data.batch_size=8
  [ ! -e run ] || fail "a run directory was left"
  "$AMPCTL" train --config bn.yaml --run-dir run --set data.batch_size=8 --set data.drop_last=true \
    --set training.max_steps=2 >/dev/null 2>err || fail "drop_last: true trains: $(cat err)"
  # A CNN on feature rows: validate says so, as train does, naming model.type.
  cat >rows.yaml <<'EOF'
name: rows
device: cpu
model: {type: mlp, hidden: [8]}
data:
  train: {source: synthetic, task: classification, samples: 64, features: 16, classes: 4}
  batch_size: 8
training: {max_steps: 2}
EOF
  expect 2 "model.type.*cnn takes images" "$AMPCTL" validate --config rows.yaml --set model.type=cnn
  expect 2 "model.type.*cnn takes images" "$AMPCTL" train --config rows.yaml --set model.type=cnn --run-dir run2
  [ ! -e run2 ] || fail "a run directory was left"
  ;;
sizes)
  gpt_run src
  for cmd in validate train; do
    run=()
    [ "$cmd" = train ] && run=(--run-dir "run-$cmd")
    expect 2 "distributed.bucket_mb: must be in \(0.0, 1048576.0\], got 1.0e\+30" \
      "$AMPCTL" "$cmd" --config gpt.yaml "${run[@]}" --set distributed.bucket_mb=1e30
    expect 2 "error: training.eval_batches: the run needs about 256.0 GiB of host memory .*evaluation windows 256.0 GiB" \
      "$AMPCTL" "$cmd" --config gpt.yaml "${run[@]}" --set training.eval_batches=2147483647
    grep -q "hint: make training.eval_batches smaller" err || fail "no hint naming the key: $(cat err)"
    # A parameter name only the built model knew (validate said ok before).
    expect 2 "error: debug.inject_tensor: the model has no parameter 'transformer.h.0.attn.c_atn.weight'" \
      "$AMPCTL" "$cmd" --config gpt.yaml "${run[@]}" --set debug.inject_tensor=transformer.h.0.attn.c_atn.weight
    grep -q "did you mean 'transformer.h.0.attn.c_attn.weight'" err || fail "no suggestion: $(cat err)"
    [ ! -e "run-$cmd" ] || fail "$cmd left a run directory"
  done
  # The key that drives the memory: a CNN's conv maps (were blamed on model.hidden), a token
  # vocabulary (was model.n_embd).
  python3 -c "
import struct
open('im.idx', 'wb').write(struct.pack('>I3I', 0x803, 4, 28, 28) + bytes(4 * 784))
open('lb.idx', 'wb').write(struct.pack('>II', 0x801, 4) + bytes(4))"
  printf '%s\n' 'name: big_conv' 'device: cpu' \
    'model: {type: cnn, conv: [[65536, 3], [65536, 3]], hidden: [16]}' \
    'data: {train: {source: idx, images: im.idx, labels: lb.idx}, batch_size: 2}' >big_conv.yaml
  expect 2 "error: model.conv: the run needs about" "$AMPCTL" validate --config big_conv.yaml
  grep -q "hint: make model.conv smaller" err || fail "no hint naming model.conv: $(cat err)"
  printf 'xy' >t.bin
  expect 2 "error: the vocabulary \(data.train.vocab_size, or a text's characters\): the run needs about" \
    "$AMPCTL" validate --config gpt.yaml --set "data.train={source: tokens, path: t.bin, vocab_size: 2000000000}"
  truncate -s 3G big.txt
  expect 2 "error: text data .*big.txt: larger than 2.0 GiB, the limit for this file" \
    "$AMPCTL" train --config gpt.yaml --run-dir run-big --set data.train.path=big.txt
  [ ! -e run-big ] || fail "a run directory was left"
  rm -f big.txt
  expect 2 "error: --tokens 100000000000000: the sample would need about 1.4 PiB of host memory" \
    "$AMPCTL" sample --checkpoint src --tokens 100000000000000
  [ ! -s out ] || fail "sample printed text before refusing: $(cat out)"
  ;;
sweep_runs)
  cat >s.yaml <<'EOF'
name: s
device: cpu
model: {type: mlp, hidden: [8]}
data:
  train: {source: synthetic, task: classification, samples: 256, features: 8, classes: 4}
  batch_size: 16
training: {max_steps: 300, eval_every: 0}
sweep:
  runs:
    - {optimizer.lr: 0.01}
    - {model.hidden: [0]}
    - {debug.inject_tensor: nope}
EOF
  for cmd in validate sweep; do
    out=()
    [ "$cmd" = sweep ] && out=(--out sw)
    # A value of the file's sweep section is named by its line and column, as the file's own are.
    expect 2 "error: run hidden=_0_: s.yaml:11:22: model.hidden\[0\]: must be in" \
      "$AMPCTL" "$cmd" --config s.yaml "${out[@]}"
    grep -q "error: run inject_tensor=nope: debug.inject_tensor: the model has no parameter 'nope'" err ||
      fail "$cmd did not name the second invalid run: $(cat err)"
  done
  [ ! -e sw ] || fail "the refused sweep left its folder"
  cat >s2.yaml <<'EOF'
name: s2
device: cpu
model: {type: mlp, hidden: [8]}
data:
  train: {source: synthetic, task: classification, samples: 256, features: 8, classes: 4}
  batch_size: 16
training: {max_steps: 100000000, eval_every: 0}
sweep:
  grid: {optimizer.lr: [0.01, 0.02, 0.03]}
EOF
  "$AMPCTL" sweep --config s2.yaml --out sw2 >out 2>err &
  pid=$!
  for _ in $(seq 1 200); do
    [ -f sw2/lr=0.01/metrics.jsonl ] && break
    sleep 0.05
  done
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  [ "$rc" = 143 ] || fail "the stopped sweep exited $rc, expected 143: $(tail -3 err)"
  python3 - <<'EOF' || fail "sweep.json after the stop"
import json, sys
rows = {r["name"]: r for r in json.load(open("sw2/sweep.json"))["runs"]}
assert rows["lr=0.01"]["status"] == "interrupted", rows["lr=0.01"]
for name in ("lr=0.02", "lr=0.03"):
    assert rows[name]["status"] == "not_started" and rows[name]["run_dir"] == "", rows[name]
EOF
  grep -q "^lr=0.02,optimizer.lr=0.02,not_started,.*,$" sw2/sweep.csv || fail "sweep.csv: $(cat sw2/sweep.csv)"
  [ ! -e sw2/lr=0.02 ] || fail "a folder for a run that never started"
  "$AMPCTL" report sw2 >/dev/null 2>err || fail "report of the stopped sweep: $(cat err)"
  # Paths in the sweep section are the file's: read from its folder whatever the current
  # directory (they were read from the current directory); a run whose file is missing is
  # refused, every such run named, before the sweep's folder exists (it used to fail only when
  # it started, after the others had run).
  mkdir -p cfg elsewhere && printf 'x0,x1,y\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n' >cfg/d.csv
  base='name: p
device: cpu
model: {type: mlp, hidden: [4]}
data:
  train: {source: csv, path: d.csv, header: true}
  batch_size: 2
training: {max_steps: 2, eval_every: 0}'
  printf '%s\nsweep:\n  runs: [{data.train.path: d.csv}, {data.train.path: missing.csv}, {init.from: nowhere}]\n' \
    "$base" >cfg/bad.yaml
  printf '%s\nsweep:\n  runs: [{data.train.path: d.csv}]\n' "$base" >cfg/good.yaml
  printf '%s\n' "$base" >cfg/plain.yaml
  top=$PWD
  cd elsewhere
  expect 2 "run path=missing.csv: data.train.path $top/cfg/missing.csv: no such file" \
    "$AMPCTL" sweep --config ../cfg/bad.yaml --out ../sw3
  grep -q "run from=nowhere: init.from $top/cfg/nowhere: no such file" err ||
    fail "the second missing input is not named: $(cat err)"
  [ ! -e ../sw3 ] || fail "the refused sweep left its folder"
  "$AMPCTL" sweep --config ../cfg/good.yaml --out ../sw4 >/dev/null 2>err ||
    fail "the sweep from another folder: $(cat err)"
  # A --grid path is the command line's: read from the current directory.
  "$AMPCTL" sweep --config ../cfg/plain.yaml --out ../sw5 --grid data.train.path=../cfg/d.csv \
    >/dev/null 2>err || fail "the --grid sweep: $(cat err)"
  cd "$top"
  # fashion_mnist's folder missing: named, and the hint says which package has it.
  expect 2 "run base: data.train.dir /nonexistent-fm: no such file or directory" \
    "$AMPCTL" sweep --config cfg/plain.yaml --out sw6 \
    --set "data.train={source: fashion_mnist, dir: /nonexistent-fm}"
  grep -q "install the Debian package dataset-fashion-mnist" err || fail "no package hint: $(cat err)"
  grep -q "path: $top/cfg/d.csv" sw4/path=d.csv/config.yaml ||
    fail "the sweep section's path: $(grep path: sw4/*/config.yaml)"
  grep -q "path: $top/cfg/d.csv" sw5/path=.._cfg_d.csv/config.yaml ||
    fail "the --grid path: $(grep path: sw5/*/config.yaml)"
  ;;
numerics_resume)
  cat >n.yaml <<'EOF'
name: n
device: cpu
precision: fp16
model: {type: mlp, hidden: [16]}
data:
  train: {source: synthetic, task: classification, samples: 512, features: 8, classes: 4}
  batch_size: 16
training: {max_steps: 40, eval_every: 0}
checkpoint: {every_steps: 20}
logging: {every_steps: 10, numerics_every: 3}
EOF
  "$AMPCTL" train --config n.yaml --run-dir whole >/dev/null 2>err || fail "the whole run: $(cat err)"
  # Stopped at step 15, off the logging boundary (its last flush writes steps 11-15), resumed.
  "$AMPCTL" train --config n.yaml --run-dir split --set training.max_steps=15 \
    --set checkpoint.every_steps=15 >/dev/null 2>err || fail "the first part: $(cat err)"
  "$AMPCTL" resume --checkpoint split --set training.max_steps=40 >/dev/null 2>err ||
    fail "the resume: $(cat err)"
  python3 - <<'EOF' || fail "metrics.jsonl differs"
import json, sys
def lines(path):
    out = []
    for l in open(path):
        d = json.loads(l)
        d.pop("time_s", None)
        out.append(d)
    return out
a, b = lines("whole/metrics.jsonl"), lines("split/metrics.jsonl")
order = [(d["kind"], d["step"]) for d in a]
if ("numerics", 12) not in order or order.index(("numerics", 12)) != order.index(("train", 12)) + 1:
    sys.exit(f"the numerics line of step 12 is not right after its train line: {order[:20]}")
for i, (x, y) in enumerate(zip(a, b)):
    if x != y:
        sys.exit(f"line {i + 1}: {x.get('kind')} {x.get('step')} uninterrupted, "
                 f"{y.get('kind')} {y.get('step')} resumed")
if len(a) != len(b):
    sys.exit(f"{len(a)} lines uninterrupted, {len(b)} resumed")
EOF
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "ok [$CASE]"
