// ampctl_bench_ops: op-level throughput of the CPU backend with Google Benchmark, each op beside
// the baseline it should be judged against, at the same shapes and bytes:
//
//   * gemm with f32, f16 and bf16 operands (C of the operands' dtype, fp32 accumulation) against
//     plain OpenBLAS cblas_sgemm: 1024^3 and the shapes one training step of the
//     784-1024-1024-10 MLP at batch 256 runs, in the three transposition cases Linear uses
//     (forward x W^T: NT; weight gradient dY^T X: TN; input gradient dY W: NN). Counter FLOP/s.
//   * linear_forward (the product plus the bias and the one rounding) at the MLP's shapes.
//   * memory-bound passes over a 1.86 M-element buffer (the MLP's parameter count) and a 16 M one:
//     memcpy of the same bytes, the unscale + non-finite check, the fused SGD and Adam updates
//     (with the f16 weight copy written in the same pass), casts f32 <-> f16 / bf16, add_,
//     relu and tanh GELU forward / backward. Counter bytes_per_second (bytes each op must read and
//     write).
//   * causal attention forward + backward at one GPT layer's shapes: the backend's op pair
//     against Backend's default composition of its separate ops. Counter FLOP/s.
//
// Machines are shared and noisy: run with repetitions and random interleaving and compare
// medians, e.g. (what scripts/bench/bench_cpu.sh does):
//   ampctl_bench_ops --benchmark_repetitions=7 --benchmark_enable_random_interleaving=true
//       --benchmark_report_aggregates_only=true
// scripts/bench/bench_cpu.sh --ops prints the ratios (ampctl op / its baseline) from that run.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ampctl/backend/backend.h"

namespace {

using namespace ampctl;

int g_threads = 0;  // 0: one per core, as the backend's default

Backend& backend() {
  static std::unique_ptr<Backend> b = make_cpu_backend(g_threads);
  return *b;
}

// Random values in [-1, 1), rounded to the dtype by the backend's own cast.
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  Backend& b = backend();
  std::vector<float> host(static_cast<size_t>(shape_numel(shape)));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : host) v = u(rng);
  Tensor f = b.from_host(shape, DType::f32, host.data());
  if (dtype == DType::f32) return f;
  Tensor t = b.empty(shape, dtype);
  b.cast(f, t);
  return t;
}

struct GemmCase {
  const char* name;
  int64_t m, n, k;
  bool ta, tb;
};

// 1024^3 in the three cases, then the MLP's step: forward of layers 1 and 2 (NT), their weight
// gradients (TN) and layer 2's input gradient (NN); then a small GPT's.
const GemmCase kGemmCases[] = {
    {"1024^3_NT", 1024, 1024, 1024, false, true},
    {"1024^3_TN", 1024, 1024, 1024, true, false},
    {"1024^3_NN", 1024, 1024, 1024, false, false},
    {"fwd1_256x1024x784_NT", 256, 1024, 784, false, true},
    {"fwd2_256x1024x1024_NT", 256, 1024, 1024, false, true},
    {"dw2_1024x1024x256_TN", 1024, 1024, 256, true, false},
    {"dw1_1024x784x256_TN", 1024, 784, 256, true, false},
    {"dx2_256x1024x1024_NN", 256, 1024, 1024, false, false},
    // The fortunes GPT's layer (768 tokens, n_embd 128): c_attn and c_fc forward, mlp c_proj
    // forward (k 512), the weight gradients of c_fc and mlp c_proj, mlp c_proj's input gradient.
    {"gpt_qkv_768x384x128_NT", 768, 384, 128, false, true},
    {"gpt_fc_768x512x128_NT", 768, 512, 128, false, true},
    {"gpt_proj_768x128x512_NT", 768, 128, 512, false, true},
    {"gpt_dwfc_512x128x768_TN", 512, 128, 768, true, false},
    {"gpt_dwproj_128x512x768_TN", 128, 512, 768, true, false},
    {"gpt_dxproj_768x512x128_NN", 768, 512, 128, false, false},
    {"gpt_dxqkv_768x128x384_NN", 768, 128, 384, false, false},
    {"gpt_dwqkv_384x128x768_TN", 384, 128, 768, true, false},
    {"gpt_dwattnproj_128x128x768_TN", 128, 128, 768, true, false},
    // The tied classifier over a 96-character vocabulary: logits, the weight gradient, dx.
    {"gpt_head_768x96x128_NT", 768, 96, 128, false, true},
    {"gpt_dwhead_96x128x768_TN", 96, 128, 768, true, false},
    {"gpt_dxhead_768x128x96_NN", 768, 128, 96, false, false},
};

