// ampctl_bench: op-level throughput of a backend, side by side with its own baselines, measured
// in one run (machines are shared and noisy: compare ratios, not lone numbers).
//
//   ampctl_bench [--device cpu|cuda] [--quick]
//
// Prints, per op, the median time over repeats and the achieved rate:
//   * gemm f16 x f16 -> f16 (fp32 accumulation) and f32 x f32 -> f32: TFLOP/s;
//   * the unscale + non-finite check pass over an f32 gradient buffer: GB/s, against a device
//     copy of the same bytes (read + write);
//   * the check-only pass (inv_scale == 1: read only);
//   * both again recording which of 64 segments overflowed (the trainer's per-tensor flags);
//   * the fused SGD step with momentum and an f16 weight copy: GB/s.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"

namespace {

using Clock = std::chrono::steady_clock;

double median_seconds(ampctl::Backend& b, int repeats, int inner, const std::function<void()>& f) {
  f();  // warm-up (workspaces, cuBLAS heuristics)
  b.synchronize();
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < inner; ++i) f();
    b.synchronize();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count() / inner);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void row(const char* op, const std::string& size, double seconds, double rate, const char* unit,
         double ratio) {
  std::printf("| %-34s | %-16s | %10.3f us | %9.2f %-7s |", op, size.c_str(), seconds * 1e6, rate,
              unit);
  if (ratio > 0) {
    std::printf(" %6.2f |\n", ratio);
  } else {
    std::printf("        |\n");
  }
}

// gemm in f32, f16 and bf16 (fp32 accumulation) on n x n matrices: TFLOP/s, the low-precision
// rows against f32's.
void bench_gemm(ampctl::Backend& backend, bool gpu, bool quick, int repeats, int inner) {
  using namespace ampctl;
  Backend* b = &backend;
  const int64_t n = gpu ? (quick ? 4096 : 8192) : (quick ? 256 : 1024);
  double f32_tflops = 0;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    Tensor a = b->empty({n, n}, dt), c = b->empty({n, n}, dt), w = b->empty({n, n}, dt);
    b->fill(a, 0.5);
    b->fill(w, 0.25);
    const double s = median_seconds(*b, repeats, inner, [&] { b->gemm(a, false, w, true, c); });
    const double tflops = 2.0 * n * n * n / s / 1e12;
    if (dt == DType::f32) f32_tflops = tflops;
    const std::string name = std::string("gemm ") + dtype_name(dt) + " (fp32 accumulate)";
    row(name.c_str(), std::to_string(n) + "^3", s, tflops, "TFLOP/s",
        dt == DType::f32 ? 0.0 : tflops / f32_tflops);
  }
}

