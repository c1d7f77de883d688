// Gpt: forward and backward written out op by op (no autograd), each op where autocast runs it
// (docs/reference.md, "Precision", the GPT table). The comments name the nanoGPT line an op
// stands for; the roundings are the ops' own (backend.h).
#include "ampctl/nn/models/gpt.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "ampctl/core/checked.h"
#include "ampctl/core/philox.h"
#include "ampctl/nn/memory_estimate.h"
#include "ampctl/nn/models.h"
#include "ampctl/nn/numerics.h"

namespace ampctl::nn {
namespace {

constexpr double kInitStd = 0.02;

void check_positive(int64_t v, const char* what) {
  if (v < 1) {
    throw Error{ErrorKind::invalid_argument,
                std::string("gpt: ") + what + " must be >= 1, got " + std::to_string(v)};
  }
}

// Views of layout entry `entry` in the arenas (Module::bind's, for a model that is no Module).
ParamSlot slot_of(const FlatLayout& layout, const ParamArenas& arenas, size_t entry) {
  const FlatLayout::Entry& e = layout.entries().at(entry);
  ParamSlot slot;
  slot.entry = entry;
  slot.param = arenas.params.view(e.offset, e.shape);
  slot.grad = arenas.grads.view(e.offset, e.shape);
  if (arenas.lowp.defined()) slot.lowp = arenas.lowp.view(e.offset, e.shape);
  return slot;
}

// The leading elements of a flat buffer viewed as `shape`.
Tensor lead(const Tensor& flat, const Shape& shape) {
  return flat.view(0, shape);
}

// The parameter names in nanoGPT's state_dict order, as the constructor declares them.
std::vector<std::string> gpt_parameter_names(const GptOptions& m) {
  std::vector<std::string> names = {"transformer.wte.weight", "transformer.wpe.weight"};
  const auto norm = [&](const std::string& name) {
    names.push_back(name + ".weight");
    if (m.bias) names.push_back(name + ".bias");
  };
  // (Beyond 4096 layers no run fits anyway: the plan refuses it, and the list would be large.)
  for (int64_t i = 0; i < std::min<int64_t>(m.n_layer, 4096); ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    for (const char* part :
         {"ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"}) {
      norm(p + part);
    }
  }
  norm("transformer.ln_f");
  if (!m.tie_embeddings) names.push_back("lm_head.weight");
  return names;
}

// The memory estimate (memory_estimate.h): the parameter count, and the bytes of the activation
// buffers allocate_buffers makes for options.max_batch sequences of block_size positions.
ModelMemory estimate_gpt(const ModelOptions& o, const Backend* backend) {
  const GptOptions& m = o.gpt;
  const std::string ckey = "model.n_embd";
  const int64_t C = m.n_embd, L = m.n_layer, T = m.block_size, H = m.n_head;
  const int64_t V = std::max<int64_t>(o.out_features, 1);  // the vocabulary
  const int64_t bias = m.bias ? 1 : 0;
  auto mul = [&](int64_t a, int64_t b, const std::string& key) {
    return checked_mul(a, b, key, ErrorKind::config);
  };
  auto add = [&](int64_t a, int64_t b, const std::string& key) {
    return checked_add(a, b, key, ErrorKind::config);
  };
  ModelMemory e;
  int64_t params = 0;
  // One block: c_attn [3C, C], attn.c_proj [C, C], mlp.c_fc [4C, C], mlp.c_proj [C, 4C], two
  // LayerNorms, and the biases when model.bias; every tensor aligned as the arena lays it out.
  int64_t block = 0;
  for (int64_t k : {int64_t{3}, int64_t{1}, int64_t{4}, int64_t{4}}) {
    block = add(block, arena_aligned(mul(mul(k, C, ckey), C, ckey), ckey), ckey);
  }
  block = add(block, mul(arena_aligned(C, ckey), 2 + 2 * bias, ckey), ckey);
  if (m.bias) {
    for (int64_t k : {int64_t{3}, int64_t{1}, int64_t{4}, int64_t{1}}) {
      block = add(block, arena_aligned(mul(k, C, ckey), ckey), ckey);
    }
  }
  e.parameter_names = gpt_parameter_names(m);
  params = mul(block, L, "model.n_layer");
  params = add(params, arena_aligned(mul(V, C, ckey), ckey), ckey);                         // wte
  params = add(params, arena_aligned(mul(T, C, "model.block_size"), ckey), ckey);           // wpe
  params = add(params, mul(arena_aligned(C, ckey), 1 + bias, ckey), ckey);                  // ln_f
  if (!m.tie_embeddings) params = add(params, arena_aligned(mul(V, C, ckey), ckey), ckey);  // head
  // Activations: the buffers Gpt::allocate_buffers makes for B = data.batch_size sequences of
  // T = model.block_size positions, element for element (Gpt::buffer_bytes; the GPT memory
  // test compares the two). lo is the compute dtype's size; R = B T rows.
  const int64_t lo = o.compute == DType::f32 ? 4 : 2;
  const std::string tkey = "model.block_size", bkey = "data.batch_size";
  const int64_t B = o.max_batch;
  const int64_t R = mul(B, T, bkey);
  const int64_t RC = mul(R, C, ckey);
  const int64_t att = mul(mul(mul(B, H, bkey), T, tkey), T, tkey);  // B H T T
  // Attention without dropout is the backend's op pair, whose buffers the backend sizes (fused
  // on CUDA for f16/bf16: no T x T); with dropout the GPT composes the materialised ops.
  const bool attention_op = !(m.dropout > 0.0);
  AttentionSizes as;
  if (attention_op) {
    const DType act = o.compute;
    if (backend != nullptr) {
      as = backend->attention_workspace(mul(B, H, bkey), T, C / std::max<int64_t>(H, 1), act);
    } else {
      // Backend's default (the CPU's): probs f32, att in the compute dtype, two T x T scratches.
      as.saved_f32 = att;
      as.saved_lowp = act == DType::f32 ? 0 : att;
      as.scratch_lowp = mul(att, 2, tkey);
    }
  }
  // Per block: x_in, x_mid (f32); ln1, q, k, v, yrows, ln2 (lo); fc, gelu (4C, lo); mean and
  // rstd of both norms (f32, R each); then attention's: y_heads (lo) and the backend's saved
  // buffers, or probs (f32) and att (lo).
  int64_t f32_elems = add(mul(2, RC, ckey), mul(4, R, bkey), ckey);
  int64_t lo_elems = mul(14, RC, ckey);
  if (attention_op) {
    f32_elems = add(f32_elems, as.saved_f32, tkey);
    lo_elems = add(add(lo_elems, RC, ckey), as.saved_lowp, tkey);
  } else {
    f32_elems = add(f32_elems, att, tkey);
    lo_elems = add(lo_elems, att, tkey);
  }
  f32_elems = mul(f32_elems, L, "model.n_layer");
  lo_elems = mul(lo_elems, L, "model.n_layer");
  // Shared: the embedding/last stream, g and t (f32); ln_f's statistics and the token ids (4
  // bytes, R each); lnf, branch, branch_drop, yheads, dc, dc2, dyh, dq, dk, dv (lo), d4a, d4b
  // (4C), dqkv (3C); the logits [R, V] (dlogits are written over them); attention's shared
  // scratch or the materialised backward's datt, dscores (lo) and dprobs (f32); LayerNorm's
  // zero bias and dbeta sink (f32 C); the lowp weight-gradient workspaces (not in fp32) and the
  // bias-gradient ones.
  f32_elems = add(f32_elems, add(mul(3, RC, ckey), mul(3, R, bkey), ckey), ckey);
  lo_elems = add(lo_elems, mul(21, RC, ckey), ckey);
  lo_elems = add(lo_elems, mul(R, V, "data.train (vocabulary)"), ckey);
  if (attention_op) {
    f32_elems = add(f32_elems, as.scratch_f32, tkey);
    lo_elems = add(lo_elems, as.scratch_lowp, tkey);
  } else {
    f32_elems = add(f32_elems, att, tkey);
    lo_elems = add(lo_elems, mul(2, att, tkey), tkey);
  }
  f32_elems = add(f32_elems, mul(2, C, ckey), ckey);
  if (lo != 4) {
    lo_elems = add(lo_elems, mul(mul(12, C, ckey), C, ckey), ckey);
    lo_elems = add(lo_elems, mul(V, C, ckey), ckey);
  }
  lo_elems = add(lo_elems, mul(8, C, ckey), ckey);
  e.parameters = params;
  e.activation_bytes = add(mul(f32_elems, 4, ckey), mul(lo_elems, lo, ckey), ckey);
  e.parameter_key = "model.n_embd (bytes)";
  // A GPT's activations grow with batch x block_size x (widths + heads x block_size), and with
  // the vocabulary through the logits; its parameters with n_embd, and with the vocabulary
  // through the embedding and head. The key named is what drives the larger part.
  const char* vocab_key = "the vocabulary (data.train.vocab_size, or a text's characters)";
  const int64_t vocab_params = mul(mul(V, C, ckey), m.tie_embeddings ? 1 : 2, ckey);
  e.model_key = vocab_params > params - vocab_params ? vocab_key : "model.n_embd";
  // (The logits [B T, V]: the vocabulary when it is their larger factor.)
  e.activation_key = mul(mul(R, V, bkey), lo, bkey) > e.activation_bytes / 2 && V > R
                         ? vocab_key
                         : (B > T ? "data.batch_size" : "model.block_size");
  return e;
}

}  // namespace

double gpt_normal(uint64_t seed, uint64_t stream, uint64_t j) {
  const double u1 = philox_uniform(philox_u32(seed, stream, 2 * j));
  const double u2 = philox_uniform(philox_u32(seed, stream, 2 * j + 1));
  return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

Gpt::Gpt(Backend& backend, const ModelOptions& options)
    : Model(backend, options, ModelType::gpt),
      m_precision(options.precision),
      m_opt(options.gpt),
      m_rng{options.seed, 0},
      m_loss(LossKind::cross_entropy, options.out_features) {
  check_positive(m_opt.n_layer, "n_layer");
  check_positive(m_opt.n_head, "n_head");
  check_positive(m_opt.n_embd, "n_embd");
  check_positive(m_opt.block_size, "block_size");
  if (m_opt.n_embd % m_opt.n_head != 0) {
    throw Error{ErrorKind::invalid_argument, "gpt: n_head (" + std::to_string(m_opt.n_head) +
                                                 ") must divide n_embd (" +
                                                 std::to_string(m_opt.n_embd) + ")"};
  }
  if (!(m_opt.dropout >= 0.0 && m_opt.dropout < 1.0)) {
    throw Error{ErrorKind::invalid_argument,
                "gpt: dropout must be in [0, 1), got " + std::to_string(m_opt.dropout)};
  }
  if (options.loss != LossKind::cross_entropy) {
    throw Error{ErrorKind::invalid_argument, "gpt: the language model's loss is cross_entropy"};
  }
  if (m_in != m_out) {
    throw Error{ErrorKind::invalid_argument,
                "gpt: in_features and out_features are both the vocabulary size, got " +
                    std::to_string(m_in) + " and " + std::to_string(m_out)};
  }
  m_head_size = m_opt.n_embd / m_opt.n_head;
  m_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(m_head_size)));