void set_flops(benchmark::State& state, const GemmCase& g) {
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(g.m * g.n * g.k),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void bm_sgemm(benchmark::State& state, GemmCase g) {
  std::vector<float> a(static_cast<size_t>(g.m * g.k)), b(static_cast<size_t>(g.k * g.n));
  std::vector<float> c(static_cast<size_t>(g.m * g.n));
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  backend();  // the backend sets OpenBLAS's thread count: the same for both sides
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
                static_cast<blasint>(g.m), static_cast<blasint>(g.n), static_cast<blasint>(g.k),
                1.0f, a.data(), static_cast<blasint>(g.ta ? g.m : g.k), b.data(),
                static_cast<blasint>(g.tb ? g.k : g.n), 0.0f, c.data(), static_cast<blasint>(g.n));
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, g);
}

void bm_gemm(benchmark::State& state, GemmCase g, DType dtype) {
  Backend& be = backend();
  Tensor a = random_tensor(g.ta ? Shape{g.k, g.m} : Shape{g.m, g.k}, dtype, 2);
  Tensor b = random_tensor(g.tb ? Shape{g.n, g.k} : Shape{g.k, g.n}, dtype, 3);
  Tensor c = be.empty({g.m, g.n}, dtype);
  for (auto _ : state) {
    be.gemm(a, g.ta, b, g.tb, c);
    benchmark::ClobberMemory();
  }
  set_flops(state, g);
}