// The memory-bound passes of a step over a gradient-sized buffer (copy as the reference,
// unscale and the non-finite check, with per-tensor flags, the fused SGD step): GB/s.
void bench_memory_passes(ampctl::Backend& backend, bool gpu, bool quick, int repeats, int inner) {
  using namespace ampctl;
  Backend* b = &backend;
  const int64_t elems = gpu ? (quick ? (int64_t{1} << 26) : (int64_t{1} << 28))
                            : (quick ? (int64_t{1} << 20) : (int64_t{1} << 24));
  const std::string size = std::to_string(elems * 4 / (1 << 20)) + " MiB f32";
  Tensor g = b->empty({elems}, DType::f32), g2 = b->empty({elems}, DType::f32);
  b->fill(g, 1.0);
  b->fill(g2, 1.0);
  const double bytes_rw = 2.0 * static_cast<double>(elems) * 4;
  const double t_copy = median_seconds(*b, repeats, inner, [&] { b->copy(g2, g); });
  const double copy_gbs = bytes_rw / t_copy / 1e9;
  row("copy (reference)", size, t_copy, copy_gbs, "GB/s", 0);

  Tensor found = b->zeros({1}, DType::f32), scale = b->empty({1}, DType::f32);
  Tensor inv = b->empty({1}, DType::f32), ones = b->empty({1}, DType::f32);
  b->fill(scale, 0.5);  // inv_scale = 2: every element is multiplied and stored
  b->inv_scale(scale, inv);
  b->fill(ones, 1.0);
  std::vector<Tensor> grads{g};
  const double t_unscale = median_seconds(
      *b, repeats, inner, [&] { b->non_finite_check_and_unscale_(grads, found, inv); });
  row("unscale + non-finite check", size, t_unscale, bytes_rw / t_unscale / 1e9, "GB/s",
      t_copy / t_unscale);
  const double t_check = median_seconds(
      *b, repeats, inner, [&] { b->non_finite_check_and_unscale_(grads, found, ones); });
  row("check only (inv_scale = 1)", size, t_check, bytes_rw / 2 / t_check / 1e9, "GB/s",
      t_copy / 2 / t_check);
  // The same passes recording which of 64 equal segments (parameter tensors) overflowed, on a
  // buffer of their own that stays finite (inv_scale just below 1: a scale >= 1, the usual
  // case, marks in the same pass; with inv_scale > 1 the GPU adds a check-only launch).
  std::vector<int32_t> starts_host(64);
  for (size_t i = 0; i < starts_host.size(); ++i) {
    starts_host[i] = static_cast<int32_t>(elems / 64 * static_cast<int64_t>(i));
  }
  Tensor starts = b->from_host({64}, DType::i32, starts_host.data());
  Tensor seg_found = b->zeros({64}, DType::i32);
  Tensor g_seg = b->empty({elems}, DType::f32), inv_seg = b->empty({1}, DType::f32);
  b->fill(g_seg, 1.0);
  b->fill(inv_seg, 0x1.fffffep-1);
  std::vector<Tensor> grads_seg{g_seg};
  const double t_unscale_seg = median_seconds(*b, repeats, inner, [&] {
    b->non_finite_check_and_unscale_(grads_seg, found, inv_seg, starts, seg_found);
  });
  row("unscale + check, per-tensor flags", size, t_unscale_seg, bytes_rw / t_unscale_seg / 1e9,
      "GB/s", t_copy / t_unscale_seg);
  const double t_check_seg = median_seconds(*b, repeats, inner, [&] {
    b->non_finite_check_and_unscale_(grads_seg, found, ones, starts, seg_found);
  });
  row("check only, per-tensor flags", size, t_check_seg, bytes_rw / 2 / t_check_seg / 1e9, "GB/s",
      t_copy / 2 / t_check_seg);

  Tensor p = b->empty({elems}, DType::f32), buf = b->zeros({elems}, DType::f32);
  Tensor lowp = b->empty({elems}, DType::f16), step = b->zeros({1}, DType::i32);
  b->fill(p, 1.0);
  b->fill(found, 0.0);
  OptimizerStepArgs args;
  args.params = p;
  args.grads = g;
  args.momentum_buf = buf;
  args.step = step;
  args.found_inf = found;
  args.inv_scale = inv;
  args.lowp_params = lowp;
  optim::SgdHyper hyper;
  hyper.lr = 1e-6f;
  hyper.momentum = 0.9f;
  args.hyper = hyper;
  // Bytes: read p, g, buf; write p, buf (f32) and the f16 copy.
  const double sgd_bytes = static_cast<double>(elems) * (4 * 5 + 2);
  const double t_sgd = median_seconds(*b, repeats, inner, [&] { b->optimizer_step(args); });
  row("fused SGD (momentum, f16 copy)", size, t_sgd, sgd_bytes / t_sgd / 1e9, "GB/s",
      (sgd_bytes / t_sgd) / (bytes_rw / t_copy));
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "cpu";
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc) {
      device = argv[++i];
    } else if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: ampctl_bench [--device cpu|cuda] [--quick]\n");
      return 2;
    }
  }
  try {
    using namespace ampctl;
    std::unique_ptr<Backend> b = device == "cpu" ? make_cpu_backend(0) : make_cuda_backend(0);
    const bool gpu = device != "cpu";
    std::printf("backend: %s\n\n", b->description().c_str());
    std::printf("| %-34s | %-16s | %13s | %17s | %6s |\n", "op", "size", "median", "rate",
                "vs ref");
    std::printf("|%s|%s|%s|%s|%s|\n", std::string(36, '-').c_str(), std::string(18, '-').c_str(),
                std::string(15, '-').c_str(), std::string(19, '-').c_str(),
                std::string(8, '-').c_str());

    const int repeats = quick ? 5 : 11;
    const int inner = gpu ? 10 : 2;
    bench_gemm(*b, gpu, quick, repeats, inner);
    bench_memory_passes(*b, gpu, quick, repeats, inner);
    std::printf(
        "\n'vs ref': gemm rows against f32 gemm; memory rows as achieved GB/s over copy's.\n");
    return 0;
  } catch (const ampctl::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    if (!e.hint().empty()) std::fprintf(stderr, "hint: %s\n", e.hint().c_str());
    return e.exit_code();
  }
}