  const int64_t C = m_opt.n_embd, V = m_out;
  const bool bias = m_opt.bias;
  // Declared in nanoGPT's state_dict order.
  m_wte_entry = m_layout.entries().size();
  m_layout.add("transformer.wte.weight", {V, C});
  m_wpe_entry = m_layout.entries().size();
  m_layout.add("transformer.wpe.weight", {m_opt.block_size, C});
  m_layers.resize(static_cast<size_t>(m_opt.n_layer));
  for (size_t i = 0; i < m_layers.size(); ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    Layer& l = m_layers[i];
    l.ln_1 = declare_norm(p + "ln_1");
    l.c_attn = declare_proj(p + "attn.c_attn", 3 * C, C, bias);
    l.attn_proj = declare_proj(p + "attn.c_proj", C, C, bias);
    l.ln_2 = declare_norm(p + "ln_2");
    l.c_fc = declare_proj(p + "mlp.c_fc", 4 * C, C, bias);
    l.mlp_proj = declare_proj(p + "mlp.c_proj", C, 4 * C, bias);
  }
  m_ln_f = declare_norm("transformer.ln_f");
  m_head_entry = m_wte_entry;
  if (!m_opt.tie_embeddings) {
    m_head_entry = m_layout.entries().size();
    m_layout.add("lm_head.weight", {V, C});
  }

