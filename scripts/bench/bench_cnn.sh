#!/usr/bin/env bash
# CNN benchmark: a cnn config (--config; configs/fashion_mnist_cnn.yaml by default) in ampctl
# (fp16) beside the same model and recipe in PyTorch fp32 (scripts/bench/bench_cnn.py, Debian's
# python3-torch with oneDNN), both on the CPU with the same thread count.
#   1. step time: interleaved rounds (ampctl, then PyTorch, R times), each side's median over the
#      rounds and the ratio ampctl / PyTorch (goal: <= 0.5). ampctl's number is summary.json's
#      steady_step_ms of a short run without evaluation; PyTorch's the median step of a short run.
#   2. accuracy and wall time: each side trains the full recipe of the config once (the PyTorch
#      side reads model, optimizer, scheduler, batch size and max_steps from the same file) and
#      is evaluated on the 10,000 test images (skipped with --time-only). By default the two
#      trainings run one after the other with --threads each; with --concurrent they run at the
#      same time with 1 thread each (OPENBLAS_NUM_THREADS=1 for ampctl's CPU pool,
#      torch.set_num_threads(1)), the fair pairing on a 2-core machine shared with other work.
#      Wall and CPU time (user + system, from the reaped child's rusage) are each whole
#      process's, data loading and evaluation included; on a machine shared with other work
#      the CPU time is the steadier measure.
#
#   scripts/bench/bench_cnn.sh [--build DIR] [--config FILE] [--rounds N] [--threads N]
#                        [--time-only | --train-only] [--concurrent] [--keep]
#   --keep leaves the ampctl run directories (summary.json, metrics.jsonl) in place and names them.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=build
ROUNDS=3
THREADS=2
FULL=1
TIMING=1
CONCURRENT=0
KEEP=0
CONFIG=configs/fashion_mnist_cnn.yaml
while (($#)); do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --config) CONFIG=$2; shift 2 ;;
    --time-only) FULL=0; shift ;;
    --train-only) TIMING=0; shift ;;
    --concurrent) CONCURRENT=1; shift ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "bench_cnn.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
AMPCTL=$BUILD/ampctl
[[ -x $AMPCTL ]] || { echo "bench_cnn.sh: $AMPCTL not found (build it, or pass --build DIR)" >&2; exit 2; }
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  { echo "bench_cnn.sh: /usr/bin/python3 has no torch (apt-get install python3-torch)" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ampctl-bench-cnn.XXXXXX")
if ((KEEP)); then echo "run directories under $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi

/usr/bin/python3 - "$AMPCTL" "$WORK" "$ROUNDS" "$THREADS" "$FULL" "$TIMING" "$CONCURRENT" \
  "$CONFIG" <<'PY'
import json, os, resource, statistics, subprocess, sys, time

ampctl, work, rounds, threads, full, timing, concurrent, config = sys.argv[1:9]
rounds, threads = int(rounds), int(threads)
full, timing, concurrent = full == "1", timing == "1", concurrent == "1"

def env_for(n):
    return dict(os.environ, OPENBLAS_NUM_THREADS=str(n), OMP_NUM_THREADS=str(n))

def ampctl_start(tag, sets, n):
    run = os.path.join(work, tag)
    subprocess.run(["rm", "-rf", run], check=True)
    cmd = [ampctl, "train", "--config", config, "--run-dir", run, "--set", "device=cpu"]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.Popen(cmd, env=env_for(n), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    return p, run, time.perf_counter()

def cpu_of_reaped():
    """CPU seconds (user + system) of the children reaped so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

cpu = {"reaped": 0.0}

def reaped_cpu():
    """The CPU seconds of the child just reaped (the rusage of all reaped children grows by it)."""
    now = cpu_of_reaped()
    delta, cpu["reaped"] = now - cpu["reaped"], now
    return delta

def ampctl_finish(started):
    p, run, t0 = started
    err = p.communicate()[1]
    wall = time.perf_counter() - t0
    cpu["ampctl"] = reaped_cpu()
    if p.returncode != 0:
        sys.exit(f"bench_cnn.sh: ampctl failed ({p.returncode}):\n{err}")
    with open(os.path.join(run, "summary.json")) as f:
        return json.load(f), wall

def ampctl_train(tag, sets, n=threads):
    return ampctl_finish(ampctl_start(tag, sets, n))

def torch_start(args, n):
    cmd = ["/usr/bin/python3", "scripts/bench/bench_cnn.py", "--config", config, "--threads", str(n)]
    # stderr passes through: the training's progress lines, or the error.
    p = subprocess.Popen(cmd + args, env=env_for(n), stdout=subprocess.PIPE, text=True)
    return p, time.perf_counter()

def torch_finish(started):
    p, t0 = started
    out = p.communicate()[0]
    wall = time.perf_counter() - t0
    cpu["torch"] = reaped_cpu()
    if p.returncode != 0:
        sys.exit(f"bench_cnn.sh: scripts/bench/bench_cnn.py failed ({p.returncode})")
    return json.loads(out.strip().splitlines()[-1]), wall

def torch_run(args, n=threads):
    return torch_finish(torch_start(args, n))[0]

reaped_cpu()  # the torch check and rm above are not counted
a_ms, t_ms = [], []
for r in range(rounds if timing else 0):
    s, _ = ampctl_train(f"time{r}", ["training.max_steps=60", "training.eval_every=0",
                                     "data.eval=null", "logging.every_steps=20"])
    a_ms.append(s["steady_step_ms"])
    t_ms.append(torch_run(["--mode", "time", "--steps", "40"])["step_ms"])
    print(f"round {r + 1}: ampctl fp16 {a_ms[-1]:.1f} ms, PyTorch fp32 {t_ms[-1]:.1f} ms", flush=True)
if timing:
    am, tm = statistics.median(a_ms), statistics.median(t_ms)
    print(f"step time (median of {rounds}, {threads} threads, batch 128): ampctl fp16 {am:.1f} ms, "
          f"PyTorch fp32 {tm:.1f} ms, ratio {am / tm:.2f} (goal <= 0.5)", flush=True)
if full:
    reaped_cpu()
    if concurrent:
        how = "at the same time, 1 thread each"
        a_started = ampctl_start("full", [], 1)
        t_started = torch_start(["--mode", "train"], 1)
        (s, a_wall), (t, t_wall) = ampctl_finish(a_started), torch_finish(t_started)
    else:
        how = f"one after the other, {threads} threads each"
        s, a_wall = ampctl_train("full", [])
        t, t_wall = torch_finish(torch_start(["--mode", "train"], threads))
    ev = s["eval"]  # the last evaluation, after the last step
    if ev is None or ev["step"] != s["steps"]:
        sys.exit("bench_cnn.sh: the ampctl run has no evaluation after its last step")
    print(f"full training of {config} ({t['steps']} steps, {how}):")
    print(f"  ampctl fp16:  test accuracy {ev['accuracy']:.4f}, wall {a_wall:.0f} s "
          f"(training {s['train_time_s']:.0f} s), CPU {cpu['ampctl']:.0f} s")
    print(f"  PyTorch fp32: test accuracy {t['accuracy']:.4f}, wall {t_wall:.0f} s, "
          f"CPU {cpu['torch']:.0f} s")
    print(f"  ratio ampctl / PyTorch: wall {a_wall / t_wall:.2f}, CPU "
          f"{cpu['ampctl'] / cpu['torch']:.2f}")
PY
