// Hugging Face's GPT-2 layout (transformers' GPT2LMHeadModel) beside ampctl's (nanoGPT's), for
// `ampctl export --format hf` and `--init-from` of a Hugging Face model.safetensors.
//
// The two use the same names (transformer.wte.weight, transformer.h.<i>.attn.c_attn.weight, ...,
// lm_head.weight), but Hugging Face's c_attn, c_proj and c_fc are Conv1D modules whose weight is
// stored [in, out], the transpose of nn.Linear's [out, in] that nanoGPT and ampctl hold. A file
// saved from GPT2Model (the hub's gpt2 repository) has no "transformer." prefix and no lm_head;
// GPT2LMHeadModel.save_pretrained writes the prefix and leaves out lm_head.weight when the head
// is tied (safetensors holds no shared tensors). attn.bias and attn.masked_bias are the causal
// mask buffers of older versions: not weights.
//
// An export (hf_export) is a directory of three files, bitwise the same for the same tensors:
//   config.json        GPT2Config's fields (model_type gpt2, n_layer, n_head, n_embd,
//                      n_positions = n_ctx = block_size, vocab_size, layer_norm_epsilon 1e-5,
//                      activation_function gelu_new (GELU's tanh form, as ampctl), the dropouts,
//                      tie_word_embeddings, architectures [GPT2LMHeadModel]);
//   model.safetensors  the tensors with the "transformer." prefix, Conv1D weights [in, out],
//                      lm_head.weight only when untied; metadata {"format": "pt"} alone (no step
//                      or version, so a round trip reproduces the bytes);
//   vocab.json         for text runs: {token string: id} (tokenizers' vocab.json form).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ampctl/checkpoint/checkpoint.h"

namespace ampctl::checkpoint {

// True for the 2-D weights Hugging Face stores as Conv1D ([in, out]): names ending in
// attn.c_attn.weight, attn.c_proj.weight, mlp.c_fc.weight or mlp.c_proj.weight.
bool hf_conv1d_weight(const std::string& name);
// The causal-mask buffers of a Hugging Face GPT-2 file (names ending in .attn.bias or
// .attn.masked_bias): skipped on import.
bool hf_ignored_buffer(const std::string& name);
// A Hugging Face name in ampctl's: "transformer." prefixed unless it has it or is lm_head.*.
std::string hf_to_ampctl_name(const std::string& name);
// The transpose of a 2-D tensor (any dtype), element bytes moved as they are.
NamedTensor transpose_2d(const NamedTensor& t);

struct HfExport {
  std::string config_json;
  std::string model_safetensors;
  std::string vocab_json;  // empty: no vocabulary (token data)
};

// The export of a GPT checkpoint (Error{input} naming what is missing for another model, a
// checkpoint without its configuration's gpt section, or a bias-free GPT, which GPT2Config
// cannot describe).
HfExport hf_export(const CheckpointData& data);

}  // namespace ampctl::checkpoint
