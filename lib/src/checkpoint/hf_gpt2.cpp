// Hugging Face GPT-2 names and layout; see hf_gpt2.h.
#include "ampctl/checkpoint/hf_gpt2.h"

#include <algorithm>

#include "ampctl/checkpoint/safetensors.h"
#include "ampctl/core/error.h"

namespace ampctl::checkpoint {

namespace {

const nlohmann::json& gpt_section(const CheckpointData& data) {
  static const nlohmann::json none;
  if (!data.config.is_object() || !data.config.contains("model")) return none;
  return data.config["model"];
}

int64_t model_int(const nlohmann::json& m, const char* key) {
  if (!m.contains(key) || !m[key].is_number_integer()) {
    throw Error{ErrorKind::input, std::string("the checkpoint's config has no model.") + key};
  }
  return m[key].get<int64_t>();
}

}  // namespace

bool hf_conv1d_weight(const std::string& name) {
  return name.ends_with(".attn.c_attn.weight") || name.ends_with(".attn.c_proj.weight") ||
         name.ends_with(".mlp.c_fc.weight") || name.ends_with(".mlp.c_proj.weight");
}

bool hf_ignored_buffer(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

std::string hf_to_ampctl_name(const std::string& name) {
  if (name.rfind("transformer.", 0) == 0 || name.rfind("lm_head.", 0) == 0) return name;
  return "transformer." + name;
}

NamedTensor transpose_2d(const NamedTensor& t) {
  if (t.shape.size() != 2) {
    throw Error{ErrorKind::invalid_argument, "transpose_2d: '" + t.name + "' is not 2-D"};
  }
  const auto rows = static_cast<size_t>(t.shape[0]), cols = static_cast<size_t>(t.shape[1]);
  const size_t e = dtype_size(t.dtype);
  NamedTensor out = t;
  out.shape = Shape{t.shape[1], t.shape[0]};
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) {
      std::copy_n(t.data.begin() + static_cast<std::ptrdiff_t>((r * cols + c) * e), e,
                  out.data.begin() + static_cast<std::ptrdiff_t>((c * rows + r) * e));
    }
  }
  return out;
}

HfExport hf_export(const CheckpointData& data) {
  const nlohmann::json& m = gpt_section(data);
  if (!m.is_object() || m.value("type", std::string()) != "gpt") {
    throw Error{ErrorKind::input,
                "--format hf: the checkpoint is not a GPT's (model.type: " +
                    (m.is_object() ? m.value("type", std::string("?")) : std::string("?")) + ")",
                "export other models with --format safetensors"};
  }
  const int64_t n_layer = model_int(m, "n_layer"), n_head = model_int(m, "n_head"),
                n_embd = model_int(m, "n_embd"), block = model_int(m, "block_size");
  const bool tied = m.value("tie_embeddings", true);
  const double dropout = m.value("dropout", 0.0);
  const NamedTensor* wte = nullptr;
  for (const NamedTensor& t : data.model) {
    if (t.name == "transformer.wte.weight") wte = &t;
  }
  if (wte == nullptr || wte->shape.size() != 2) {
    throw Error{ErrorKind::input, "--format hf: the checkpoint has no transformer.wte.weight"};
  }
  const int64_t vocab = wte->shape[0];

  // A bias-free GPT (model.bias: false) is GPT-2 with zero biases: GPT2Config has no switch for
  // them, and x + 0 is x in fp32, so the exported model computes the same logits.
  std::vector<NamedTensor> tensors;
  auto find = [&](const std::string& name) -> const NamedTensor* {
    for (const NamedTensor& t : data.model) {
      if (t.name == name) return &t;
    }
    return nullptr;
  };
  auto put = [&](const std::string& name, int64_t zero_width) {
    if (const NamedTensor* t = find(name)) {
      tensors.push_back(hf_conv1d_weight(name) ? transpose_2d(*t) : *t);
      return;
    }
    if (zero_width <= 0)
      throw Error{ErrorKind::input, "--format hf: the checkpoint has no " + name};
    NamedTensor z;
    z.name = name;
    z.dtype = DType::f32;
    z.shape = Shape{zero_width};
    z.data.assign(static_cast<size_t>(zero_width) * sizeof(float), 0);
    tensors.push_back(std::move(z));
  };
  put("transformer.wte.weight", 0);
  put("transformer.wpe.weight", 0);
  for (int64_t i = 0; i < n_layer; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    put(p + "ln_1.weight", 0);
    put(p + "ln_1.bias", n_embd);
    put(p + "attn.c_attn.weight", 0);
    put(p + "attn.c_attn.bias", 3 * n_embd);
    put(p + "attn.c_proj.weight", 0);
    put(p + "attn.c_proj.bias", n_embd);
    put(p + "ln_2.weight", 0);
    put(p + "ln_2.bias", n_embd);
    put(p + "mlp.c_fc.weight", 0);
    put(p + "mlp.c_fc.bias", 4 * n_embd);
    put(p + "mlp.c_proj.weight", 0);
    put(p + "mlp.c_proj.bias", n_embd);
  }
  put("transformer.ln_f.weight", 0);
  put("transformer.ln_f.bias", n_embd);
  if (!tied) put("lm_head.weight", 0);

  HfExport out;
  out.model_safetensors = encode_safetensors(tensors, {{"format", "pt"}});
  nlohmann::ordered_json config;
  config["architectures"] = {"GPT2LMHeadModel"};
  config["model_type"] = "gpt2";
  config["n_layer"] = n_layer;
  config["n_head"] = n_head;
  config["n_embd"] = n_embd;
  config["n_positions"] = block;
  config["n_ctx"] = block;
  config["vocab_size"] = vocab;
  config["layer_norm_epsilon"] = 1e-5;
  config["activation_function"] = "gelu_new";
  config["resid_pdrop"] = dropout;
  config["embd_pdrop"] = dropout;
  config["attn_pdrop"] = dropout;
  config["tie_word_embeddings"] = tied;
  config["torch_dtype"] = "float32";
  out.config_json = config.dump(2) + "\n";
  if (data.vocab.is_array()) {
    nlohmann::ordered_json v = nlohmann::ordered_json::object();
    for (size_t i = 0; i < data.vocab.size(); ++i) v[data.vocab[i].get<std::string>()] = i;
    out.vocab_json = v.dump(2, ' ', /*ensure_ascii=*/false) + "\n";
  }
  return out;
}

}  // namespace ampctl::checkpoint
