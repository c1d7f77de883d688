// Fuzzes the checkpoint reader: checkpoint::parse_checkpoint, which `ampctl resume`, `inspect`
// and `export` run on every checkpoint file (JSON, tensors as base64 + crc32), then what those
// commands do with an accepted document: summarize it (inspect) and validate its configuration
// (config::from_json, resume).
//
// Invariant checked on success (checkpoint.h): parse_checkpoint accepts only what serialize can
// produce, so serialize(d) must not throw, must parse back to d, and is a fixed point.
#include <string>

#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "fuzz_util.h"

using namespace ampctl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  checkpoint::CheckpointData parsed;
  try {
    parsed = checkpoint::parse_checkpoint(fuzz::as_text(data, size), "fuzz.json");
  } catch (const Error& e) {
    // refused with a message: the expected outcome for bad input
    fuzz::check_refusal(e, ErrorKind::input, "fuzz.json: ");
    return 0;
  }
  (void)checkpoint::summarize(parsed, "fuzz.json");
  std::string text;
  try {
    text = checkpoint::serialize(parsed);
    const checkpoint::CheckpointData again = checkpoint::parse_checkpoint(text, "serialized");
    if (!(again == parsed)) fuzz::invariant_failed("parse(serialize(d)) != d");
    if (checkpoint::serialize(again) != text) {
      fuzz::invariant_failed("serialize is not a fixed point");
    }
  } catch (const Error& e) {
    fuzz::invariant_failed("an accepted checkpoint does not serialize and parse back: " +
                           std::string(e.what()));
  }
  try {
    (void)config::from_json(parsed.config, "fuzz.json: config");
  } catch (const Error&) {
  }
  return 0;
}