  allocate_params([&](std::span<float> host) { init_params(host, options.seed); });
  m_wte = slot_of(m_layout, m_arenas, m_wte_entry);
  m_wpe = slot_of(m_layout, m_arenas, m_wpe_entry);
  m_head = slot_of(m_layout, m_arenas, m_head_entry);
  for (Layer& l : m_layers) {
    bind(l.ln_1);
    bind(l.c_attn);
    bind(l.attn_proj);
    bind(l.ln_2);
    bind(l.c_fc);
    bind(l.mlp_proj);
  }
  bind(m_ln_f);
  allocate_buffers();
  setup_numerics();
  // dlogits over the logits (llm.c's classifier): nothing reads the logits after loss() with a
  // grad_scale (the step goes on to backward; evaluation and sampling pass no grad_scale).
  m_loss.setup_in_place(backend, m_logits_buf.view(0, {m_max_batch * m_opt.block_size, m_out}),
                        m_num);
}

void Gpt::setup_numerics() {
  Backend& b = *m_backend;
  const int64_t C = m_opt.n_embd, V = m_out, T = m_opt.block_size, H = m_opt.n_head;
  const int64_t rows = m_max_batch * T, att = m_max_batch * H * T * T;
  // A fused op whose intermediate rounding has no f32 output to take (Backend::
  // linear_gelu_fused; an attention whose workspace is not the default composition's) leaves
  // the model uncountable: it says so (roundings_instrumented) instead of counting part of it.
  bool fused = m_act != DType::f32 && b.linear_gelu_fused(m_act, 4 * C);
  if (m_attention_op) {
    const AttentionSizes as = b.attention_workspace(m_max_batch * H, T, m_head_size, m_act);
    const AttentionSizes def =
        b.Backend::attention_workspace(m_max_batch * H, T, m_head_size, m_act);
    fused = fused || as.saved_f32 != def.saved_f32 || as.saved_lowp != def.saved_lowp ||
            as.scratch_f32 != def.scratch_f32 || as.scratch_lowp != def.scratch_lowp;
  }
  m_countable = !fused;
  m_num = m_countable ? m_arenas.numerics : nullptr;
  if (m_num == nullptr) return;
  // One f32 workspace, written and rounded by one op at a time: the largest output of the
  // backward (dlogits excepted: the loss has its own).
  const int64_t ws = std::max({rows * 4 * C, V * C, 4 * C * C, att, rows * C});
  m_nws = m_num->workspace({ws});
  m_nscale = b.from_host({1}, DType::f32, &m_scale);
  m_head_dx_site = m_num->add_site();
  m_sites.resize(m_layers.size());
  for (Sites& s : m_sites) {
    for (size_t* site : {&s.cast2, &s.drop2, &s.d4a, &s.d4b, &s.fc_dx, &s.cast1, &s.drop1,
                         &s.proj_dx, &s.datt, &s.dv, &s.g, &s.dscores, &s.dq, &s.dk, &s.attn_dx}) {
      *site = m_num->add_site();
    }
  }
}

void Gpt::settle(const Tensor& f32, const Tensor& dst, size_t site) {
  if (m_counted) m_num->round_site(f32, dst, site);
}

void Gpt::settle_own(const Tensor& f32, const Tensor& dst, size_t entry) {
  if (m_counted) m_num->round(f32, dst, entry);
}

void Gpt::gemm_own(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& dst,
                   size_t entry) {
  if (m_counted) {
    m_num->gemm(a, trans_a, b, trans_b, m_nws, dst, entry);
  } else {
    m_backend->gemm(a, trans_a, b, trans_b, dst);
  }
}

void Gpt::gemm_site(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& dst,
                    size_t site) {
  if (m_counted) {
    m_num->gemm_site(a, trans_a, b, trans_b, m_nws, dst, site);
  } else {
    m_backend->gemm(a, trans_a, b, trans_b, dst);
  }
}

Gpt::Proj Gpt::declare_proj(const std::string& name, int64_t out, int64_t in, bool bias) {
  Proj p;
  p.w_entry = m_layout.entries().size();
  m_layout.add(name + ".weight", {out, in});
  p.has_bias = bias;
  if (bias) {
    p.b_entry = m_layout.entries().size();
    m_layout.add(name + ".bias", {out});
  }
  return p;
}

Gpt::Norm Gpt::declare_norm(const std::string& name) {
  Norm n;
  n.w_entry = m_layout.entries().size();
  m_layout.add(name + ".weight", {m_opt.n_embd});
  n.has_bias = m_opt.bias;
  if (n.has_bias) {
    n.b_entry = m_layout.entries().size();
    m_layout.add(name + ".bias", {m_opt.n_embd});
  }
  return n;
}

