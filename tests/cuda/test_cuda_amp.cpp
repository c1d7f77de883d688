// The CUDA backend against the CPU reference: the amp ops (backend.h, "the amp ops"):
// non_finite_check_and_unscale_ (and its per-segment flags, and on misaligned views),
// non_finite_check_unscale_norm_, inv_scale and update_scale_ bitwise; global_norm and the
// unscale pass's norm within 1e-6 relative: both accumulate in double, in different orders (the
// GPU by a fixed tree), which moves the double sum by about 1e-16 relative; after the final
// rounding to float the two are at most one float ulp (2^-23 relative) apart. The harness and
// the comparison rules: cpu_vs_cuda.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/math/adam_math.h"
#include "ampctl/math/nn_math.h"
#include "cpu_vs_cuda.h"

namespace ampctl::test {
namespace {

// Tensors of the given sizes, dtypes cycling through f32, f16, bf16.
std::vector<HostInput> mixed_tensors(std::mt19937_64& rng, const std::vector<int64_t>& sizes,
                                     int emin, int emax, double special) {
  std::vector<HostInput> out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const DType d = kFloatDTypes[i % 3];
    out.push_back(
        from_values({sizes[i]}, d,
                    random_with_specials(rng, static_cast<size_t>(sizes[i]), emin, emax, special)));
  }
  return out;
}

std::vector<int64_t> many_sizes(std::mt19937_64& rng, size_t count) {
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < count; ++i) sizes.push_back(static_cast<int64_t>(rng() % 100));
  return sizes;
}

void add_global_norm_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    const char* name;
    std::function<std::vector<HostInput>(std::mt19937_64&)> make;
  };
  const std::vector<Variant> variants = {
      {"mixed",
       [](std::mt19937_64& rng) {
         return mixed_tensors(rng, {100003, 5000, 777, 0, 1}, -10, 10, 0.0);
       }},
      // More tensors than one kernel launch takes: the partial sums carry across launches.
      {"many",
       [](std::mt19937_64& rng) { return mixed_tensors(rng, many_sizes(rng, 300), -6, 6, 0.0); }},
      {"empty_list", [](std::mt19937_64&) { return std::vector<HostInput>{}; }},
      {"with_inf_nan",
       [](std::mt19937_64& rng) {
         return mixed_tensors(rng, {4096, 4096}, -4, 4, 0.001);
       }},
  };
  for (const Variant& v : variants) {
    CudaCase c;
    c.name = std::string("global_norm_") + v.name;
    c.make_inputs = v.make;
    c.run = [](Backend& be, std::vector<Tensor>& in) {
      Tensor out = be.empty({1}, DType::f32);
      be.global_norm(in, out);
      return std::vector<Tensor>{out};
    };
    c.specs = relative_specs(1e-6);
    cases.push_back(c);
  }
}

void add_unscale_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    const char* name;
    float inv_scale;
    float found_inf0;
    double special;
    bool many;
  };
  const Variant variants[] = {
      {"clean_pow2", 0x1p-16f, 0.0f, 0.0, false},
      {"clean_inexact", 1.0f / 3.0f, 0.0f, 0.0, false},
      {"with_inf_nan", 0x1p-16f, 0.0f, 0.002, false},
      {"check_only_with_inf_nan", 1.0f, 0.0f, 0.002, false},
      {"clean_keeps_found", 0.5f, 1.0f, 0.0, false},
      {"many_tensors", 0x1p-10f, 0.0f, 0.0, true},
  };
  for (const Variant& v : variants) {
    CudaCase c;
    c.name = std::string("non_finite_check_and_unscale_") + v.name;
    c.make_inputs = [v](std::mt19937_64& rng) {
      std::vector<HostInput> in;
      if (v.many) {
        // 200 tensors span three launches; one NaN in the last one must still be found.
        in = mixed_tensors(rng, many_sizes(rng, 200), -8, 8, 0.0);
        in.push_back(from_values({5}, DType::f16, {1.0f, 2.0f, NAN, 3.0f, 4.0f}));
      } else {
        in = mixed_tensors(rng, {20011, 4096, 3000, 1}, -14, 14, v.special);
      }
      in.push_back(scalar_input(v.found_inf0));
      in.push_back(scalar_input(v.inv_scale));
      return in;
    };
    c.run = [](Backend& be, std::vector<Tensor>& in) {
      const size_t n = in.size() - 2;
      be.non_finite_check_and_unscale_(std::span<const Tensor>(in.data(), n), in[n], in[n + 1]);
      return std::vector<Tensor>(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n + 1));
    };
    cases.push_back(c);
  }
}

