#include "ampctl/tokenize/tokenizer.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <exception>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>

#include "ampctl/core/error.h"
#include "ampctl/core/input_file.h"
#include "ampctl/core/interrupt.h"
#include "ampctl/tokenize/unicode.h"

namespace ampctl::tokenize {

// Maps keyed by std::string and looked up by std::string_view. Outside the anonymous namespace:
// Tokenizer::Impl, a member of a class with external linkage, holds them.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

// The biggest tokenizer files read (Qwen's tokenizer.json is 11 MB).
constexpr size_t kMaxTokenizerBytes = size_t{1} << 30;
// Words longer than this many symbols merge with a heap instead of rescanning their pairs.
constexpr size_t kHeapMergeSymbols = 48;
// A worker's word cache is emptied when it holds this many ids.
constexpr size_t kCacheIds = size_t{1} << 24;

[[noreturn]] void fail(const std::string& origin, const std::string& what,
                       const std::string& hint = {}) {
  throw Error{ErrorKind::input, origin + ": " + what, hint};
}

std::string show(std::string_view s) {
  std::string out = "'";
  for (const char c : s.substr(0, 60)) {
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + (s.size() > 60 ? "...'" : "'");
}

std::string utf8_string(char32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

const std::array<char32_t, 256>& byte_alphabet() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

// A vocabulary string's bytes: each character of the byte alphabet the byte it stands for, or,
// when some character is not in the alphabet, the string's own UTF-8 (Hugging Face's ByteLevel
// decoder does the same).
std::string raw_bytes_of(std::string_view token) {
  if (utf8_error_offset(token)) return std::string(token);
  std::string out;
  for (size_t pos = 0, len = 0; pos < token.size(); pos += len) {
    const int b = unicode_to_byte(decode_utf8(token, pos, &len));
    if (b < 0) return std::string(token);
    out.push_back(static_cast<char>(b));
  }
  return out;
}

const Json* member(const Json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

bool flag(const Json& object, const char* key, const std::string& origin, const std::string& at) {
  const Json* v = member(object, key);
  if (!v) return false;
  if (!v->is_boolean()) fail(origin, at + key + ": expected true or false, got " + v->dump());
  return v->get<bool>();
}

struct WordCache {
  StringMap<std::pair<uint32_t, uint32_t>> words;  // word -> (offset, count) in ids
  std::vector<int32_t> ids;
};

}  // namespace

char32_t byte_to_unicode(uint8_t b) {
  return byte_alphabet()[b];
}

int unicode_to_byte(char32_t cp) {
  static const std::array<int16_t, 324> inverse = [] {
    std::array<int16_t, 324> t{};
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_alphabet()[b]] = static_cast<int16_t>(b);
    return t;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

std::string fnv1a64_hex(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

struct Tokenizer::Impl {
  std::string origin;
  std::string json_text;
  Pattern pattern = Pattern::gpt2;
  bool nfc = false;
  bool ignore_merges = false;
  int64_t vocab_size = 0;
  size_t merge_count = 0;
  std::array<int32_t, 256> byte_id{};
  std::unordered_map<uint64_t, uint64_t> merges;  // (left << 32 | right) -> (rank << 32 | id)
  StringMap<int32_t> raw_to_id;                   // a vocabulary token's bytes -> id
  StringMap<int32_t> token_to_id;                 // as tokenizer.json writes it
  std::vector<std::string> id_bytes;              // decode: the bytes of each id
  std::vector<std::string> id_token;              // as tokenizer.json writes it
  std::vector<bool> id_valid;
  std::vector<AddedToken> added;
  std::array<std::vector<size_t>, 256> added_by_first_byte;  // longest first
  std::optional<int32_t> bos, eos;

  void set_vocab(const std::vector<std::pair<std::string, int64_t>>& vocab,
                 const std::string& field);
  void add_merge(std::string_view left, std::string_view right, size_t rank,
                 const std::string& field);
  void finish(const std::string& vocab_field);
  void pick_bos_eos(const fs::path& config_path);

  // (rank, merged id) of the pair, or nullopt.
  std::optional<std::pair<uint32_t, int32_t>> merge_of(int32_t a, int32_t b) const {
    const auto it = merges.find(static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 |
                                static_cast<uint32_t>(b));
    if (it == merges.end()) return std::nullopt;
    return std::make_pair(static_cast<uint32_t>(it->second >> 32),
                          static_cast<int32_t>(it->second & 0xffffffffu));
  }
  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  void bpe_heap(std::vector<int32_t>& symbols) const;
  void encode_words(std::string_view text, std::vector<int32_t>& out, WordCache& cache) const;
};

void Tokenizer::Impl::set_vocab(const std::vector<std::pair<std::string, int64_t>>& vocab,
                                const std::string& field) {
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab) {
    if (id < 0 || id > std::numeric_limits<int32_t>::max() - 1) {
      fail(origin, field + ": token " + show(token) + " has the id " + std::to_string(id) +
                       ", outside [0, 2^31 - 1)");
    }
    max_id = std::max(max_id, id);
  }
  if (max_id < 0) fail(origin, field + ": empty vocabulary");
  id_bytes.assign(static_cast<size_t>(max_id) + 1, {});
  id_token.assign(id_bytes.size(), {});
  id_valid.assign(id_bytes.size(), false);
  for (const auto& [token, id] : vocab) {
    const auto i = static_cast<size_t>(id);
    if (id_valid[i]) {
      fail(origin, field + ": the id " + std::to_string(id) + " is given to both " +
                       show(id_token[i]) + " and " + show(token));
    }
    id_valid[i] = true;
    id_token[i] = token;
    id_bytes[i] = raw_bytes_of(token);
    token_to_id.emplace(token, static_cast<int32_t>(id));
    raw_to_id.emplace(id_bytes[i], static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    const std::string ch = utf8_string(byte_to_unicode(static_cast<uint8_t>(b)));
    const auto it = token_to_id.find(ch);
    if (it == token_to_id.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", b);
      fail(origin,
           field + ": no token for the byte " + hex + " ('" + ch +
               "' in GPT-2's byte alphabet): not a byte-level BPE vocabulary",
           "ampctl reads byte-level BPE tokenizers (GPT-2, Llama 3, Qwen2/Qwen3); sentencepiece "
           "vocabularies (Llama 2, Mistral) are not supported");
    }
    byte_id[b] = it->second;
  }
}

void Tokenizer::Impl::add_merge(std::string_view left, std::string_view right, size_t rank,
                                const std::string& field) {
  const auto a = token_to_id.find(left), b = token_to_id.find(right);
  const std::string both = std::string(left) + std::string(right);
  const auto ab = token_to_id.find(both);
  const char* missing = a == token_to_id.end()    ? "its left part"
                        : b == token_to_id.end()  ? "its right part"
                        : ab == token_to_id.end() ? "the merged token"
                                                  : nullptr;
  if (missing) {
    const std::string which = a == token_to_id.end()   ? std::string(left)
                              : b == token_to_id.end() ? std::string(right)
                                                       : both;
    fail(origin,
         field + ": the merge " + show(std::string(left) + " " + std::string(right)) + ": " +
             missing + " " + show(which) + " is not in the vocabulary",
         "the merges and the vocabulary must come from the same tokenizer");
  }
  // A repeated pair takes its later rank, as Hugging Face's BPE builds its map.
  merges[static_cast<uint64_t>(static_cast<uint32_t>(a->second)) << 32 |
         static_cast<uint32_t>(b->second)] =
      static_cast<uint64_t>(rank) << 32 | static_cast<uint32_t>(ab->second);
  ++merge_count;
}

void Tokenizer::Impl::finish(const std::string& added_field) {
  int64_t max_id = static_cast<int64_t>(id_bytes.size()) - 1;
  for (const AddedToken& t : added) max_id = std::max<int64_t>(max_id, t.id);
  const auto n = static_cast<size_t>(max_id) + 1;
  id_bytes.resize(n);
  id_token.resize(n);
  id_valid.resize(n, false);
  for (size_t i = 0; i < added.size(); ++i) {
    const AddedToken& t = added[i];
    if (t.content.empty()) {
      fail(origin, added_field + "[" + std::to_string(i) + "].content: empty");
    }
    if (utf8_error_offset(t.content)) {
      fail(origin, added_field + "[" + std::to_string(i) + "].content: not valid UTF-8");
    }
    const auto id = static_cast<size_t>(t.id);
    id_valid[id] = true;
    id_bytes[id] = t.content;  // decoded as written, not through the byte alphabet
    id_token[id] = t.content;
    token_to_id[t.content] = t.id;
    added_by_first_byte[static_cast<unsigned char>(t.content[0])].push_back(i);
  }
  for (auto& list : added_by_first_byte) {
    std::stable_sort(list.begin(), list.end(), [&](size_t x, size_t y) {
      return added[x].content.size() > added[y].content.size();
    });
  }
  vocab_size = max_id + 1;
}

void Tokenizer::Impl::pick_bos_eos(const fs::path& config_path) {
  const auto find = [&](std::initializer_list<const char*> names) -> std::optional<int32_t> {
    for (const char* name : names) {
      for (const AddedToken& t : added) {
        if (t.special && t.content == name) return t.id;
      }
    }
    return std::nullopt;
  };
  bos = find({"<|begin_of_text|>", "<s>", "<|endoftext|>"});
  eos = find({"<|end_of_text|>", "<|endoftext|>", "</s>"});
  std::error_code ec;
  if (config_path.empty() || !fs::is_regular_file(config_path, ec)) return;
  Json config;
  try {
    config = Json::parse(read_regular_file(config_path, kMaxTokenizerBytes, "tokenizer config"));
  } catch (const Json::exception& e) {
    fail(config_path.string(), std::string("not JSON: ") + e.what());
  }
  const auto token = [&](const char* key, std::optional<int32_t>& out) {
    const Json* v = member(config, key);
    if (!v) return;
    if (v->is_object()) v = member(*v, "content");
    if (!v || !v->is_string()) return;
    const auto it = token_to_id.find(v->get<std::string>());
    if (it == token_to_id.end()) {
      fail(config_path.string(), std::string(key) + ": " + show(v->get<std::string>()) +
                                     " is not a token of the tokenizer beside it");
    }
    out = it->second;
  };
  token("bos_token", bos);
  token("eos_token", eos);
}

void Tokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_id[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges) {
    const auto it = raw_to_id.find(word);
    if (it != raw_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> symbols(word.size());
  for (size_t i = 0; i < word.size(); ++i)
    symbols[i] = byte_id[static_cast<unsigned char>(word[i])];
  if (symbols.size() > kHeapMergeSymbols) {
    bpe_heap(symbols);
    out.insert(out.end(), symbols.begin(), symbols.end());
    return;
  }
  // Short words: the rank of each adjacent pair, the lowest (leftmost of equals) merged, its two
  // neighbours' ranks recomputed.
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  std::array<uint32_t, kHeapMergeSymbols> rank{};
  std::array<int32_t, kHeapMergeSymbols> merged{};
  size_t n = symbols.size();
  const auto pair_rank = [&](size_t i) {
    const auto m = merge_of(symbols[i], symbols[i + 1]);
    rank[i] = m ? m->first : kNone;
    merged[i] = m ? m->second : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) pair_rank(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (rank[i] < rank[best]) best = i;
    }
    if (rank[best] == kNone) break;
    symbols[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      symbols[i] = symbols[i + 1];
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) pair_rank(best - 1);
    if (best + 1 < n) pair_rank(best);
  }
  out.insert(out.end(), symbols.begin(), symbols.begin() + static_cast<std::ptrdiff_t>(n));
}

void Tokenizer::Impl::bpe_heap(std::vector<int32_t>& symbols) const {
  // Long words: a doubly linked list of symbols and a min-heap of (rank, position); an entry
  // whose pair has changed since it was pushed no longer has its rank there and is skipped.
  // Position order breaks ties between equal ranks, so this merges what the scan above would.
  const size_t n = symbols.size();
  std::vector<int64_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int64_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int64_t>(i + 1) : -1;
  }
  using Entry = std::pair<uint32_t, size_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  const auto push = [&](size_t i) {
    if (next[i] < 0) return;
    if (const auto m = merge_of(symbols[i], symbols[static_cast<size_t>(next[i])])) {
      heap.emplace(m->first, i);
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const auto [r, i] = heap.top();
    heap.pop();
    if (!alive[i] || next[i] < 0) continue;
    const auto j = static_cast<size_t>(next[i]);
    const auto m = merge_of(symbols[i], symbols[j]);
    if (!m || m->first != r) continue;
    symbols[i] = m->second;
    alive[j] = false;
    next[i] = next[j];
    if (next[j] >= 0) prev[static_cast<size_t>(next[j])] = static_cast<int64_t>(i);
    if (prev[i] >= 0) push(static_cast<size_t>(prev[i]));
    push(i);
  }
  size_t w = 0;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) symbols[w++] = symbols[i];
  }
  symbols.resize(w);
}

void Tokenizer::Impl::encode_words(std::string_view text, std::vector<int32_t>& out,
                                   WordCache& cache) const {
  std::string normalized;
  if (nfc) {
    normalized = tokenize::nfc(text);
    text = normalized;
  }
  std::vector<std::string_view> words;
  split_words(pattern, text, words);
  std::vector<int32_t> ids;
  for (const std::string_view word : words) {
    if (word.size() == 1) {
      out.push_back(byte_id[static_cast<unsigned char>(word[0])]);
      continue;
    }
    const auto it = cache.words.find(word);
    if (it != cache.words.end()) {
      const auto [offset, count] = it->second;
      out.insert(out.end(), cache.ids.begin() + offset, cache.ids.begin() + offset + count);
      continue;
    }
    ids.clear();
    bpe(word, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cache.ids.size() + ids.size() > kCacheIds) {
      cache.words.clear();
      cache.ids.clear();
    }
    cache.words.emplace(std::string(word), std::make_pair(static_cast<uint32_t>(cache.ids.size()),
                                                          static_cast<uint32_t>(ids.size())));
    cache.ids.insert(cache.ids.end(), ids.begin(), ids.end());
  }
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : m(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_tokenizer_json(std::string json_text, const std::string& origin) {
  Json doc;
  try {
    doc = Json::parse(json_text);
  } catch (const Json::exception& e) {
    fail(origin, std::string("not JSON: ") + e.what());
  }
  return from_document(doc, std::move(json_text), origin);
}

namespace {

// model: byte-level BPE, without dropout, a subword prefix or suffix, or byte fallback.
void check_bpe_model(const nlohmann::json& model, const std::string& origin) {
  const Json* type = member(model, "type");
  if (!type || !type->is_string() || type->get<std::string>() != "BPE") {
    fail(origin,
         "model.type: " + (type ? type->dump() : std::string("missing")) +
             " is not supported (ampctl reads byte-level BPE tokenizers: \"BPE\")",
         "GPT-2, Llama 3 and Qwen2/Qwen3 tokenizer.json files are byte-level BPE");
  }
  if (member(model, "dropout")) {
    fail(origin, "model.dropout: BPE dropout is not supported (set it to null)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json* v = member(model, key);
    if (v && !(v->is_string() && v->get<std::string>().empty())) {
      fail(origin, std::string("model.") + key + ": " + v->dump() +
                       " is not supported by byte-level BPE (expected null or \"\")");
    }
  }
  if (flag(model, "byte_fallback", origin, "model.")) {
    fail(origin, "model.byte_fallback: true is not supported (sentencepiece-style BPE)");
  }
}

// pre_tokenizer: ByteLevel with GPT-2's regex, or Sequence[Split(regex), ByteLevel(no regex)];
// the pattern it splits words by.
Pattern read_pre_tokenizer(const nlohmann::json& doc, const std::string& origin) {
  Pattern split_by = Pattern::gpt2;
  const Json* pre = member(doc, "pre_tokenizer");
  if (!pre) fail(origin, "pre_tokenizer: missing (byte-level BPE needs a ByteLevel pre-tokenizer)");
  const auto byte_level = [&](const Json& p, const std::string& at, bool want_regex) {
    const Json* t = member(p, "type");
    if (!t || *t != "ByteLevel") {
      fail(origin, at + ".type: " + (t ? t->dump() : std::string("missing")) +
                       " where ampctl expects \"ByteLevel\"");
    }
    if (flag(p, "add_prefix_space", origin, at + ".")) {
      fail(origin, at + ".add_prefix_space: true is not supported (set it to false)");
    }
    const Json* r = member(p, "use_regex");
    const bool use_regex = !r || (r->is_boolean() && r->get<bool>());
    if (use_regex != want_regex) {
      fail(origin, at + ".use_regex: " + (use_regex ? "true" : "false") +
                       " is not supported here (ampctl knows ByteLevel with GPT-2's regex alone, "
                       "or after a Split without it)");
    }
  };
  const Json* pre_type = member(*pre, "type");
  if (pre_type && *pre_type == "ByteLevel") {
    byte_level(*pre, "pre_tokenizer", true);
    split_by = Pattern::gpt2;
  } else if (pre_type && *pre_type == "Sequence") {
    const Json* list = member(*pre, "pretokenizers");
    if (!list || !list->is_array() || list->size() != 2) {
      fail(origin, "pre_tokenizer.pretokenizers: expected [Split, ByteLevel]");
    }
    const Json& split = (*list)[0];
    const std::string at = "pre_tokenizer.pretokenizers[0]";
    if (!(member(split, "type") && *member(split, "type") == "Split")) {
      fail(origin,
           at + ".type: " + (member(split, "type") ? member(split, "type")->dump() : "missing") +
               " is not supported (expected \"Split\")");
    }
    const Json* pattern = member(split, "pattern");
    const Json* regex = pattern ? member(*pattern, "Regex") : nullptr;
    if (!regex || !regex->is_string()) fail(origin, at + ".pattern.Regex: missing");
    const auto known = pattern_of_regex(regex->get<std::string>());
    if (!known) {
      fail(origin,
           at + ".pattern.Regex: " + show(regex->get<std::string>()) +
               " is not a pre-tokenizer ampctl knows",
           "ampctl knows the regexes of GPT-2, Llama 3 and Qwen2/Qwen3 (docs/reference.md, "
           "\"Tokenizers\")");
    }
    split_by = *known;
    const Json* behavior = member(split, "behavior");
    if (!behavior || *behavior != "Isolated") {
      fail(origin, at + ".behavior: " + (behavior ? behavior->dump() : std::string("missing")) +
                       " is not supported (expected \"Isolated\")");
    }
    if (flag(split, "invert", origin, at + "."))
      fail(origin, at + ".invert: true is not supported");
    byte_level((*list)[1], "pre_tokenizer.pretokenizers[1]", false);
  } else {
    fail(origin, "pre_tokenizer.type: " + (pre_type ? pre_type->dump() : std::string("missing")) +
                     " is not supported (expected \"ByteLevel\" or a \"Sequence\" of Split and "
                     "ByteLevel)");
  }
  return split_by;
}

// added_tokens: each one's id, content and flags (single_word refused).
std::vector<AddedToken> read_added_tokens(const nlohmann::json& doc, const std::string& origin) {
  std::vector<AddedToken> tokens;
  if (const Json* added = member(doc, "added_tokens")) {
    if (!added->is_array()) fail(origin, "added_tokens: not an array");
    for (size_t i = 0; i < added->size(); ++i) {
      const Json& a = (*added)[i];
      const std::string at = "added_tokens[" + std::to_string(i) + "]";
      const Json* id = member(a, "id");
      const Json* content = member(a, "content");
      if (!id || !id->is_number_integer() || id->get<int64_t>() < 0 ||
          id->get<int64_t>() > std::numeric_limits<int32_t>::max() - 1) {
        fail(origin, at + ".id: missing or not an id");
      }
      if (!content || !content->is_string()) fail(origin, at + ".content: missing");
      if (flag(a, "single_word", origin, at + ".")) {
        fail(origin, at + ".single_word: true is not supported");
      }
      AddedToken t;
      t.id = static_cast<int32_t>(id->get<int64_t>());
      t.content = content->get<std::string>();
      t.special = flag(a, "special", origin, at + ".");
      t.lstrip = flag(a, "lstrip", origin, at + ".");
      t.rstrip = flag(a, "rstrip", origin, at + ".");
      tokens.push_back(std::move(t));
    }
  }
  return tokens;
}

}  // namespace

Tokenizer Tokenizer::from_document(const nlohmann::json& doc, std::string json_text,
                                   const std::string& origin) {
  auto impl = std::make_unique<Impl>();
  impl->origin = origin;
  if (!doc.is_object()) fail(origin, "not a tokenizer.json (not a JSON object)");
  const Json* model = member(doc, "model");
  if (!model || !model->is_object()) fail(origin, "model: missing (not a tokenizer.json)");
  check_bpe_model(*model, origin);
  impl->ignore_merges = flag(*model, "ignore_merges", origin, "model.");

  // normalizer: none, or NFC.
  if (const Json* normalizer = member(doc, "normalizer")) {
    const Json* t = member(*normalizer, "type");
    if (!t || *t != "NFC") {
      fail(origin, "normalizer.type: " + (t ? t->dump() : std::string("missing")) +
                       " is not supported (ampctl knows null and \"NFC\")");
    }
    impl->nfc = true;
  }

  impl->pattern = read_pre_tokenizer(doc, origin);
  if (const Json* decoder = member(doc, "decoder")) {
    const Json* t = member(*decoder, "type");
    if (!t || *t != "ByteLevel") {
      fail(origin, "decoder.type: " + (t ? t->dump() : std::string("missing")) +
                       " is not supported (expected \"ByteLevel\")");
    }
  }

  const Json* vocab = member(*model, "vocab");
  if (!vocab || !vocab->is_object()) fail(origin, "model.vocab: missing or not an object");
  std::vector<std::pair<std::string, int64_t>> entries;
  entries.reserve(vocab->size());
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer()) {
      fail(origin, "model.vocab: " + show(token) + ": the id " + id.dump() + " is not an integer");
    }
    entries.emplace_back(token, id.get<int64_t>());
  }
  impl->set_vocab(entries, "model.vocab");

  const Json* merges = member(*model, "merges");
  if (!merges || !merges->is_array()) fail(origin, "model.merges: missing or not an array");
  impl->merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const Json& m = (*merges)[i];
    const std::string field = "model.merges[" + std::to_string(i) + "]";
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        fail(origin, field + ": " + show(s) + " is not two tokens separated by one space");
      }
      impl->add_merge(std::string_view(s).substr(0, space), std::string_view(s).substr(space + 1),
                      i, field);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      impl->add_merge(m[0].get_ref<const std::string&>(), m[1].get_ref<const std::string&>(), i,
                      field);
    } else {
      fail(origin, field + ": " + m.dump() + " is not a merge (\"a b\" or [\"a\", \"b\"])");
    }
  }

  impl->added = read_added_tokens(doc, origin);
  impl->finish("added_tokens");
  impl->json_text = std::move(json_text);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_gpt2_files(const std::string& vocab_json, const std::string& merges_txt,
                                     const std::string& vocab_origin,
                                     const std::string& merges_origin) {
  auto impl = std::make_unique<Impl>();
  impl->origin = vocab_origin;
  Json vocab;
  try {
    vocab = Json::parse(vocab_json);
  } catch (const Json::exception& e) {
    fail(vocab_origin, std::string("not JSON: ") + e.what());
  }
  if (!vocab.is_object()) fail(vocab_origin, "not a vocabulary (a JSON object token -> id)");
  std::vector<std::pair<std::string, int64_t>> entries;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer()) {
      fail(vocab_origin, show(token) + ": the id " + id.dump() + " is not an integer");
    }
    entries.emplace_back(token, id.get<int64_t>());
  }
  impl->set_vocab(entries, "the vocabulary");
  impl->origin = merges_origin;
  Json merges = Json::array();
  size_t line_no = 0, rank = 0;
  for (size_t start = 0; start < merges_txt.size();) {
    size_t end = merges_txt.find('\n', start);
    if (end == std::string::npos) end = merges_txt.size();
    std::string_view line(merges_txt.data() + start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    const std::string field = "line " + std::to_string(line_no);
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      fail(merges_origin, field + ": " + show(line) + " is not two tokens separated by a space");
    }
    impl->add_merge(line.substr(0, space), line.substr(space + 1), rank++, field);
    merges.push_back(std::string(line));
  }
  impl->origin = vocab_origin;
  if (const auto it = impl->token_to_id.find("<|endoftext|>"); it != impl->token_to_id.end()) {
    impl->added.push_back({it->second, "<|endoftext|>", true, false, false});
  }
  impl->finish("added_tokens");
  // The tokenizer.json Hugging Face's GPT2TokenizerFast saves for these files.
  Json doc = {{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", Json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer",
               {{"type", "ByteLevel"},
                {"add_prefix_space", false},
                {"trim_offsets", true},
                {"use_regex", true}}},
              {"post_processor",
               {{"type", "ByteLevel"},
                {"add_prefix_space", true},
                {"trim_offsets", false},
                {"use_regex", true}}},
              {"decoder",
               {{"type", "ByteLevel"},
                {"add_prefix_space", true},
                {"trim_offsets", true},
                {"use_regex", true}}},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merges}}}};
  for (const AddedToken& t : impl->added) {
    doc["added_tokens"].push_back({{"id", t.id},
                                   {"content", t.content},
                                   {"single_word", false},
                                   {"lstrip", false},
                                   {"rstrip", false},
                                   {"normalized", true},
                                   {"special", true}});
  }
  impl->json_text = doc.dump();
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw Error{ErrorKind::input, "tokenizer " + path.string() + ": no such file or folder",
                "give a tokenizer.json, a folder holding one, or GPT-2's vocab.json (with "
                "merges.txt beside it)"};
  }
  fs::path file = path;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path / "tokenizer.json", ec)) {
      file = path / "tokenizer.json";
    } else if (fs::exists(path / "vocab.json", ec) && fs::exists(path / "merges.txt", ec)) {
      file = path / "vocab.json";
    } else {
      throw Error{ErrorKind::input,
                  "tokenizer " + path.string() +
                      ": the folder holds neither tokenizer.json nor vocab.json + merges.txt"};
    }
  }
  std::string text = read_regular_file(file, kMaxTokenizerBytes, "tokenizer");
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::exception& e) {
    fail(file.string(), std::string("not JSON: ") + e.what());
  }
  // tokenizer.json has a "model" object; GPT-2's vocab.json is a flat object of ids.
  const Json* model = member(doc, "model");
  if (!(model && model->is_object())) {
    const fs::path merges = file.parent_path() / "merges.txt";
    if (!fs::exists(merges, ec)) {
      throw Error{ErrorKind::input, file.string() +
                                        ": a vocab.json needs merges.txt beside it, and " +
                                        merges.string() + " does not exist"};
    }
    Tokenizer t = from_gpt2_files(text, read_regular_file(merges, kMaxTokenizerBytes, "merges"),
                                  file.string(), merges.string());
    t.m->pick_bos_eos({});
    return t;
  }
  Tokenizer t = from_document(doc, std::move(text), file.string());
  t.m->pick_bos_eos(file.parent_path() / "tokenizer_config.json");
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const std::string& what, int threads,
                                       const std::function<void(size_t)>& progress) const {
  return encode_chunked(text, what, threads, 0, progress);
}