void bm_linear_forward(benchmark::State& state, int64_t rows, int64_t in, int64_t out,
                       DType dtype) {
  Backend& be = backend();
  Tensor x = random_tensor({rows, in}, dtype, 4);
  Tensor w = random_tensor({out, in}, dtype, 5);
  Tensor bias = random_tensor({out}, dtype, 6);
  Tensor y = be.empty({rows, out}, dtype);
  for (auto _ : state) {
    be.linear_forward(x, w, bias, y);
    benchmark::ClobberMemory();
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(rows * in * out),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// ---- memory-bound passes ----

void set_bytes(benchmark::State& state, double bytes) {
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
}

void bm_memcpy(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  std::vector<float> src(n, 1.0f), dst(n, 0.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n * sizeof(float));
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2.0 * 4 * static_cast<double>(n));  // read + write
}

void bm_unscale(benchmark::State& state) {
  Backend& be = backend();
  const int64_t n = state.range(0);
  Tensor g = random_tensor({n}, DType::f32, 7);
  // Alternate inv_scale 2 and 0.5 so every element is multiplied and stored, as in training,
  // and the buffer stays in range over any number of iterations.
  Tensor found = be.zeros({1}, DType::f32), scale = be.empty({1}, DType::f32);
  Tensor inv = be.empty({1}, DType::f32), inv_back = be.empty({1}, DType::f32);
  be.fill(scale, 0.5);
  be.inv_scale(scale, inv);
  be.fill(scale, 2.0);
  be.inv_scale(scale, inv_back);
  std::vector<Tensor> grads{g};
  bool up = true;
  for (auto _ : state) {
    be.non_finite_check_and_unscale_(grads, found, up ? inv : inv_back);
    up = !up;
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2.0 * 4 * static_cast<double>(n));
}

void bm_sgd(benchmark::State& state) {
  Backend& be = backend();
  const int64_t n = state.range(0);
  OptimizerStepArgs args;
  args.params = random_tensor({n}, DType::f32, 8);
  args.grads = random_tensor({n}, DType::f32, 9);
  args.momentum_buf = be.zeros({n}, DType::f32);
  args.step = be.zeros({1}, DType::i32);
  args.found_inf = be.zeros({1}, DType::f32);
  args.inv_scale = be.empty({1}, DType::f32);
  be.fill(args.inv_scale, 1.0 / 1024);
  args.lowp_params = be.empty({n}, DType::f16);
  optim::SgdHyper hyper;
  hyper.lr = 1e-6f;
  hyper.momentum = 0.9f;
  args.hyper = hyper;
  for (auto _ : state) {
    be.optimizer_step(args);
    benchmark::ClobberMemory();
  }
  // read p, g, buf; write p, buf (f32) and the f16 copy
  set_bytes(state, static_cast<double>(n) * (5 * 4 + 2));
}

void bm_adam(benchmark::State& state) {
  Backend& be = backend();
  const int64_t n = state.range(0);
  OptimizerStepArgs args;
  args.params = random_tensor({n}, DType::f32, 10);
  args.grads = random_tensor({n}, DType::f32, 11);
  args.exp_avg = be.zeros({n}, DType::f32);
  args.exp_avg_sq = be.zeros({n}, DType::f32);
  args.step = be.zeros({1}, DType::i32);
  args.found_inf = be.zeros({1}, DType::f32);
  args.inv_scale = be.empty({1}, DType::f32);
  be.fill(args.inv_scale, 1.0 / 1024);
  args.lowp_params = be.empty({n}, DType::f16);
  args.hyper = optim::AdamHyper{};
  for (auto _ : state) {
    be.optimizer_step(args);
    benchmark::ClobberMemory();
  }
  // read p, g, m, v; write p, m, v (f32) and the f16 copy
  set_bytes(state, static_cast<double>(n) * (7 * 4 + 2));
}

void bm_cast(benchmark::State& state, DType from, DType to) {
  Backend& be = backend();
  const int64_t n = state.range(0);
  Tensor src = random_tensor({n}, from, 12);
  Tensor dst = be.empty({n}, to);
  for (auto _ : state) {
    be.cast(src, dst);
    benchmark::ClobberMemory();
  }
  set_bytes(state, static_cast<double>(n) * static_cast<double>(dtype_size(from) + dtype_size(to)));
}

// The rounding of a gradient with grad_amax measured (logging.grad_amax): the cast above plus
// the max, beside the plain cast at the same sizes.
void bm_round_amax(benchmark::State& state) {
  Backend& be = backend();
  const int64_t n = state.range(0);
  Tensor src = random_tensor({n}, DType::f32, 12);
  Tensor dst = be.empty({n}, DType::f16);
  Tensor amax = be.zeros({2}, DType::f32);
  for (auto _ : state) {
    be.round_amax(src, dst, amax);
    benchmark::ClobberMemory();
  }
  set_bytes(state, static_cast<double>(n) * (4 + 2));
}

// grad (f32) += the f16 weight-gradient product: Linear's backward under fp16.
void bm_add(benchmark::State& state) {
  Backend& be = backend();
  const int64_t n = state.range(0);
  Tensor dst = random_tensor({n}, DType::f32, 13);
  Tensor src = random_tensor({n}, DType::f16, 14);
  for (auto _ : state) {
    be.add_(dst, src);
    benchmark::ClobberMemory();
  }
  set_bytes(state, static_cast<double>(n) * (4 + 4 + 2));
}

void bm_activation(benchmark::State& state, nn::ActivationKind kind, bool backward) {
  Backend& be = backend();
  const int64_t n = state.range(0);
  Tensor x = random_tensor({n}, DType::f16, 15);
  Tensor y = be.empty({n}, DType::f16);
  Tensor dy = random_tensor({n}, DType::f16, 16);
  Tensor dx = be.empty({n}, DType::f16);
  be.activation_forward(kind, x, y);
  for (auto _ : state) {
    if (backward) {
      be.activation_backward(kind, x, y, dy, dx);
    } else {
      be.activation_forward(kind, x, y);
    }
    benchmark::ClobberMemory();
  }
  set_bytes(state, static_cast<double>(n) * (backward ? 6 : 4));
}

void bm_sum_rows(benchmark::State& state) {
  Backend& be = backend();
  Tensor x = random_tensor({256, 1024}, DType::f16, 17);
  Tensor out = be.empty({1024}, DType::f16);
  for (auto _ : state) {
    be.sum_rows(x, out);
    benchmark::ClobberMemory();
  }
  set_bytes(state, 256.0 * 1024 * 2);
}

// Causal attention forward + backward, [N = B*H, T, hs] in f16: the backend's own op pair, or
// (composed) Backend's default composition through the backend's separate ops, the baseline a
// fused op must beat. Counter FLOP/s: the 6 products of T x T x hs (2 forward, 4 backward).
void bm_attention(benchmark::State& state, int64_t n, int64_t t, int64_t hs, bool composed) {
  Backend& be = backend();
  const DType dt = DType::f16;
  Tensor q = random_tensor({n, t, hs}, dt, 21), k = random_tensor({n, t, hs}, dt, 22);
  Tensor v = random_tensor({n, t, hs}, dt, 23), dy = random_tensor({n, t, hs}, dt, 24);
  Tensor y = be.empty({n, t, hs}, dt), dq = be.empty({n, t, hs}, dt);
  Tensor dk = be.empty({n, t, hs}, dt), dv = be.empty({n, t, hs}, dt);
  const AttentionBuffers buf = make_attention_buffers(be, n, t, hs, dt);
  const float scale = 0.125f;
  for (auto _ : state) {
    if (composed) {
      be.Backend::attention_forward(q, k, v, scale, y, buf);
      be.Backend::attention_backward(q, k, v, y, dy, scale, dq, dk, dv, buf);
    } else {
      be.attention_forward(q, k, v, scale, y, buf);
      be.attention_backward(q, k, v, y, dy, scale, dq, dk, dv, buf);
    }
    benchmark::ClobberMemory();
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      12.0 * static_cast<double>(n * t * t * hs) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

// Wall-clock time: the ops run on several threads, and the main thread's CPU time would
// overstate their rates.
template <typename... Args>
benchmark::internal::Benchmark* reg(const std::string& name, Args&&... args) {
  return benchmark::RegisterBenchmark(name.c_str(), std::forward<Args>(args)...)->UseRealTime();
}

void register_all() {
  for (const GemmCase& g : kGemmCases) {
    reg(std::string("gemm/") + g.name + "/sgemm_openblas", bm_sgemm, g);
    for (DType d : {DType::f32, DType::f16, DType::bf16}) {
      reg(std::string("gemm/") + g.name + "/ampctl_" + dtype_name(d), bm_gemm, g, d);
    }
  }
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    reg(std::string("linear_forward/256x784->1024/") + dtype_name(d), bm_linear_forward, 256, 784,
        1024, d);
    reg(std::string("linear_forward/256x1024->1024/") + dtype_name(d), bm_linear_forward, 256, 1024,
        1024, d);
  }
  // 1863690: the parameter count of 784-1024-1024-10; 16 M: well past the caches.
  for (int64_t n : {int64_t{1863690}, int64_t{1} << 24}) {
    reg("mem/memcpy_f32", bm_memcpy)->Arg(n);
    reg("mem/unscale_check_f32", bm_unscale)->Arg(n);
    reg("mem/sgd_momentum_f16copy", bm_sgd)->Arg(n);
    reg("mem/adam_f16copy", bm_adam)->Arg(n);
    reg("mem/cast_f32_to_f16", bm_cast, DType::f32, DType::f16)->Arg(n);
    reg("mem/cast_f16_to_f32", bm_cast, DType::f16, DType::f32)->Arg(n);
    reg("mem/cast_f32_to_bf16", bm_cast, DType::f32, DType::bf16)->Arg(n);
    reg("mem/cast_bf16_to_f32", bm_cast, DType::bf16, DType::f32)->Arg(n);
    reg("mem/add_f32_f16", bm_add)->Arg(n);
  }
  // A gradient of the quickstart MLP (a 256 x 256 weight, a 128 x 256 activation) and of the
  // fortunes GPT (a 768 x 512 activation): grad_amax's rounding against the plain cast.
  for (int64_t n : {int64_t{32768}, int64_t{65536}, int64_t{393216}}) {
    reg("mem/cast_f32_to_f16", bm_cast, DType::f32, DType::f16)->Arg(n);
    reg("mem/round_amax_f32_to_f16", bm_round_amax)->Arg(n);
  }
  reg("elementwise/relu_fwd_f16", bm_activation, nn::ActivationKind::relu, false)->Arg(262144);
  reg("elementwise/relu_bwd_f16", bm_activation, nn::ActivationKind::relu, true)->Arg(262144);
  // A GPT MLP's GELU: 768 tokens x 512 (the fortunes model).
  reg("elementwise/gelu_tanh_fwd_f16", bm_activation, nn::ActivationKind::gelu_tanh, false)
      ->Arg(393216);
  reg("elementwise/gelu_tanh_bwd_f16", bm_activation, nn::ActivationKind::gelu_tanh, true)
      ->Arg(393216);
  reg("elementwise/sum_rows_f16/256x1024", bm_sum_rows);
  // One layer's attention: fortunes (B 12 x H 4, T 64, hs 32) and shakespeare-char (64 x 6, T
  // 256, hs 64).
  for (bool composed : {false, true}) {
    const std::string tag = composed ? "/composed" : "/op";
    reg("attention/fortunes_48x64x32_f16" + tag, bm_attention, 48, 64, 32, composed);
    reg("attention/shakespeare_384x256x64_f16" + tag, bm_attention, 384, 256, 64, composed);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // --threads N (ours, before Google Benchmark's flags): the backend's thread count.
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0) {
      g_threads = std::atoi(argv[i + 1]);
      for (int j = i; j + 2 < argc + 0; ++j) argv[j] = argv[j + 2];
      argc -= 2;
      break;
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  register_all();
  benchmark::AddCustomContext("ampctl_backend", backend().description());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