void Gpt::bind(Proj& p) {
  p.w = slot_of(m_layout, m_arenas, p.w_entry);
  if (p.has_bias) p.b = slot_of(m_layout, m_arenas, p.b_entry);
}

void Gpt::bind(Norm& n) {
  n.w = slot_of(m_layout, m_arenas, n.w_entry);
  if (n.has_bias) n.b = slot_of(m_layout, m_arenas, n.b_entry);
}

void Gpt::init_params(std::span<float> host, uint64_t seed) const {
  // Biases stay at the arena's zeros; LayerNorm weights are ones; every other tensor (the
  // embeddings, Linear weights, the untied head) is normal, c_proj's scaled for the residual
  // sum over 2 L branches.
  const double proj_std = kInitStd / std::sqrt(2.0 * static_cast<double>(m_opt.n_layer));
  const std::vector<FlatLayout::Entry>& entries = m_layout.entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    const FlatLayout::Entry& e = entries[i];
    float* out = host.data() + e.offset;
    const bool norm = e.name.find(".ln_") != std::string::npos;
    if (e.name.ends_with(".bias")) continue;
    if (norm && e.name.ends_with(".weight")) {
      std::fill_n(out, e.numel, 1.0f);
      continue;
    }
    const double std = e.name.ends_with("c_proj.weight") ? proj_std : kInitStd;
    for (size_t j = 0; j < e.numel; ++j) {
      out[j] = static_cast<float>(std * gpt_normal(seed, init_stream(i), j));
    }
  }
}

void Gpt::allocate_buffers() {
  Backend& b = *m_backend;
  const int64_t C = m_opt.n_embd, V = m_out, T = m_opt.block_size, H = m_opt.n_head;
  const int64_t rows = m_max_batch * T;
  const int64_t att = m_max_batch * H * T * T;
  const DType a = m_act;
  const bool drop = m_opt.dropout > 0.0;
  // Every buffer goes through these two (and the token ids below), which count its bytes
  // (buffer_bytes: what estimate_gpt above, Gpt::estimate, must reproduce).
  m_buffer_bytes = 0;
  auto f32 = [&](int64_t n) {
    m_buffer_bytes += static_cast<uint64_t>(n) * 4;
    return b.zeros({n}, DType::f32);
  };
  auto act = [&](int64_t n) {
    m_buffer_bytes += static_cast<uint64_t>(n) * dtype_size(a);
    return b.zeros({n}, a);
  };
  auto maybe = [](int64_t n, auto make) { return n > 0 ? make(n) : Tensor{}; };
  // Without dropout, attention is the backend's op pair: what it keeps is its own business
  // (attention_workspace, for the largest batch and block; the sizes grow with both).
  m_attention_op = !drop;
  const AttentionSizes as = b.attention_workspace(m_max_batch * H, T, m_head_size, a);
  for (Layer& l : m_layers) {
    l.x_in = f32(rows * C);
    l.ln1 = act(rows * C);
    l.mean1 = f32(rows);
    l.rstd1 = f32(rows);
    l.q = act(rows * C);
    l.k = act(rows * C);
    l.v = act(rows * C);
    if (m_attention_op) {
      l.y_heads = act(rows * C);
      l.attn_saved.saved_f32 = maybe(as.saved_f32, f32);
      l.attn_saved.saved_lowp = maybe(as.saved_lowp, act);
    } else {
      l.probs = f32(att);
      l.att = act(att);  // what att @ v reads: the dropped-out probabilities, compute dtype
    }
    l.yrows = act(rows * C);
    l.x_mid = f32(rows * C);
    l.ln2 = act(rows * C);
    l.mean2 = f32(rows);
    l.rstd2 = f32(rows);
    l.fc = act(rows * 4 * C);
    l.gelu = act(rows * 4 * C);
  }
  m_emb = f32(rows * C);
  m_token_buf = b.zeros({rows}, DType::i32);
  m_buffer_bytes += static_cast<uint64_t>(rows) * 4;
  m_lnf = act(rows * C);
  m_meanf = f32(rows);
  m_rstdf = f32(rows);
  // m_emb also holds the stream after the last block (ln_f's input): the embedding is dead by then.
  m_logits_buf = act(rows * V);
  m_branch = act(rows * C);
  m_branch_drop = act(rows * C);
  m_yheads = act(rows * C);
  m_g = f32(rows * C);
  m_t = f32(rows * C);
  m_dc = act(rows * C);
  m_dc2 = act(rows * C);
  m_d4a = act(rows * 4 * C);
  m_d4b = act(rows * 4 * C);
  m_dqkv = act(rows * 3 * C);
  m_dyh = act(rows * C);
  m_dq = act(rows * C);
  m_dk = act(rows * C);
  m_dv = act(rows * C);
  if (m_attention_op) {
    m_attn_scratch_f32 = maybe(as.scratch_f32, f32);
    m_attn_scratch_lowp = maybe(as.scratch_lowp, act);
  } else {
    m_datt = act(att);
    m_dscores = act(att);
    m_dprobs = f32(att);
  }
  m_zero_c = f32(C);
  m_dbeta_sink = f32(C);
  if (a != DType::f32) {
    m_ws_attn = act(3 * C * C).view(0, {3 * C, C});
    m_ws_proj = act(C * C).view(0, {C, C});
    m_ws_fc = act(4 * C * C).view(0, {4 * C, C});
    m_ws_mproj = act(4 * C * C).view(0, {C, 4 * C});
    m_ws_head = act(V * C).view(0, {V, C});
  }
  m_wsb_3c = act(3 * C);
  m_wsb_c = act(C);
  m_wsb_4c = act(4 * C);
}

