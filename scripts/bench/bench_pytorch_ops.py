#!/usr/bin/env python3
"""The PyTorch side of ampctl_bench --device cuda --quick: the same ops at the same sizes, timed the
same way (median over repeats of 10 back-to-back launches, synchronised), so the two tables can be
read side by side in one gpu-check run.

  gemm 4096^3 in f32 (TF32 off, PyTorch's default), f16 and bf16 (fp32 accumulation);
  copy of 2^26 floats; torch._amp_foreach_non_finite_check_and_unscale_ (what GradScaler.unscale_
  runs) over the same buffer, with inv_scale 2 and with 1; SGD(momentum=0.9, fused=True) step.
"""
import statistics
import sys
import time

import torch


def median_seconds(fn, repeats=5, inner=10):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / inner)
    return statistics.median(times)


def row(op, size, seconds, rate, unit):
    print(f"| {op:<34} | {size:<16} | {seconds * 1e6:10.3f} us | {rate:9.2f} {unit:<7} |")


def main():
    if not torch.cuda.is_available():
        print("bench_pytorch_ops: no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}\n")
    print(f"| {'op':<34} | {'size':<16} | {'median':>13} | {'rate':>17} |")
    n = 4096
    for dt, name in ((torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16")):
        a = torch.full((n, n), 0.5, device=dev, dtype=dt)
        w = torch.full((n, n), 0.25, device=dev, dtype=dt)
        c = torch.empty((n, n), device=dev, dtype=dt)
        s = median_seconds(lambda: torch.matmul(a, w.t(), out=c))
        row(f"torch gemm {name}", f"{n}^3", s, 2 * n ** 3 / s / 1e12, "TFLOP/s")

    elems = 1 << 26
    size = f"{elems * 4 >> 20} MiB f32"
    g = torch.ones(elems, device=dev)
    g2 = torch.ones(elems, device=dev)
    rw = 2.0 * elems * 4
    s = median_seconds(lambda: g2.copy_(g))
    row("torch copy", size, s, rw / s / 1e9, "GB/s")
    found = torch.zeros(1, device=dev)
    inv = torch.full((1,), 2.0, device=dev)
    one = torch.ones(1, device=dev)
    s = median_seconds(lambda: torch._amp_foreach_non_finite_check_and_unscale_([g], found, inv))
    row("torch unscale + non-finite check", size, s, rw / s / 1e9, "GB/s")
    s = median_seconds(lambda: torch._amp_foreach_non_finite_check_and_unscale_([g], found, one))
    row("torch check only (inv_scale = 1)", size, s, rw / 2 / s / 1e9, "GB/s")

    p = torch.nn.Parameter(torch.ones(elems, device=dev))
    p.grad = torch.ones(elems, device=dev)
    opt = torch.optim.SGD([p], lr=1e-6, momentum=0.9, fused=True)
    s = median_seconds(opt.step)
    # Bytes: read p, g, buf; write p, buf (no f16 copy in PyTorch's fused SGD).
    row("torch fused SGD (momentum)", size, s, elems * 4 * 5 / s / 1e9, "GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