// Attribution: the same pass with segment_starts / segment_found. Outputs: the tensors,
// found_inf and the per-segment flags (i32, bitwise). Segments cut across tensor boundaries and
// through the middle of 16-byte words, and the many-tensor case spans three launches, so the
// global element numbering (pack bases) is exercised; non-finite values sit in a few segments
// only, so a wrong lookup flags a wrong segment.
void add_unscale_segment_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    const char* name;
    float inv_scale;
    int kind;  // 0: mixed tensors, 1: one flat f32 arena cut like a model layout, 2: many tensors
  };
  const Variant variants[] = {
      {"segments_mixed", 0x1p-16f, 0},
      {"segments_mixed_check_only", 1.0f, 0},
      {"segments_flat_arena", 1.0f / 3.0f, 1},
      {"segments_flat_arena_check_only", 1.0f, 1},
      {"segments_many_tensors", 0x1p-10f, 2},
      // A scale below 1: finite values overflow when unscaled (f16 and bf16 here, f32 rarely), and
      // only the originally non-finite ones may be flagged (the separate marking launch).
      {"segments_inv_above_one_overflowing", 0x1p20f, 0},
      {"segments_inv_above_one_many_tensors", 3.0f, 2},
  };
  for (const Variant& v : variants) {
    CudaCase c;
    c.name = std::string("non_finite_check_and_unscale_") + v.name;
    c.make_inputs = [v](std::mt19937_64& rng) {
      std::vector<HostInput> in;
      if (v.kind == 0) {
        in = mixed_tensors(rng, {20011, 4096, 3000, 1, 777}, -14, 14, 0.0);
      } else if (v.kind == 1) {
        in = {from_values({(int64_t{1} << 20) + 13}, DType::f32,
                          random_values(rng, (size_t{1} << 20) + 13, -14, 14))};
      } else {
        in = mixed_tensors(rng, many_sizes(rng, 230), -8, 8, 0.0);
      }
      size_t total = 0;
      for (const HostInput& h : in) total += h.bits.size();
      // Segment starts: every tensor boundary, plus random cuts (mid-word ones included).
      std::vector<int32_t> starts = {0};
      size_t at = 0;
      for (const HostInput& h : in) {
        at += h.bits.size();
        if (at < total) starts.push_back(static_cast<int32_t>(at));
      }
      for (int i = 0; i < 40; ++i) starts.push_back(static_cast<int32_t>(1 + rng() % (total - 1)));
      std::sort(starts.begin(), starts.end());
      starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
      // inf / NaN at: a few random elements, the first and last element of some segments.
      std::vector<size_t> bad;
      for (int i = 0; i < 6; ++i) bad.push_back(rng() % total);
      for (size_t s = 1; s < starts.size(); s += 7) {
        bad.push_back(static_cast<size_t>(starts[s]));
        bad.push_back(static_cast<size_t>(starts[s]) - 1);
      }
      const float specials[] = {std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN()};
      for (size_t e : bad) {
        for (HostInput& h : in) {
          if (e < h.bits.size()) {
            h.bits[e] = encode(specials[rng() % 3], h.dtype);
            break;
          }
          e -= h.bits.size();
        }
      }
      in.push_back(scalar_input(0.0f));
      in.push_back(scalar_input(v.inv_scale));
      in.push_back(from_i32({static_cast<int64_t>(starts.size())}, starts));
      in.push_back(
          from_i32({static_cast<int64_t>(starts.size())}, std::vector<int32_t>(starts.size(), 0)));
      return in;
    };
    c.run = [](Backend& be, std::vector<Tensor>& in) {
      const size_t n = in.size() - 4;
      be.non_finite_check_and_unscale_(std::span<const Tensor>(in.data(), n), in[n], in[n + 1],
                                       in[n + 2], in[n + 3]);
      std::vector<Tensor> out(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n + 1));
      out.push_back(in[n + 3]);
      return out;
    };
    cases.push_back(c);
  }
}