std::string Gpt::summary() const {
  std::ostringstream os;
  const std::vector<FlatLayout::Entry>& entries = m_layout.entries();
  // One line per module: the name before the last '.', its parameters and their count.
  size_t i = 0;
  while (i < entries.size()) {
    const std::string module = entries[i].name.substr(0, entries[i].name.rfind('.'));
    os << module << " ";
    int64_t count = 0;
    const char* sep = " ";
    for (; i < entries.size() && entries[i].name.substr(0, entries[i].name.rfind('.')) == module;
         ++i) {
      const FlatLayout::Entry& e = entries[i];
      os << sep << e.name.substr(e.name.rfind('.') + 1) << ' ' << shape_str(e.shape);
      sep = ", ";
      count += static_cast<int64_t>(e.numel);
    }
    os << "  params " << count << '\n';
  }
  if (m_opt.tie_embeddings) os << "lm_head  weight = transformer.wte.weight (tied)\n";
  os << "GPT(n_layer=" << m_opt.n_layer << ", n_head=" << m_opt.n_head
     << ", n_embd=" << m_opt.n_embd << ", block_size=" << m_opt.block_size
     << ", vocab_size=" << m_out << ", dropout=" << m_opt.dropout
     << ", bias=" << (m_opt.bias ? "True" : "False") << ")\n";
  os << "total params " << num_params() << " (" << m_precision << ": " << dtype_name(m_act)
     << " matrix products, f32 residual stream and master weights)\n";
  return os.str();
}

void Gpt::proj_forward(const Proj& p, const Tensor& x, const Tensor& y) {
  m_backend->linear_forward(x, p.w.compute(), p.has_bias ? p.b.compute() : Tensor{}, y);
}

void Gpt::proj_backward(const Proj& p, const Tensor& dy, const Tensor& x, const Tensor& dx,
                        size_t dx_site) {
  Backend& b = *m_backend;
  const int64_t out = p.w.param.dim(0);
  const Tensor& ws = out == p.w.param.dim(1)   ? m_ws_proj
                     : out == 3 * m_opt.n_embd ? m_ws_attn
                     : out == 4 * m_opt.n_embd ? m_ws_fc
                                               : m_ws_mproj;
  // A counted step: dy's roundings count for this weight; each product goes through the hook
  // (gemm_own / gemm_site, f32_or / settle: nn/numerics.h).
  if (m_counted) m_num->claim(p.w_entry);
  if (ws.defined()) {
    // autocast: the weight gradient is a lowp product, widened when AccumulateGrad adds it.
    gemm_own(dy, /*trans_a=*/true, x, /*trans_b=*/false, ws, p.w_entry);
    b.add_(p.w.grad, ws);
  } else {
    b.gemm(dy, /*trans_a=*/true, x, /*trans_b=*/false, p.w.grad, 1.0f, 1.0f);
  }
  if (p.has_bias) {
    const Tensor& wsb = out == 3 * m_opt.n_embd   ? m_wsb_3c
                        : out == 4 * m_opt.n_embd ? m_wsb_4c
                                                  : m_wsb_c;
    const Tensor o = f32_or(wsb);
    b.sum_rows(dy, o);
    settle_own(o, wsb, p.b_entry);
    b.add_(p.b.grad, wsb);
  }
  if (dx.defined()) gemm_site(dy, /*trans_a=*/false, p.w.compute(), /*trans_b=*/false, dx, dx_site);
}

void Gpt::norm_forward(const Norm& n, const Tensor& x, const Tensor& y, const Tensor& mean,
                       const Tensor& rstd) {
  // autocast's fp32 list: the f32 masters, statistics in float; y is rounded to the compute
  // dtype, where autocast's next matrix product would cast it.
  m_backend->layer_norm_forward(x, n.w.param, n.has_bias ? n.b.param : m_zero_c, y, mean, rstd,
                                LayerNorm::kEps);
}

void Gpt::norm_backward(const Norm& n, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dy, const Tensor& dx) {
  m_backend->layer_norm_backward(x, n.w.param, mean, rstd, dy, dx, n.w.grad,
                                 n.has_bias ? n.b.grad : m_dbeta_sink);
}

void Gpt::residual_norm_forward(const Norm& n, const Tensor& x, const Tensor& r, const Tensor& sum,
                                const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  m_backend->residual_layer_norm_forward(x, r, sum, n.w.param, n.has_bias ? n.b.param : m_zero_c, y,
                                         mean, rstd, LayerNorm::kEps);
}

void Gpt::norm_backward_add(const Norm& n, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                            const Tensor& dy, const Tensor& dx) {
  m_backend->layer_norm_backward_accumulate(x, n.w.param, mean, rstd, dy, dx, n.w.grad,
                                            n.has_bias ? n.b.grad : m_dbeta_sink, m_t);
}

AttentionBuffers Gpt::attention_buffers(const Layer& l) const {
  AttentionBuffers buf = l.attn_saved;
  buf.scratch_f32 = m_attn_scratch_f32;
  buf.scratch_lowp = m_attn_scratch_lowp;
  return buf;
}

bool Gpt::dropout_fwd(const Tensor& x, const Tensor& y, bool training, uint64_t& stream) {
  if (!(training && m_opt.dropout > 0.0)) return false;
  stream = dropout_stream(m_rng.calls++);
  m_backend->dropout_forward(x, y, static_cast<float>(m_opt.dropout), m_rng.seed, stream);
  return true;
}

