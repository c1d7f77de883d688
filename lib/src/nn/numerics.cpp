#include "ampctl/nn/numerics.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace ampctl::nn {
namespace {
constexpr size_t kNone = std::numeric_limits<size_t>::max();
}  // namespace

GradNumerics::GradNumerics(Backend& backend, size_t entries, DType lowp)
    : m_backend(&backend), m_entries(entries), m_lowp(lowp) {
  if (lowp != DType::f16 && lowp != DType::bf16) {
    throw Error{ErrorKind::invalid_argument,
                std::string("gradient numerics: nothing rounds in ") + dtype_name(lowp)};
  }
  m_amax = m_backend->zeros({numerics::kAmaxWords}, DType::f32);
  allocate();
}

void GradNumerics::allocate() {
  // Setup time only: the whole tensor is reallocated when a site is added, so the rows stay one
  // tensor (one fill and one download per sampled step).
  const size_t rows = m_entries + m_owner.size();
  m_counters = m_backend->zeros(
      {static_cast<int64_t>(rows), static_cast<int64_t>(numerics::kWords)}, DType::i32);
  m_rows.clear();
  for (size_t r = 0; r < rows; ++r) {
    m_rows.push_back(m_counters.view(r * numerics::kWords, {numerics::kWords}));
  }
  m_host.resize(rows * numerics::kWidth);
  m_pending.reserve(m_owner.size());
}

size_t GradNumerics::add_site() {
  const size_t site = m_owner.size();
  m_owner.push_back(kNone);
  allocate();
  return site;
}

Tensor GradNumerics::workspace(const Shape& shape) {
  return m_backend->zeros(shape, DType::f32);
}

void GradNumerics::begin(bool count) {
  m_backend->fill(m_amax, 0.0);
  if (count) m_backend->fill(m_counters, 0.0);
  m_pending.clear();
  m_counting = count;
  m_active = true;
}

void GradNumerics::end() {
  m_active = false;
  m_counting = false;
}

void GradNumerics::round(const Tensor& src, const Tensor& dst, size_t entry) {
  if (m_counting) m_backend->round_counted(src, dst, row(entry));
  m_backend->round_amax(src, dst, m_amax);
}

void GradNumerics::round_site(const Tensor& src, const Tensor& dst, size_t site) {
  if (m_counting) m_backend->round_counted(src, dst, row(m_entries + site));
  m_backend->round_amax(src, dst, m_amax);
  // A site rounded twice before a claim (two micro-batches never are: each backward claims) is
  // pending once.
  if (std::find(m_pending.begin(), m_pending.end(), site) == m_pending.end()) {
    m_pending.push_back(site);  // within the reserved capacity: no allocation
  }
}

namespace {

// An op's output dst through the hook: on a step that only measures the amax, fused() (the
// backend's op with the amax inside; nothing to attribute, so no site is left pending: claim()
// only assigns owners for read(), which follows counted steps alone); on a counted step,
// plain(out) into the f32 workspace's first numel(dst) values, then count(out), the counted
// rounding into dst.
template <typename Fused, typename Plain, typename Count>
void through_hook(bool counting, const Tensor& f32, const Tensor& dst, Fused&& fused, Plain&& plain,
                  Count&& count) {
  if (!counting) {
    fused();
    return;
  }
  const Tensor out = f32.view(0, dst.shape());
  plain(out);
  count(out);
}

}  // namespace

void GradNumerics::gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                        const Tensor& f32, const Tensor& dst, size_t entry) {
  through_hook(
      m_counting, f32, dst,
      [&] { m_backend->gemm_round_amax(a, trans_a, b, trans_b, dst, m_amax, f32); },
      [&](const Tensor& out) { m_backend->gemm(a, trans_a, b, trans_b, out); },
      [&](const Tensor& out) { round(out, dst, entry); });
}

void GradNumerics::gemm_site(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                             const Tensor& f32, const Tensor& dst, size_t site) {
  through_hook(
      m_counting, f32, dst,
      [&] { m_backend->gemm_round_amax(a, trans_a, b, trans_b, dst, m_amax, f32); },
      [&](const Tensor& out) { m_backend->gemm(a, trans_a, b, trans_b, out); },
      [&](const Tensor& out) { round_site(out, dst, site); });
}

void GradNumerics::gemm_batched_site(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                                     const Tensor& f32, const Tensor& dst, size_t site) {
  through_hook(
      m_counting, f32, dst,
      [&] { m_backend->gemm_batched_round_amax(a, trans_a, b, trans_b, dst, m_amax, f32); },
      [&](const Tensor& out) { m_backend->gemm_batched(a, trans_a, b, trans_b, out); },
      [&](const Tensor& out) { round_site(out, dst, site); });
}

void GradNumerics::activation_backward_site(ActivationKind kind, const Tensor& x, const Tensor& y,
                                            const Tensor& dy, const Tensor& f32, const Tensor& dx,
                                            size_t site) {
  through_hook(
      m_counting, f32, dx,
      [&] { m_backend->activation_backward_amax(kind, x, y, dy, dx, m_amax, f32); },
      [&](const Tensor& out) { m_backend->activation_backward(kind, x, y, dy, out); },
      [&](const Tensor& out) { round_site(out, dx, site); });
}

void GradNumerics::causal_softmax_backward_sites(const Tensor& probs, const Tensor& dprobs,
                                                 const Tensor& scale, const Tensor& f32,
                                                 const Tensor& dscores, size_t g_site,
                                                 size_t dscores_site) {
  // Counted: the op with scale 1 and no rounding gives g itself (g * 1 is g); dscores holds
  // round(g) until the second rounding.
  through_hook(
      m_counting, f32, dscores,
      [&] { m_backend->causal_softmax_backward_amax(probs, dprobs, scale, dscores, m_amax, f32); },
      [&](const Tensor& out) {
        m_backend->causal_softmax_backward(probs, dprobs, 1.0f, /*round_scaled=*/false, out);
      },
      [&](const Tensor& out) {
        round_site(out, dscores, g_site);
        m_backend->mul_scalar_tensor(dscores, scale, out);
        round_site(out, dscores, dscores_site);
      });
}

void GradNumerics::claim(size_t entry) {
  for (size_t site : m_pending) m_owner[site] = entry;
  m_pending.clear();
}

void GradNumerics::read(std::vector<int64_t>& out) {
  const size_t rows = m_entries + m_owner.size();
  m_host.resize(rows * numerics::kWidth);
  m_backend->download(m_host.data(), m_counters);
  out.assign(m_entries * numerics::kWidth, 0);
  auto add_row = [&](size_t entry, size_t r) {
    int64_t* dst = out.data() + entry * numerics::kWidth;
    const int64_t* src = m_host.data() + r * numerics::kWidth;
    for (int c = 0; c < numerics::kWidth; ++c) {
      dst[c] = c == numerics::kMaxBits ? std::max(dst[c], src[c]) : dst[c] + src[c];
    }
  };
  for (size_t e = 0; e < m_entries; ++e) add_row(e, e);
  for (size_t s = 0; s < m_owner.size(); ++s) {
    if (m_owner[s] != kNone) add_row(m_owner[s], m_entries + s);
  }
}

}  // namespace ampctl::nn