// The check pass with the norm (non_finite_check_unscale_norm_): per variant two rows, the
// tensors, found_inf and segment flags bitwise (they must equal non_finite_check_and_unscale_'s),
// and the norm within global_norm's 1e-6 relative budget (both sides sum in double, in their own
// backend's global_norm order).
void add_unscale_norm_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    const char* name;
    float inv_scale;
    bool unscale;
    double special;
    int kind;  // 0: mixed tensors, 1: one flat f32 arena with segments, 2: many tensors
  };
  const Variant variants[] = {
      {"unscale_pow2", 0x1p-16f, true, 0.0, 0},
      {"check_only_inexact", 1.0f / 3.0f, false, 0.0, 0},
      {"unscale_inexact_arena_segments", 1.0f / 3.0f, true, 0.0, 1},
      {"check_only_arena_segments_with_inf", 0x1p-12f, false, 0.0005, 1},
      {"unscale_many_tensors", 0x1p-10f, true, 0.0, 2},
      {"unscale_with_inf_nan", 0x1p-16f, true, 0.002, 0},
  };
  for (const Variant& v : variants) {
    for (const bool norm_row : {false, true}) {
      CudaCase c;
      c.name = std::string("non_finite_check_unscale_norm_") + v.name + (norm_row ? "_norm" : "");
      c.make_inputs = [v](std::mt19937_64& rng) {
        std::vector<HostInput> in;
        if (v.kind == 1) {
          in = {from_values({(int64_t{1} << 20) + 13}, DType::f32,
                            random_with_specials(rng, (size_t{1} << 20) + 13, -14, 14, v.special))};
        } else if (v.kind == 2) {
          in = mixed_tensors(rng, many_sizes(rng, 200), -8, 8, 0.0);
        } else {
          in = mixed_tensors(rng, {20011, 4096, 3000, 1}, -14, 14, v.special);
        }
        const size_t total = in.size() == 1 ? in[0].bits.size() : 0;
        in.push_back(scalar_input(0.0f));
        in.push_back(scalar_input(v.inv_scale));
        in.push_back(scalar_input(0.0f));  // the norm
        if (v.kind == 1) {
          std::vector<int32_t> starts = {0};
          for (int i = 0; i < 30; ++i)
            starts.push_back(static_cast<int32_t>(1 + rng() % (total - 1)));
          std::sort(starts.begin(), starts.end());
          starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
          in.push_back(from_i32({static_cast<int64_t>(starts.size())}, starts));
          in.push_back(from_i32({static_cast<int64_t>(starts.size())},
                                std::vector<int32_t>(starts.size(), 0)));
        }
        return in;
      };
      c.run = [v, norm_row](Backend& be, std::vector<Tensor>& in) {
        const size_t extra = v.kind == 1 ? 5 : 3;
        const size_t n = in.size() - extra;
        const Tensor none;
        be.non_finite_check_unscale_norm_(std::span<const Tensor>(in.data(), n), in[n], in[n + 1],
                                          v.unscale, in[n + 2], v.kind == 1 ? in[n + 3] : none,
                                          v.kind == 1 ? in[n + 4] : none);
        if (norm_row) return std::vector<Tensor>{in[n + 2]};
        std::vector<Tensor> out(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n + 1));
        if (v.kind == 1) out.push_back(in[n + 4]);
        return out;
      };
      if (norm_row) c.specs = relative_specs(1e-6);
      cases.push_back(c);
    }
  }
}