const Tensor& Gpt::forward(const Tensor& input, int64_t batch, bool training) {
  if (batch < 1 || batch > m_max_batch) {
    throw Error{ErrorKind::invalid_argument, "gpt forward: batch " + std::to_string(batch) +
                                                 " outside [1, " + std::to_string(m_max_batch) +
                                                 "]"};
  }
  if (!input.defined() || input.rank() != 2 || input.dtype() != DType::i32 ||
      input.dim(0) < batch || input.dim(1) < 1 || input.dim(1) > m_opt.block_size) {
    throw Error{ErrorKind::invalid_argument,
                "gpt forward: expected i32 token ids [>= " + std::to_string(batch) + ", 1.." +
                    std::to_string(m_opt.block_size) + "], got " +
                    (input.defined() ? input.describe() : std::string("none"))};
  }
  if (input.device() != m_backend->device()) {
    throw Error{ErrorKind::invalid_argument, "gpt forward input " + input.describe() +
                                                 " is not on " + m_backend->device().str()};
  }
  m_seeded = false;
  m_B = 0;  // stays 0 if an op throws
  m_dropped = training && m_opt.dropout > 0.0;
  Backend& b = *m_backend;
  const int64_t B = batch, T = input.dim(1), C = m_opt.n_embd, H = m_opt.n_head;
  const int64_t hs = m_head_size, N = B * T, V = m_out;
  const Shape rc{N, C}, heads{B * H, T, hs}, att{B * H, T, T};
  // A copy of the ids: backward never depends on the caller's buffer.
  m_tokens = lead(m_token_buf, {B, T});
  b.copy(m_tokens, input.view(0, {B, T}));

  // x = drop(wte(idx) + wpe(pos)): fp32 (embeddings are on no autocast list). Without dropout
  // the sum is written straight into the first block's input.
  const Tensor emb = lead(m_emb, rc);
  const Tensor x0 = lead(m_layers[0].x_in, rc);
  if (m_dropped) {
    b.embedding_forward(m_tokens, m_wte.param, m_wpe.param, emb);
    dropout_fwd(emb, x0, training, m_s_emb);
  } else {
    b.embedding_forward(m_tokens, m_wte.param, m_wpe.param, x0);
  }

  const Tensor branch = lead(m_branch, rc);
  const Tensor branch_drop = lead(m_branch_drop, rc);
  for (size_t i = 0; i < m_layers.size(); ++i) {
    Layer& l = m_layers[i];
    const Tensor x = lead(l.x_in, rc);
    const Tensor x_mid = lead(l.x_mid, rc);
    const Tensor x_out = lead(i + 1 < m_layers.size() ? m_layers[i + 1].x_in : m_emb, rc);
    // ---- attention: x = x + attn(ln_1(x)) ----
    // ln_1 of the first block reads the embedding; every later one was formed with the previous
    // block's last residual add (below).
    const Tensor ln1 = lead(l.ln1, rc);
    if (i == 0) norm_forward(l.ln_1, x, ln1, lead(l.mean1, {N}), lead(l.rstd1, {N}));
    const Tensor qkv = lead(m_dqkv, {N, 3 * C});  // c_attn's output, dead once split in heads
    proj_forward(l.c_attn, ln1, qkv);
    const Tensor q = lead(l.q, heads), k = lead(l.k, heads), v = lead(l.v, heads);
    b.heads_from_rows(qkv, 0, q.view(0, {B, H, T, hs}));
    b.heads_from_rows(qkv, C, k.view(0, {B, H, T, hs}));
    b.heads_from_rows(qkv, 2 * C, v.view(0, {B, H, T, hs}));
    // att = softmax(masked((q @ k^T) * scale)): the product and the scaling in the compute
    // dtype, the softmax in fp32 (autocast's fp32 list) with an f32 output; y = att @ v.
    const Tensor yh = lead(m_attention_op ? l.y_heads : m_yheads, heads);
    if (m_attention_op) {
      b.attention_forward(q, k, v, m_scale, yh, attention_buffers(l));
    } else {
      const Tensor scores = lead(m_dscores, att);
      b.gemm_batched(q, false, k, true, scores);
      const Tensor probs = lead(l.probs, att);
      b.causal_softmax_forward(scores, m_scale, /*round_scaled=*/true, probs);
      // attn_dropout in fp32; att @ v casts its fp32 operand to the compute dtype.
      const Tensor a = lead(l.att, att);
      if (!dropout_fwd(probs, a, training, l.s_attn)) b.cast(probs, a);
      b.gemm_batched(a, false, v, false, yh);
    }
    const Tensor yrows = lead(l.yrows, rc);
    b.heads_to_rows(yh.view(0, {B, H, T, hs}), yrows, 0);
    proj_forward(l.attn_proj, yrows, branch);
    // x + resid_dropout(y): dropout in the compute dtype, the add promoted to fp32.
    const Tensor& r1 =
        dropout_fwd(branch, branch_drop, training, l.s_resid1) ? branch_drop : branch;
    // ---- MLP: x = x + mlp(ln_2(x)) ----
    // x_mid = x + r1 and ln_2(x_mid) in one op.
    const Tensor ln2 = lead(l.ln2, rc);
    residual_norm_forward(l.ln_2, x, r1, x_mid, ln2, lead(l.mean2, {N}), lead(l.rstd2, {N}));
    const Tensor fc = lead(l.fc, {N, 4 * C}), gelu = lead(l.gelu, {N, 4 * C});
    // c_fc and GELU as one op pair: linear_forward then activation_forward, unless the backend
    // fuses them (Backend::linear_gelu_forward); fc keeps the pre-activation for backward.
    b.linear_gelu_forward(ln2, l.c_fc.w.compute(), l.c_fc.has_bias ? l.c_fc.b.compute() : Tensor{},
                          fc, gelu);
    proj_forward(l.mlp_proj, gelu, branch);
    const Tensor& r2 =
        dropout_fwd(branch, branch_drop, training, l.s_resid2) ? branch_drop : branch;
    // x_out = x_mid + r2 with the norm that reads it: the next block's ln_1, or ln_f after the
    // last block (whose x_out, ln_f's input, lives in m_emb: the embedding is dead by then).
    if (i + 1 < m_layers.size()) {
      Layer& next = m_layers[i + 1];
      residual_norm_forward(next.ln_1, x_mid, r2, x_out, lead(next.ln1, rc), lead(next.mean1, {N}),
                            lead(next.rstd1, {N}));
    } else {
      residual_norm_forward(m_ln_f, x_mid, r2, x_out, lead(m_lnf, rc), lead(m_meanf, {N}),
                            lead(m_rstdf, {N}));
    }
  }
  // logits = lm_head(ln_f(x)), ln_f formed with the last residual add above.
  const Tensor lnf = lead(m_lnf, rc);
  m_logits = lead(m_logits_buf, {N, V});
  b.linear_forward(lnf, m_head.compute(), Tensor{}, m_logits);
  m_B = B;
  m_T = T;
  return m_logits;
}