std::vector<int32_t> Tokenizer::encode_chunked(std::string_view text, const std::string& what,
                                               int threads, size_t chunk_bytes,
                                               const std::function<void(size_t)>& progress) const {
  if (const auto bad = utf8_error_offset(text)) {
    throw Error{ErrorKind::input, what + ": byte " + std::to_string(*bad) + ": not valid UTF-8",
                "a tokenizer reads UTF-8 text"};
  }
  threads = std::max(threads, 1);
  if (chunk_bytes == 0) {
    chunk_bytes = threads == 1 ? text.size() + 1
                               : std::max<size_t>(size_t{1} << 16, text.size() / (threads * 16));
  }
  // The pieces: stretches of text (cut at chunk boundaries) and added tokens, in order.
  struct Piece {
    size_t begin = 0, end = 0;
    int32_t added = -1;
  };
  std::vector<Piece> pieces;
  const auto add_text = [&](size_t begin, size_t end) {
    while (begin < end) {
      size_t cut = end;
      if (end - begin > chunk_bytes) {
        cut = begin + chunk_bytes;
        while (cut < end && !is_chunk_boundary(text, cut)) ++cut;
      }
      pieces.push_back({begin, cut, -1});
      begin = cut;
    }
  };
  const auto space_before = [&](size_t pos, size_t floor) {
    while (pos > floor) {
      size_t start = pos - 1;
      while (start > floor && (static_cast<unsigned char>(text[start]) & 0xc0) == 0x80) --start;
      size_t len = 0;
      if (!is_white_space(decode_utf8(text, start, &len))) break;
      pos = start;
    }
    return pos;
  };
  size_t done = 0;  // text before this is in pieces
  for (size_t pos = 0; pos < text.size();) {
    const auto& candidates = m->added_by_first_byte[static_cast<unsigned char>(text[pos])];
    const AddedToken* hit = nullptr;
    for (const size_t i : candidates) {
      const AddedToken& t = m->added[i];
      if (text.compare(pos, t.content.size(), t.content) == 0) {
        hit = &t;
        break;
      }
    }
    if (!hit) {
      ++pos;
      continue;
    }
    size_t begin = pos, end = pos + hit->content.size();
    if (hit->lstrip) begin = space_before(begin, done);
    if (hit->rstrip) {
      size_t len = 0;
      while (end < text.size() && is_white_space(decode_utf8(text, end, &len))) end += len;
    }
    add_text(done, begin);
    pieces.push_back({begin, end, hit->id});
    done = pos = end;
  }
  add_text(done, text.size());

  std::vector<std::vector<int32_t>> results(pieces.size());
  std::atomic<size_t> next{0}, bytes_done{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  const auto work = [&](bool main_thread) {
    WordCache cache;
    try {
      for (size_t i = next++; i < pieces.size() && !failed && stop_request() == 0; i = next++) {
        const Piece& p = pieces[i];
        if (p.added >= 0) {
          results[i].push_back(p.added);
        } else {
          m->encode_words(text.substr(p.begin, p.end - p.begin), results[i], cache);
        }
        bytes_done += p.end - p.begin;
        if (main_thread && progress) progress(bytes_done.load());
      }
    } catch (...) {
      if (!failed.exchange(true)) error = std::current_exception();
    }
  };
  const int n_threads =
      static_cast<int>(std::min<size_t>(threads, std::max<size_t>(pieces.size(), 1)));
  {
    std::vector<std::jthread> pool;
    for (int t = 1; t < n_threads; ++t) {
      // A thread that cannot start (a memory or thread limit) leaves its share to the others:
      // the ids do not depend on the thread count.
      try {
        pool.emplace_back(work, false);
      } catch (const std::system_error&) {
        break;
      }
    }
    work(true);
  }
  if (error) std::rethrow_exception(error);
  check_stop(("tokenizing " + what).c_str());
  size_t total = 0;
  for (const auto& r : results) total += r.size();
  std::vector<int32_t> ids;
  ids.reserve(total);
  for (auto& r : results) {
    ids.insert(ids.end(), r.begin(), r.end());
    std::vector<int32_t>().swap(r);
  }
  if (progress) progress(text.size());
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (const int32_t id : ids) {
    if (id < 0 || id >= m->vocab_size || !m->id_valid[static_cast<size_t>(id)]) {
      throw Error{ErrorKind::invalid_argument,
                  "decode: " + std::to_string(id) + " is not a token id of " + m->origin};
    }
    out += m->id_bytes[static_cast<size_t>(id)];
  }
  return out;
}

int64_t Tokenizer::vocab_size() const {
  return m->vocab_size;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  const auto it = m->token_to_id.find(token);
  if (it == m->token_to_id.end()) return std::nullopt;
  return it->second;
}

std::string Tokenizer::token_string(int32_t id) const {
  if (id < 0 || id >= m->vocab_size || !m->id_valid[static_cast<size_t>(id)]) return {};
  return m->id_token[static_cast<size_t>(id)];
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const {
  return m->added;
}
std::optional<int32_t> Tokenizer::bos_id() const {
  return m->bos;
}
std::optional<int32_t> Tokenizer::eos_id() const {
  return m->eos;
}
Pattern Tokenizer::pattern() const {
  return m->pattern;
}
bool Tokenizer::normalizes_nfc() const {
  return m->nfc;
}
const std::string& Tokenizer::json() const {
  return m->json_text;
}
std::string Tokenizer::content_hash() const {
  return fnv1a64_hex(m->json_text);
}

std::string Tokenizer::describe() const {
  return "byte-level BPE, " + std::to_string(m->vocab_size) + " tokens, " +
         std::to_string(m->merge_count) + " merges, " + pattern_name(m->pattern) +
         " pre-tokenizer" + (m->nfc ? ", NFC" : "") +
         (m->added.empty() ? "" : ", " + std::to_string(m->added.size()) + " added tokens");
}

}  // namespace ampctl::tokenize