void add_inv_scale_case(std::vector<CudaCase>& cases) {
  CudaCase c;
  c.name = "inv_scale";
  c.make_inputs = [](std::mt19937_64& rng) {
    std::vector<float> scales;
    for (int e = -149; e <= 127; e += 7) scales.push_back(std::ldexp(1.0f, e));
    for (float s : {3.0f, 65536.0f, 1e-40f, 3.4028235e38f, 0.0f, -0.0f, INFINITY, -2.0f, NAN}) {
      scales.push_back(s);
    }
    for (int i = 0; i < 100; ++i) scales.push_back(random_value(rng, -100, 100));
    for (int i = 0; i < 50; ++i)
      scales.push_back(bits_float(static_cast<uint32_t>(rng()) & 0x7fffffffu));
    return std::vector<HostInput>{
        from_values({static_cast<int64_t>(scales.size())}, DType::f32, scales)};
  };
  c.run = [](Backend& be, std::vector<Tensor>& in) {
    Tensor out = be.empty(in[0].shape(), DType::f32);
    for (size_t i = 0; i < in[0].numel(); ++i) be.inv_scale(in[0].view(i, {1}), out.view(i, {1}));
    return std::vector<Tensor>{out};
  };
  cases.push_back(c);
}

void add_update_scale_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    const char* name;
    amp::ScaleUpdateParams params;
    float scale0;
    double p_inf;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const Variant variants[] = {
      {"pytorch", {2.0, 0.5, 3, 1, 0.0f, inf}, 65536.0f, 0.3},
      {"hysteresis_min_max", {2.0, 0.25, 2, 3, 1.0f, 0x1p20f}, 1024.0f, 0.4},
      {"inexact_factors", {1.5, 0.3, 1, 1, 0.0f, inf}, 3.0f, 0.5},
      {"growth_overflows", {2.0, 0.5, 1, 1, 0.0f, inf}, 1e38f, 0.1},
      {"backoff_to_subnormal", {2.0, 0.5, 50, 1, 0.0f, inf}, 1e-36f, 0.9},
      // The scale rules (scaler.policy) on the golden file's settings (scaler_policies.json).
      {"deepspeed", {2.0, 0.5, 4, 1, 0.0f, inf, amp::ScalePolicy::deepspeed}, 65536.0f, 0.3},
      {"deepspeed_hysteresis",
       {2.0, 0.5, 3, 3, 0.0f, inf, amp::ScalePolicy::deepspeed},
       65536.0f,
       0.4},
      {"deepspeed_consecutive",
       {2.0, 0.5, 3, 2, 0.0f, inf, amp::ScalePolicy::deepspeed, true},
       65536.0f,
       0.4},
      {"deepspeed_floor_odd",
       {1.7, 0.3, 2, 2, 1.0f, inf, amp::ScalePolicy::deepspeed},
       256.0f,
       0.6},
      {"deepspeed_near_max",
       {2.0, 0.5, 1, 1, 0.0f, inf, amp::ScalePolicy::deepspeed},
       0x1p125f,
       0.05},
      {"megatron", {2.0, 0.5, 4, 1, 0.0f, inf, amp::ScalePolicy::megatron}, 65536.0f, 0.3},
      {"megatron_hysteresis_odd",
       {1.7, 0.3, 3, 2, 1.0f, inf, amp::ScalePolicy::megatron},
       1234.5f,
       0.4},
      {"megatron_near_max",
       {2.0, 0.5, 1, 1, 0.0f, inf, amp::ScalePolicy::megatron},
       0x1p125f,
       0.05},
      {"fairseq", {2.0, 0.5, 4, 1, 0.0f, inf, amp::ScalePolicy::fairseq}, 65536.0f, 0.3},
      {"fairseq_tolerance",
       {2.0, 0.5, 16, 1, 2.0f, inf, amp::ScalePolicy::fairseq, false, 0.25},
       65536.0f,
       0.2},
      {"fairseq_odd_near_max",
       {1.7, 0.3, 1, 1, 0.0f, inf, amp::ScalePolicy::fairseq},
       0x1p125f,
       0.1},
  };
  constexpr int kSteps = 200;
  for (const Variant& v : variants) {
    CudaCase c;
    c.name = std::string("update_scale_") + v.name;
    c.make_inputs = [v](std::mt19937_64& rng) {
      std::uniform_real_distribution<double> u(0.0, 1.0);
      std::vector<float> found(kSteps);
      for (float& f : found) f = u(rng) < v.p_inf ? 1.0f : 0.0f;
      return std::vector<HostInput>{
          from_values({kSteps}, DType::f32, found), scalar_input(v.scale0), from_i32({1}, {0}),
          from_i32({1}, {v.params.hysteresis}), from_i32({amp::kTrackerCount}, {0, -1, -1, 0})};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      Tensor found = be.empty({1}, DType::f32);
      Tensor scales = be.empty({kSteps}, DType::f32);
      Tensor growth = be.empty({kSteps}, DType::i32);
      Tensor hysteresis = be.empty({kSteps}, DType::i32);
      Tensor trackers = be.empty({kSteps * amp::kTrackerCount}, DType::i32);
      for (size_t i = 0; i < kSteps; ++i) {
        be.copy(found, in[0].view(i, {1}));
        be.update_scale_(in[1], in[2], in[3], in[4], found, v.params);
        be.copy(scales.view(i, {1}), in[1]);
        be.copy(growth.view(i, {1}), in[2]);
        be.copy(hysteresis.view(i, {1}), in[3]);
        be.copy(trackers.view(i * amp::kTrackerCount, {amp::kTrackerCount}), in[4]);
      }
      return std::vector<Tensor>{scales, growth, hysteresis, trackers};
    };
    cases.push_back(c);
  }
}
// scaler.policy auto (update_scale_auto_): the ring's entry, its max (one block of threads on the
// GPU, a loop on the CPU: a max, so the same bits) and the update, over 200 updates whose
// accumulators span many binades, with overflows and non-finite flags; rings shorter than, near
// and longer than the kernel's 256 threads; fp16's and bf16's ranges.
void add_update_scale_auto_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    const char* name;
    int32_t history, margin;
    float max_finite, scale0;
  };
  const Variant variants[] = {
      {"h1_m0", 1, 0, 65504.0f, 65536.0f},
      {"h7_m1", 7, 1, 65504.0f, 0x1p40f},
      {"h255_m2", 255, 2, 65504.0f, 0x1p-20f},
      {"h300_m1", 300, 1, 65504.0f, 65536.0f},
      {"h4096_m3_bf16", 4096, 3, 3.3895313892515355e38f, 1.0f},
  };
  constexpr int kSteps = 200;
  for (const Variant& v : variants) {
    CudaCase c;
    c.name = std::string("update_scale_auto_") + v.name;
    c.make_inputs = [v](std::mt19937_64& rng) {
      std::uniform_real_distribution<double> u(0.0, 1.0);
      std::vector<float> found(kSteps), words(2 * kSteps);
      for (int i = 0; i < kSteps; ++i) {
        // A measurement at the step's scale: 2^-30 .. 2^30 of the range, overflowing above it.
        const float raw = static_cast<float>(v.max_finite * std::exp2(60.0 * u(rng) - 30.0));
        const bool nonfinite = u(rng) < 0.05;
        found[i] = raw > v.max_finite || nonfinite ? 1.0f : 0.0f;
        words[2 * i] = raw;
        words[2 * i + 1] = nonfinite ? 1.0f : 0.0f;
      }
      return std::vector<HostInput>{
          from_values({kSteps}, DType::f32, found),
          from_values({2 * kSteps}, DType::f32, words),
          scalar_input(v.scale0),
          from_i32({1}, {0}),
          from_i32({amp::kTrackerCount}, {0, -1, -1, 0}),
          from_values({v.history}, DType::f32, std::vector<float>(v.history, 0.0f))};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      amp::ScaleUpdateParams p;
      p.policy = amp::ScalePolicy::automatic;
      p.amax_history = v.history;
      p.margin = v.margin;
      p.max_finite = v.max_finite;
      p.max_scale = std::numeric_limits<float>::infinity();
      Tensor found = be.empty({1}, DType::f32);
      Tensor scales = be.empty({kSteps}, DType::f32);
      Tensor growth = be.empty({kSteps}, DType::i32);
      Tensor trackers = be.empty({kSteps * amp::kTrackerCount}, DType::i32);
      for (size_t i = 0; i < kSteps; ++i) {
        be.copy(found, in[0].view(i, {1}));
        be.update_scale_auto_(in[2], in[3], in[4], found, in[1].view(2 * i, {2}), in[5], p);
        be.copy(scales.view(i, {1}), in[2]);
        be.copy(growth.view(i, {1}), in[3]);
        be.copy(trackers.view(i * amp::kTrackerCount, {amp::kTrackerCount}), in[4]);
      }
      return std::vector<Tensor>{scales, growth, trackers, in[5]};
    };
    cases.push_back(c);
  }
}
// Unscale over views that start 0..7 elements past a 16-byte boundary and end anywhere: the
// vectorised pass's scalar head and tail, and a body of 16-byte words.
void add_unscale_alignment_cases(std::vector<CudaCase>& cases) {
  for (float inv : {0x1p-12f, 1.0f / 3.0f, 1.0f}) {
    for (DType d : kFloatDTypes) {
      CudaCase c;
      c.name = "unscale_views_" + tag(d) +
               (inv == 1.0f       ? "_check_only"
                : inv == 0x1p-12f ? "_pow2"
                                  : "_inexact");
      c.make_inputs = [d, inv](std::mt19937_64& rng) {
        // Few specials: most views must be clean so found_inf's per-view values are tested.
        return std::vector<HostInput>{
            from_values({8 * 1000}, d, random_with_specials(rng, 8 * 1000, -14, 14, 0.0)),
            from_values({7}, d, {1.0f, 2.0f, NAN, 3.0f, INFINITY, 5.0f, 6.0f}), scalar_input(inv)};
      };
      c.run = [](Backend& be, std::vector<Tensor>& in) {
        Tensor found = be.zeros({9}, DType::f32);
        const size_t sizes[] = {1, 7, 8, 9, 15, 16, 17, 33, 100, 999};
        size_t start = 0;
        for (size_t k = 0; k < 8; ++k) {
          const Tensor view = in[0].view(start + k, {static_cast<int64_t>(sizes[k])});
          be.non_finite_check_and_unscale_(std::span<const Tensor>(&view, 1), found.view(k, {1}),
                                           in[2]);
          start += 1000;
        }
        // A non-finite element inside a misaligned view among clean ones.
        const Tensor views[] = {in[0].view(7001, {998}), in[1].view(1, {5})};
        be.non_finite_check_and_unscale_(views, found.view(8, {1}), in[2]);
        return std::vector<Tensor>{in[0], in[1], found};
      };
      cases.push_back(c);
    }
  }
}