void Gpt::loss(const Tensor& targets, int64_t batch, const Tensor& loss_out,
               const Tensor& correct_out, const Tensor& grad_scale) {
  check_loss_batch("gpt", "sequences", batch, m_B);
  m_seeded = false;
  m_seeded = m_loss.forward(m_logits, targets, m_B * m_T, loss_out, correct_out, grad_scale);
}

void Gpt::backward(int64_t batch) {
  check_backward_batch("gpt", "sequences", m_seeded, batch, m_B);
  m_seeded = false;
  Backend& b = *m_backend;
  const int64_t B = m_B, T = m_T, C = m_opt.n_embd, H = m_opt.n_head, hs = m_head_size;
  const int64_t N = B * T;
  const auto p = static_cast<float>(m_opt.dropout);
  const Shape rc{N, C}, heads{B * H, T, hs}, att{B * H, T, T};
  const Tensor g = lead(m_g, rc), t = lead(m_t, rc);
  const Tensor dc = lead(m_dc, rc), dc2 = lead(m_dc2, rc);

  // A counted step (nn/numerics.h): every op that rounds to the compute dtype writes f32 into
  // the workspace instead, and the hook rounds it (the same bits; f32_or / settle).
  m_counted = m_num != nullptr && m_num->active();
  if (m_counted && m_attention_op) {
    const AttentionSizes as = b.attention_workspace(B * H, T, hs, m_act);
    if (as.scratch_lowp != b.Backend::attention_workspace(B * H, T, hs, m_act).scratch_lowp) {
      throw Error{ErrorKind::state,
                  "gpt backward: the backend fuses this attention shape; its roundings cannot be "
                  "counted"};
    }
  }

  // lm_head: its weight gradient goes to wte's when tied (the sum over both uses). dlogits'
  // rounding (the loss's site) counts for the head.
  const Tensor& dlogits = m_loss.grad(N);
  const Tensor lnf = lead(m_lnf, rc);
  if (m_counted) m_num->claim(m_head_entry);
  if (m_ws_head.defined()) {
    gemm_own(dlogits, true, lnf, false, m_ws_head, m_head_entry);
    b.add_(m_head.grad, m_ws_head);
  } else {
    b.gemm(dlogits, true, lnf, false, m_head.grad, 1.0f, 1.0f);
  }
  gemm_site(dlogits, false, m_head.compute(), false, dc, m_head_dx_site);
  // ln_f: its fp32 input gradient starts the stream's gradient g (ln_f's weight claims dc).
  if (m_counted) m_num->claim(m_ln_f.w_entry);
  const Tensor xf = lead(m_emb, rc);
  norm_backward(m_ln_f, xf, lead(m_meanf, {N}), lead(m_rstdf, {N}), dc, g);

  static const Sites kNoSites{};
  for (size_t i = m_layers.size(); i-- > 0;) {
    const Layer& l = m_layers[i];
    const Sites& s = m_counted ? m_sites[i] : kNoSites;
    // ---- MLP branch: x_out = x_mid + drop(c_proj(gelu(c_fc(ln_2(x_mid))))) ----
    // The branch's gradient is g rounded to the branch's dtype (autograd casts a gradient to
    // its input's dtype); the stream keeps g in fp32. Counted, the hook's rounding of g is the
    // cast itself.
    if (m_counted) {
      m_num->round_site(g, dc, s.cast2);
    } else {
      b.cast(g, dc);
    }
    const Tensor* dbr = &dc;
    if (m_dropped) {
      const Tensor o = f32_or(dc2);
      b.dropout_backward(dc, o, p, m_rng.seed, l.s_resid2);
      settle(o, dc2, s.drop2);
      dbr = &dc2;
    }
    const Tensor fc = lead(l.fc, {N, 4 * C}), gelu = lead(l.gelu, {N, 4 * C});
    const Tensor d4a = lead(m_d4a, {N, 4 * C}), d4b = lead(m_d4b, {N, 4 * C});
    // c_proj's weight and bias gradients; its input gradient and GELU's backward as one op pair
    // (Backend::linear_gelu_backward_input: d4a := dy W rounded, then GELU's backward into d4b,
    // unless the backend fuses them). Counted, the pair is the default's composition op by op
    // (a fused backend is never counted: roundings_instrumented).
    proj_backward(l.mlp_proj, *dbr, gelu, Tensor{});
    if (m_counted) {
      gemm_site(*dbr, false, l.mlp_proj.w.compute(), false, d4a, s.d4a);
      m_num->activation_backward_site(ActivationKind::gelu_tanh, fc, Tensor{}, d4a, m_nws, d4b,
                                      s.d4b);
    } else {
      b.linear_gelu_backward_input(*dbr, l.mlp_proj.w.compute(), fc, d4b, d4a);
    }
    proj_backward(l.c_fc, d4b, lead(l.ln2, rc), dc, s.fc_dx);
    // The gradient of x_mid: the residual's plus ln_2's, added in ln_2's backward.
    if (m_counted) m_num->claim(l.ln_2.w_entry);
    norm_backward_add(l.ln_2, lead(l.x_mid, rc), lead(l.mean2, {N}), lead(l.rstd2, {N}), dc, g);
    // ---- attention branch: x_mid = x + drop(c_proj(attention(ln_1(x)))) ----
    if (m_counted) {
      m_num->round_site(g, dc, s.cast1);
    } else {
      b.cast(g, dc);
    }
    dbr = &dc;
    if (m_dropped) {
      const Tensor o = f32_or(dc2);
      b.dropout_backward(dc, o, p, m_rng.seed, l.s_resid1);
      settle(o, dc2, s.drop1);
      dbr = &dc2;
    }
    const Tensor& dyrows = dbr == &dc ? dc2 : dc;
    proj_backward(l.attn_proj, *dbr, lead(l.yrows, rc), dyrows, s.proj_dx);
    const Tensor dyh = lead(m_dyh, heads);
    b.heads_from_rows(dyrows, 0, dyh.view(0, {B, H, T, hs}));
    const Tensor q = lead(l.q, heads), k = lead(l.k, heads), v = lead(l.v, heads);
    const Tensor dq = lead(m_dq, heads), dk = lead(m_dk, heads), dv = lead(m_dv, heads);
    if (m_counted) {
      attention_backward_counted(l, s, dyh, q, k, v, dq, dk, dv, att);
    } else if (m_attention_op) {
      b.attention_backward(q, k, v, lead(l.y_heads, heads), dyh, m_scale, dq, dk, dv,
                           attention_buffers(l));
    } else {
      const Tensor a = lead(l.att, att), probs = lead(l.probs, att);
      const Tensor datt = lead(m_datt, att), dscores = lead(m_dscores, att);
      b.gemm_batched(dyh, false, v, true, datt);  // d(att) of y = att @ v
      b.gemm_batched(a, true, dyh, false, dv);
      // The cast of att to the compute dtype differentiates to a widening; attn_dropout's
      // backward runs in fp32 on it (in eval-mode forwards no mask was drawn).
      Tensor dprobs = datt;
      if (m_dropped) {
        dprobs = lead(m_dprobs, att);
        b.dropout_backward(datt, dprobs, p, m_rng.seed, l.s_attn);
      }
      b.causal_softmax_backward(probs, dprobs, m_scale, /*round_scaled=*/true, dscores);
      b.gemm_batched(dscores, false, k, false, dq);
      b.gemm_batched(dscores, true, q, false, dk);
    }
    const Tensor dqkv = lead(m_dqkv, {N, 3 * C});
    b.heads_to_rows(dq.view(0, {B, H, T, hs}), dqkv, 0);
    b.heads_to_rows(dk.view(0, {B, H, T, hs}), dqkv, C);
    b.heads_to_rows(dv.view(0, {B, H, T, hs}), dqkv, 2 * C);
    proj_backward(l.c_attn, dqkv, lead(l.ln1, rc), dc, s.attn_dx);
    if (m_counted) m_num->claim(l.ln_1.w_entry);
    norm_backward_add(l.ln_1, lead(l.x_in, rc), lead(l.mean1, {N}), lead(l.rstd1, {N}), dc, g);
  }
  m_counted = false;
  // The embeddings: drop's backward in fp32, then the deterministic scatter-add (no rounding
  // to the compute dtype: nothing to count).
  const Tensor* de = &g;
  if (m_dropped) {
    b.dropout_backward(g, t, p, m_rng.seed, m_s_emb);
    de = &t;
  }
  b.embedding_backward(m_tokens, *de, m_wte.grad, m_wpe.grad);
}

