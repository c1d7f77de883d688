// Fuzzes the language-model readers (data/lm.h) through the files they read: a text file with a
// character or byte vocabulary, or a token file (auto, raw, llm.c).
//
// Input: byte 0 picks the reader (% 5: text char, text byte, tokens auto, tokens raw, tokens
// llmc), byte 1 the vocab_size of a token file (1 + byte * 257); the rest is the file. Checked:
// every result holds only ids below the vocabulary size, a character vocabulary decodes its
// tokens back to the file's bytes, and every refusal is Error{input} naming the file.
#include <string>

#include "ampctl/core/error.h"
#include "ampctl/data/lm.h"
#include "fuzz_util.h"

using namespace ampctl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int mode = data[0] % 5;
  const int64_t vocab_size = 1 + int64_t{data[1]} * 257;
  const std::string_view rest = fuzz::as_text(data + 2, size - 2);
  const fuzz::MemFile file(rest);
  try {
    if (mode < 2) {
      std::optional<data::Vocab> vocab;
      const data::TokenSet set = data::load_text(
          file.path(), mode == 0 ? data::VocabKind::character : data::VocabKind::byte, vocab);
      if (!vocab) fuzz::invariant_failed("load_text returned no vocabulary");
      for (const int32_t id : set.tokens) {
        if (id < 0 || id >= vocab->size()) fuzz::invariant_failed("a text id is out of range");
      }
      if (vocab->decode(set.tokens) != rest) {
        fuzz::invariant_failed("the tokens do not decode to the file");
      }
    } else {
      const data::TokenFormat format = mode == 2   ? data::TokenFormat::automatic
                                       : mode == 3 ? data::TokenFormat::raw
                                                   : data::TokenFormat::llmc;
      const data::TokenSet set = data::load_token_file(file.path(), format, vocab_size);
      if (set.tokens.empty()) fuzz::invariant_failed("load_token_file returned no tokens");
      for (const int32_t id : set.tokens) {
        if (id < 0 || id >= vocab_size) fuzz::invariant_failed("a token id is out of range");
      }
    }
  } catch (const Error& e) {
    fuzz::check_refusal(e, ErrorKind::input, file.path());
  }
  return 0;
}
