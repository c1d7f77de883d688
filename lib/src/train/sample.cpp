#include "ampctl/train/sample.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <sstream>

#include "ampctl/backend/backend.h"
#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/core/half.h"
#include "ampctl/core/input_file.h"
#include "ampctl/core/interrupt.h"
#include "ampctl/core/philox.h"
#include "ampctl/data/vocab.h"
#include "ampctl/nn/models.h"
#include "ampctl/train/build.h"

namespace ampctl::train {

namespace {

// "samp" in ASCII: the stream of the sampling draws.
constexpr uint64_t kSampleStream = 0x73616d70u;
// The token embedding names the vocabulary size (nanoGPT's state_dict key).
constexpr const char* kTokenEmbedding = "transformer.wte.weight";

double uniform_draw(uint64_t seed, uint64_t index) {
  const PhiloxBlock b = philox_block(seed, kSampleStream, index);
  const uint64_t bits = (static_cast<uint64_t>(b.v[1]) << 32 | b.v[0]) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}

std::vector<int32_t> parse_ids(const std::string& prompt, int64_t vocab_size) {
  std::vector<int32_t> ids;
  std::istringstream in(prompt);
  std::string word;
  while (in >> word) {
    int64_t v = -1;
    size_t used = 0;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || v < 0 || v >= vocab_size) {
      throw Error{
          ErrorKind::input,
          "--prompt: '" + word + "' is not a token id in [0, " + std::to_string(vocab_size) + ")",
          "this checkpoint has no vocabulary (token data): give the prompt as ids "
          "separated by spaces"};
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

std::vector<float> read_row(Backend& b, const Tensor& logits, int64_t row, int64_t width) {
  const Tensor last = logits.view(static_cast<size_t>(row * width), {1, width});
  const Tensor host = b.to_host(last);
  std::vector<float> out(static_cast<size_t>(width));
  for (int64_t i = 0; i < width; ++i) {
    switch (host.dtype()) {
      case DType::f32:
        out[static_cast<size_t>(i)] = static_cast<const float*>(host.data())[i];
        break;
      case DType::f16:
        out[static_cast<size_t>(i)] =
            half_bits_to_float(static_cast<const uint16_t*>(host.data())[i]);
        break;
      case DType::bf16:
        out[static_cast<size_t>(i)] =
            bf16_bits_to_float(static_cast<const uint16_t*>(host.data())[i]);
        break;
      default:
        throw Error{ErrorKind::state,
                    "sample: logits of dtype " + std::string(dtype_name(host.dtype()))};
    }
  }
  return out;
}

}  // namespace

int64_t pick_token(const std::vector<float>& logits, double temperature,
                   std::optional<int64_t> top_k, double u) {
  const auto v = static_cast<int64_t>(logits.size());
  std::vector<double> z(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) z[i] = static_cast<double>(logits[i]) / temperature;
  if (top_k && *top_k < v) {
    std::vector<int64_t> order(logits.size());
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return z[static_cast<size_t>(a)] > z[static_cast<size_t>(b)];
    });
    for (int64_t r = *top_k; r < v; ++r) {
      z[static_cast<size_t>(order[static_cast<size_t>(r)])] =
          -std::numeric_limits<double>::infinity();
    }
  }
  double max = -std::numeric_limits<double>::infinity();
  for (double x : z) max = std::max(max, x);
  double sum = 0;
  for (double& x : z) {
    x = std::isfinite(max) ? std::exp(x - max) : 0.0;
    sum += x;
  }
  if (!(sum > 0) || !std::isfinite(sum)) return 0;  // non-finite logits: nothing to draw from
  const double target = u * sum;
  double acc = 0;
  int64_t last = 0;
  for (int64_t i = 0; i < v; ++i) {
    if (z[static_cast<size_t>(i)] <= 0) continue;
    acc += z[static_cast<size_t>(i)];
    last = i;
    if (target < acc) return i;
  }
  return last;  // rounding left u * sum at the very top
}

namespace {

// Draw i's logits give a distribution: finite, and still finite once divided by the
// temperature (a subnormal one overflows them to inf, and the draw would be no draw).
void check_logits(const std::vector<float>& row, double temperature, int64_t i) {
  double largest = 0;
  for (size_t j = 0; j < row.size(); ++j) {
    if (!std::isfinite(row[j])) {
      throw Error{ErrorKind::runtime,
                  "the model's logits are not finite at new token " + std::to_string(i) +
                      " (logit " + std::to_string(j) + " is " + std::to_string(row[j]) +
                      "): there is no distribution to draw from",
                  "sample a checkpoint whose evaluation loss is finite"};
    }
    largest = std::max(largest, std::fabs(static_cast<double>(row[j])));
  }
  if (!std::isfinite(largest / temperature)) {
    char t[32];
    std::snprintf(t, sizeof t, "%g", temperature);
    throw Error{ErrorKind::usage,
                std::string("--temperature ") + t + " is too small: the logits (up to " +
                    std::to_string(largest) + ") divided by it overflow",
                "give a larger temperature (1e-3 is already nearly greedy)"};
  }
}

// --tokens (within the host memory the result takes), --temperature and --top-k.
void check_sample_options(const SampleOptions& options) {
  if (options.tokens < 1) {
    throw Error{ErrorKind::usage, "--tokens must be >= 1, got " + std::to_string(options.tokens)};
  }
  // The result keeps every token: its id twice (the context and the new ids) and its text, up
  // to 4 UTF-8 bytes, twice (streamed pieces and the whole): about 16 bytes a token.
  if (const std::optional<uint64_t> avail = host_memory_available();
      avail && static_cast<uint64_t>(options.tokens) > *avail / 16) {
    throw Error{
        ErrorKind::usage,
        "--tokens " + std::to_string(options.tokens) + ": the sample would need about " +
            format_bytes(
                std::min<uint64_t>(static_cast<uint64_t>(options.tokens), UINT64_MAX / 16) * 16) +
            " of host memory (16 bytes a token), and " + format_bytes(*avail) + " is available",
        "ask for fewer tokens (at most " + std::to_string(*avail / 16) + " here)"};
  }
  if (!(options.temperature > 0) || !std::isfinite(options.temperature)) {
    throw Error{ErrorKind::usage, "--temperature must be > 0 and finite"};
  }
  if (options.top_k && *options.top_k < 1) {
    throw Error{ErrorKind::usage, "--top-k must be >= 1, got " + std::to_string(*options.top_k)};
  }
}

// The checkpoint's model, built from its configuration on `b` (one sequence at a time) with the
// checkpoint's tensors loaded: each must match the model's in name, dtype and shape.
std::unique_ptr<nn::Model> load_model(Backend& b, const config::RunConfig& cfg,
                                      const checkpoint::CheckpointData& ckpt, int64_t vocab_size) {
  std::unique_ptr<nn::Model> model =
      nn::build_model(b, model_options(cfg.model, cfg.precision, cfg.loss, vocab_size, vocab_size,
                                       /*max_batch=*/1, static_cast<uint64_t>(cfg.seed)));
  const std::vector<std::pair<std::string, Tensor>> targets = model->state_tensors();
  if (targets.size() != ckpt.model.size()) {
    throw Error{ErrorKind::input, "the checkpoint holds " + std::to_string(ckpt.model.size()) +
                                      " model tensors, its configuration's model " +
                                      std::to_string(targets.size())};
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    const checkpoint::NamedTensor& s = ckpt.model[i];
    const Tensor& t = targets[i].second;
    if (s.name != targets[i].first || s.dtype != t.dtype() || s.shape != t.shape()) {
      throw Error{ErrorKind::input, "the checkpoint's model tensor " + std::to_string(i) + " '" +
                                        s.name + "' does not fit its configuration's model ('" +
                                        targets[i].first + "' " + shape_str(t.shape()) + ")"};
    }
    b.upload(t, s.data.data(), s.data.size());
  }
  model->sync_lowp();

  return model;
}

// The prompt's ids (through the run's tokenizer or vocabulary, else as numbers); an empty one is
// a newline (or id 0).
std::vector<int32_t> prompt_ids(const std::string& prompt, const tokenize::Tokenizer* tokenizer,
                                const std::optional<data::Vocab>& vocab, int64_t vocab_size) {
  std::vector<int32_t> ids;
  if (tokenizer) {
    ids = tokenizer->encode(prompt.empty() ? "\n" : prompt, "--prompt");
  } else if (vocab) {
    ids = vocab->encode(prompt, "--prompt");
  } else {
    ids = parse_ids(prompt, vocab_size);
  }
  if (ids.empty()) {
    int32_t start = 0;
    if (vocab && vocab->kind() == data::VocabKind::byte) start = '\n';
    if (vocab && vocab->kind() == data::VocabKind::character)
      start = std::max(0, vocab->id_of('\n'));
    ids.push_back(start);
  }

  return ids;
}

}  // namespace

SampleResult sample(const checkpoint::CheckpointData& ckpt, const SampleOptions& options) {
  check_sample_options(options);
  const config::RunConfig cfg = config::from_json(ckpt.config, "the checkpoint's config");
  if (!config::is_language_model(cfg.data.train)) {
    throw Error{ErrorKind::input,
                std::string("the checkpoint is a ") + config::to_string(cfg.model.type) +
                    " model on " + config::to_string(cfg.data.train.source) +
                    " data, not a language model: nothing to sample",
                "sample a run trained on text or token data (model.type: gpt)"};
  }
  const auto wte =
      std::find_if(ckpt.model.begin(), ckpt.model.end(),
                   [](const checkpoint::NamedTensor& t) { return t.name == kTokenEmbedding; });
  if (wte == ckpt.model.end() || wte->shape.size() != 2 || wte->shape[0] < 1) {
    throw Error{ErrorKind::input, std::string("the checkpoint has no ") + kTokenEmbedding +
                                      " [vocab, n_embd] tensor"};
  }
  const int64_t vocab_size = wte->shape[0];
  const tokenize::Tokenizer* tokenizer = options.tokenizer;
  if (tokenizer && tokenizer->vocab_size() > vocab_size) {
    throw Error{ErrorKind::input, "the run's tokenizer has " +
                                      std::to_string(tokenizer->vocab_size()) + " tokens, the " +
                                      kTokenEmbedding + " only " + std::to_string(vocab_size)};
  }
  std::optional<data::Vocab> vocab;
  if (!ckpt.vocab.is_null() && !tokenizer) {
    vocab = data::Vocab::from_json(ckpt.vocab, "the checkpoint's vocab");
    // The model's rows may be padded beyond the vocabulary (a multiple of 64), never fewer.
    if (vocab->size() > vocab_size) {
      throw Error{ErrorKind::input, "the checkpoint's vocab holds " +
                                        std::to_string(vocab->size()) + " tokens, its " +
                                        kTokenEmbedding + " only " + std::to_string(vocab_size)};
    }
  }

  std::unique_ptr<Backend> backend =
      resolve_device("auto") == "cpu" ? make_cpu_backend(0) : make_cuda_backend(0);
  Backend& b = *backend;
  std::unique_ptr<nn::Model> model = load_model(b, cfg, ckpt, vocab_size);
  SampleResult out;
  out.prompt_ids = prompt_ids(options.prompt, tokenizer, vocab, vocab_size);
  const int64_t block = [&] {
    // The position embedding's rows are the model's block_size.
    for (const checkpoint::NamedTensor& t : ckpt.model) {
      if (t.name == "transformer.wpe.weight" && t.shape.size() == 2) return t.shape[0];
    }
    throw Error{ErrorKind::input, "the checkpoint has no transformer.wpe.weight tensor"};
  }();
  // The text of ids, as the whole result's text spells them (decoding is per token).
  const auto text_of = [&](const std::vector<int32_t>& ids, bool first) {
    if (tokenizer) return tokenizer->decode(ids);
    if (vocab) return vocab->decode(ids);
    std::string t;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i > 0 || !first) t += ' ';
      t += std::to_string(ids[i]);
    }
    return t;
  };
  if (options.on_text) options.on_text(text_of(out.prompt_ids, /*first=*/true));
  std::vector<int32_t> context = out.prompt_ids;
  context.reserve(context.size() + static_cast<size_t>(options.tokens));
  Tensor input = b.empty({1, block}, DType::i32);
  for (int64_t i = 0; i < options.tokens; ++i) {
    if (const int signo = stop_request()) {
      out.stopped_by = signo;
      break;
    }
    const auto len = std::min<int64_t>(block, static_cast<int64_t>(context.size()));
    const Tensor in = input.view(0, {1, len});
    b.upload(in, context.data() + (context.size() - static_cast<size_t>(len)),
             static_cast<size_t>(len) * sizeof(int32_t));
    const Tensor& logits = model->forward(in, 1, /*training=*/false);
    const int64_t width = logits.dim(logits.rank() - 1);
    std::vector<float> row = read_row(b, logits, len - 1, width);
    // Padded rows beyond the vocabulary are never drawn.
    if (vocab) row.resize(static_cast<size_t>(vocab->size()));
    if (tokenizer) row.resize(static_cast<size_t>(tokenizer->vocab_size()));
    check_logits(row, options.temperature, i);
    const int64_t id = pick_token(row, options.temperature, options.top_k,
                                  uniform_draw(options.seed, static_cast<uint64_t>(i)));
    context.push_back(static_cast<int32_t>(id));
    out.new_ids.push_back(static_cast<int32_t>(id));
    if (options.on_text) options.on_text(text_of({static_cast<int32_t>(id)}, /*first=*/false));
  }
  if (tokenizer) {
    out.text = tokenizer->decode(context);
  } else if (vocab) {
    out.text = vocab->decode(context);
  } else {
    for (size_t i = 0; i < context.size(); ++i) {
      if (i > 0) out.text += ' ';
      out.text += std::to_string(context[i]);
    }
  }
  return out;
}

}  // namespace ampctl::train