// The attention's backward on an active step, both paths (the op's default composition, which
// every countable backend runs, and the materialised ops with dropout), op by op through the
// hook (GradNumerics: the amax taken inside each op where the backend fuses it, else each output
// written in f32 and rounded). causal_softmax_backward's two roundings (round_scaled: its float
// g to the compute dtype, then g * scale again) are two sites (causal_softmax_backward_sites).
// The default's full dy v^T is rounded (its upper triangle too, which the softmax backward then
// masks), as PyTorch's materialised product is.
void Gpt::attention_backward_counted(const Layer& l, const Sites& s, const Tensor& dyh,
                                     const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                     const Shape& att) {
  Backend& b = *m_backend;
  const auto m = static_cast<size_t>(shape_numel(att));
  Tensor a, probs, datt, dscores;
  if (m_attention_op) {  // Backend::attention_backward's buffers (the default's sizes)
    probs = l.attn_saved.saved_f32.view(0, att);
    a = l.attn_saved.saved_lowp.view(0, att);
    datt = m_attn_scratch_lowp.view(0, att);
    dscores = m_attn_scratch_lowp.view(m, att);
  } else {
    a = lead(l.att, att);
    probs = lead(l.probs, att);
    datt = lead(m_datt, att);
    dscores = lead(m_dscores, att);
  }
  m_num->gemm_batched_site(dyh, false, v, true, m_nws, datt, s.datt);  // d(att) of y = att @ v
  m_num->gemm_batched_site(a, true, dyh, false, m_nws, dv, s.dv);
  Tensor dprobs = datt;
  if (!m_attention_op && m_dropped) {
    dprobs = lead(m_dprobs, att);
    b.dropout_backward(datt, dprobs, static_cast<float>(m_opt.dropout), m_rng.seed, l.s_attn);
  }
  m_num->causal_softmax_backward_sites(probs, dprobs, m_nscale, m_nws, dscores, s.g, s.dscores);
  m_num->gemm_batched_site(dscores, false, k, false, m_nws, dq, s.dq);
  m_num->gemm_batched_site(dscores, true, q, false, m_nws, dk, s.dk);
}

nlohmann::json Gpt::rng_state() const {
  return dropout_rng_state(m_rng);
}

void Gpt::set_rng_state(const nlohmann::json& state) {
  m_rng = dropout_rng_from_state(state);
}

ModelMemory Gpt::estimate(const ModelOptions& options, const Backend* backend) {
  return estimate_gpt(options, backend);
}

}  // namespace ampctl::nn