std::vector<CudaCase> amp_cases() {
  std::vector<CudaCase> cases;
  add_global_norm_cases(cases);
  add_unscale_cases(cases);
  add_unscale_segment_cases(cases);
  add_unscale_norm_cases(cases);
  add_inv_scale_case(cases);
  add_update_scale_cases(cases);
  add_update_scale_auto_cases(cases);
  add_unscale_alignment_cases(cases);
  return cases;
}

AMPCTL_CPU_VS_CUDA_TABLE(Amp, amp_cases);

// ---- properties of the GPU alone ----

TEST(CudaDeterminism, RepeatedGlobalNormIsBitwiseIdentical) {
  AMPCTL_REQUIRE_GPU();
  std::mt19937_64 rng(8);
  std::vector<Tensor> tensors;
  for (DType d : kFloatDTypes)
    tensors.push_back(upload_values(gpu(), {1 << 20}, d, random_values(rng, 1 << 20, -8, 8)));
  Tensor out = gpu().empty({1}, DType::f32);
  gpu().global_norm(tensors, out);
  const uint32_t first = float_bits(gpu().read_scalar_f32(out));
  for (int rep = 0; rep < 5; ++rep) {
    gpu().global_norm(tensors, out);
    EXPECT_EQ(float_bits(gpu().read_scalar_f32(out)), first) << "repetition " << rep;
  }
}

}  // namespace
}  // namespace ampctl::test
