// The checkpoint document: exact round trips, determinism, the layout of docs/reference.md,
// "Checkpoints", and a corpus of damaged checkpoints each refused with Error{input} naming the file
// and the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/checkpoint/encoding.h"
#include "ampctl/core/error.h"
#include "checkpoint_test_util.h"

namespace ampctl::checkpoint {
namespace {

using testing::make_sample;
using ojson = nlohmann::ordered_json;

constexpr const char* kOrigin = "runs/x/checkpoints/step-00000042.json";

TEST(CheckpointFormat, RoundTripIsExactAndByteIdentical) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    const CheckpointData d = make_sample(seed, 42);
    const std::string text = serialize(d);
    const CheckpointData back = parse_checkpoint(text, kOrigin);
    EXPECT_TRUE(back == d) << "seed " << seed;
    ASSERT_EQ(back.model.size(), d.model.size());
    for (size_t i = 0; i < d.model.size(); ++i) {
      EXPECT_EQ(back.model[i].name, d.model[i].name) << "tensor order must be kept";
      EXPECT_EQ(back.model[i].data, d.model[i].data) << d.model[i].name;
    }
    EXPECT_EQ(serialize(back), text) << "re-serializing a parsed checkpoint changed it";
  }
}

TEST(CheckpointFormat, InputStatisticsRoundTripExactlyAndAreOptional) {
  CheckpointData d = make_sample(4, 7);
  // Doubles that need all 17 digits: the statistics must come back bit for bit.
  d.input = {{"mean", {0.1, 1.0 / 3.0, -2.5e-7}},
             {"pixel_scale", 255},
             {"std", {0.30000000000000004, 1e-9, 7.0}}};
  const std::string text = serialize(d);
  const CheckpointData back = parse_checkpoint(text, kOrigin);
  EXPECT_TRUE(back == d);
  EXPECT_EQ(back.input["mean"][1].get<double>(), 1.0 / 3.0);
  // A checkpoint without them (every older one) parses with none.
  d.input = nullptr;
  EXPECT_TRUE(parse_checkpoint(serialize(d), kOrigin).input.is_null());
  // Malformed statistics are refused, naming the key.
  ojson doc = ojson::parse(text);
  doc["input"]["std"] = {1.0};
  try {
    parse_checkpoint(doc.dump(), kOrigin);
    ADD_FAILURE() << "accepted mean and std of different lengths";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input"), std::string::npos) << e.what();
  }
}

TEST(CheckpointFormat, DeterministicForEqualState) {
  const std::string a = serialize(make_sample(5, 100));
  const std::string b = serialize(make_sample(5, 100));  // built again from scratch
  EXPECT_EQ(a, b);
  EXPECT_NE(a, serialize(make_sample(6, 100))) << "the sample generator ignores its seed";
  // JSON objects built in another key order serialize the same (sections are sorted).
  CheckpointData d = make_sample(5, 100);
  nlohmann::json reordered = nlohmann::json::object();
  for (auto it = d.config.rbegin(); it != d.config.rend(); ++it) reordered[it.key()] = *it;
  d.config = reordered;
  EXPECT_EQ(serialize(d), a);
}

TEST(CheckpointFormat, LayoutFollowsSpec) {
  const CheckpointData d = make_sample(1, 100);
  const std::string text = serialize(d);
  const ojson doc = ojson::parse(text);
  std::vector<std::string> keys;
  for (const auto& [k, v] : doc.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"format", "version", "ampctl_version", "step", "config",
                                            "scaler", "model", "optimizer", "scheduler", "rng",
                                            "data", "metrics", "crc32"}));
  EXPECT_EQ(doc["format"], "ampctl-checkpoint");
  EXPECT_EQ(doc["version"], 1);
  EXPECT_TRUE(doc["ampctl_version"].is_string());
  EXPECT_EQ(doc["step"], 100);
  // PyTorch's types: torch.amp.GradScaler.load_state_dict takes floats and ints.
  EXPECT_TRUE(doc["scaler"]["scale"].is_number_float());
  EXPECT_TRUE(doc["scaler"]["growth_factor"].is_number_float());
  EXPECT_TRUE(doc["scaler"]["backoff_factor"].is_number_float());
  EXPECT_TRUE(doc["scaler"]["growth_interval"].is_number_integer());
  EXPECT_TRUE(doc["scaler"]["_growth_tracker"].is_number_integer());
  const ojson& w = doc["model"]["tensors"]["layers.0.weight"];
  EXPECT_EQ(w["dtype"], "f32");
  EXPECT_EQ(w["shape"], ojson::array({32, 12}));
  EXPECT_EQ(base64_decode(w["data"].get<std::string>()), d.model[0].data);
  EXPECT_EQ(w["crc32"], crc32_hex(crc32(d.model[0].data)));
  EXPECT_TRUE(doc["optimizer"]["tensors"].contains("exp_avg.flat"));
  EXPECT_EQ(doc["optimizer"]["type"], "adamw");
  EXPECT_EQ(text.back(), '\n');
}

TEST(CheckpointFormat, DisabledScalerAndEmptySectionsRoundTrip) {
  CheckpointData d;  // every section {} and no tensors
  d.step = 0;
  const std::string text = serialize(d);
  EXPECT_TRUE(parse_checkpoint(text, kOrigin) == d);
  CheckpointData e = make_sample(3, 7);
  e.scaler = nlohmann::json::object();
  EXPECT_TRUE(parse_checkpoint(serialize(e), kOrigin) == e);
}

TEST(CheckpointFormat, HostTensorConversionKeepsBytes) {
  const CheckpointData d = make_sample(9, 1);
  for (const NamedTensor& t : d.model) {
    const Tensor host = to_host_tensor(t);
    EXPECT_EQ(host.shape(), t.shape);
    EXPECT_EQ(host.dtype(), t.dtype);
    EXPECT_TRUE(from_host_tensor(t.name, host) == t) << t.name;
  }
}

void expect_serialize_refuses(const CheckpointData& d, const std::string& needle) {
  try {
    serialize(d);
    ADD_FAILURE() << "serialize accepted data it should refuse (" << needle << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(CheckpointFormat, SerializeRefusesWhatCouldNotParseBack) {
  CheckpointData d = make_sample(1, 1);
  d.model.push_back(d.model[0]);
  expect_serialize_refuses(d, "layers.0.weight: duplicate name");
  d = make_sample(1, 1);
  d.model[1].data.pop_back();
  expect_serialize_refuses(d, "layers.0.bias: 127 bytes of data, but f32[32] needs 128");
  d = make_sample(1, 1);
  d.optimizer["tensors"] = 1;
  expect_serialize_refuses(d, "'tensors' is reserved");
  d = make_sample(1, 1);
  d.step = -1;
  expect_serialize_refuses(d, "step must be >= 0");
  d = make_sample(1, 1);
  d.scaler["scale"] = 65536;  // an int: PyTorch's GradScaler writes a float
  expect_serialize_refuses(d, "scaler.scale: expected a float");
  d = make_sample(1, 1);
  d.metrics = nlohmann::json::array();
  expect_serialize_refuses(d, "metrics: expected an object");
}

// --- the corpus of damaged checkpoints ---

struct Damage {
  std::string name;
  std::function<std::string(const std::string& good)> make;
  std::string expected;  // a substring of the message
};

std::string edit_json(const std::string& good, const std::function<void(ojson&)>& edit) {
  ojson doc = ojson::parse(good);
  edit(doc);
  return doc.dump(1, '\t');
}

std::function<std::string(const std::string&)> json_edit(std::function<void(ojson&)> edit) {
  return [edit](const std::string& good) { return edit_json(good, edit); };
}

// Replaces one base64 character in the middle of a tensor's data with another valid one, so
// the base64 still decodes (to the same length) and only the CRC can notice.
void flip_data_char(ojson& doc, const char* section, const char* tensor) {
  std::string data = doc[section]["tensors"][tensor]["data"].get<std::string>();
  char& c = data[data.size() / 2];
  c = c == 'A' ? 'B' : 'A';
  doc[section]["tensors"][tensor]["data"] = data;
}

std::vector<Damage> corpus(const std::string& good) {
  std::vector<Damage> c;
  c.push_back({"empty file", [](const std::string&) { return std::string(); }, "empty file"});
  c.push_back(
      {"whitespace only", [](const std::string&) { return std::string("\n  \n"); }, "empty file"});
  c.push_back({"not JSON (text)",
               [](const std::string&) { return std::string("step: 100\nscale: 65536\n"); },
               "not JSON at all (it starts with 's'"});
  c.push_back({"not JSON (binary)",
               [](const std::string&) { return std::string("PK\x03\x04\x14\x00\x00", 7); },
               "not JSON at all (it starts with 'P'"});
  c.push_back({"gzip bytes", [](const std::string&) { return std::string("\x1f\x8b\x08\x00", 4); },
               "not JSON at all (it starts with byte 0x1f"});
  // Cut points: inside the header, inside the config, inside a base64 string, at the end.
  const ojson doc = ojson::parse(good);
  const size_t in_data =
      good.find(
          doc["model"]["tensors"]["layers.0.weight"]["data"].get<std::string>().substr(0, 16)) +
      40;
  for (size_t cut : {size_t{1}, size_t{20}, good.find("\"config\"") + 30, in_data, good.size() / 2,
                     good.size() - 3, good.size() - 2}) {
    c.push_back({"truncated at byte " + std::to_string(cut),
                 [cut](const std::string& g) { return g.substr(0, cut); },
                 "truncated: the JSON ends unexpectedly at byte " + std::to_string(cut)});
  }
  c.push_back({"invalid JSON in the middle",
               [](const std::string& g) {
                 std::string s = g;
                 s[s.find("\"step\":") + 6] = ';';
                 return s;
               },
               "invalid JSON at byte"});
  c.push_back(
      {"trailing garbage", [](const std::string& g) { return g + "}"; }, "invalid JSON at byte"});
  c.push_back({"nested 100000 levels deep (would overflow the stack)",
               [](const std::string& g) {
                 std::string s = g;
                 const std::string deep =
                     "\"deep\": " + std::string(100000, '[') + std::string(100000, ']') + ",";
                 return s.insert(s.find("\"rng\": {") + 8, deep);
               },
               "JSON nested deeper than 128 levels"});
  // Found by fuzzing (tests/fuzz/corpus/checkpoint/number_overflow.json): nlohmann reports a
  // number past double's range as out_of_range, not parse_error; it used to escape uncaught.
  c.push_back({"a number beyond the range of a double",
               [](const std::string& g) {
                 std::string s = g;
                 return s.insert(s.find("\"metrics\": {") + 12, "\"huge\": -1e999,");
               },
               "invalid JSON: number overflow parsing '-1e999' (beyond the range of a double)"});
  c.push_back({"an array", [](const std::string&) { return std::string("[1, 2, 3]"); },
               "not an ampctl checkpoint: the document is an array"});
  c.push_back(
      {"wrong format", json_edit([](ojson& d) { d["format"] = "pytorch"; }),
       "not an ampctl checkpoint: \"format\" is \"pytorch\", expected \"ampctl-checkpoint\""});
  c.push_back({"no format", json_edit([](ojson& d) { d.erase("format"); }),
               "not an ampctl checkpoint: no \"format\" key"});
  c.push_back({"version 2", json_edit([](ojson& d) { d["version"] = 2; }),
               "unsupported checkpoint version 2"});
  c.push_back({"version 2 names the supported one", json_edit([](ojson& d) { d["version"] = 2; }),
               "supports version 1 only"});
  c.push_back({"version as a string", json_edit([](ojson& d) { d["version"] = "1"; }),
               "unsupported checkpoint version \"1\""});
  for (const char* key : {"ampctl_version", "step", "config", "scaler", "model", "optimizer",
                          "scheduler", "rng", "data", "metrics"}) {
    c.push_back({std::string("missing ") + key, json_edit([key](ojson& d) { d.erase(key); }),
                 std::string("missing top-level key '") + key + "'"});
  }
  c.push_back({"unknown top-level key", json_edit([](ojson& d) { d["extra"] = 1; }),
               "unknown top-level key 'extra'"});
  c.push_back({"negative step", json_edit([](ojson& d) { d["step"] = -5; }),
               "step: expected an integer >= 0, got -5"});
  c.push_back({"step as a float", json_edit([](ojson& d) { d["step"] = 4.5; }),
               "step: expected an integer >= 0, got 4.5"});
  c.push_back({"config not an object", json_edit([](ojson& d) { d["config"] = "fp16"; }),
               "config: expected an object, got string"});
  for (const char* key :
       {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}) {
    c.push_back({std::string("scaler without ") + key,
                 json_edit([key](ojson& d) { d["scaler"].erase(key); }),
                 std::string("scaler: missing key '") + key + "'"});
  }
  c.push_back({"string growth tracker",
               json_edit([](ojson& d) { d["scaler"]["_growth_tracker"] = "37"; }),
               "scaler._growth_tracker: expected an integer, got string \"37\""});
  c.push_back({"float growth interval",
               json_edit([](ojson& d) { d["scaler"]["growth_interval"] = 2000.0; }),
               "scaler.growth_interval: expected an integer, got number 2000.0"});
  c.push_back({"integer scale", json_edit([](ojson& d) { d["scaler"]["scale"] = 65536; }),
               "scaler.scale: expected a float, got number 65536"});
  c.push_back({"null scale (NaN written by a JSON library)",
               json_edit([](ojson& d) { d["scaler"]["scale"] = nullptr; }),
               "scaler.scale: expected a float, got null"});
  c.push_back({"negative growth tracker",
               json_edit([](ojson& d) { d["scaler"]["_growth_tracker"] = -1; }),
               "scaler._growth_tracker: must be >= 0"});
  c.push_back({"unknown scaler key", json_edit([](ojson& d) { d["scaler"]["hysteresis"] = 2; }),
               "scaler: unknown key 'hysteresis'"});
  c.push_back({"flipped byte in model tensor data",
               json_edit([](ojson& d) { flip_data_char(d, "model", "layers.0.weight"); }),
               "model tensor layers.0.weight: crc32 mismatch: stored "});
  c.push_back({"flipped byte in optimizer tensor data",
               json_edit([](ojson& d) { flip_data_char(d, "optimizer", "exp_avg_sq.flat"); }),
               "optimizer tensor exp_avg_sq.flat: crc32 mismatch: stored "});
  c.push_back({"shape disagrees with byte count", json_edit([](ojson& d) {
                 d["model"]["tensors"]["layers.0.bias"]["shape"] = ojson::array({33});
               }),
               "model tensor layers.0.bias: byte count mismatch: data holds 128 bytes, but "
               "f32[33] needs 132"});
  c.push_back({"data shorter than the shape (valid base64)", json_edit([](ojson& d) {
                 std::string s = d["model"]["tensors"]["layers.0.bias"]["data"];
                 d["model"]["tensors"]["layers.0.bias"]["data"] = s.substr(4);
               }),
               "model tensor layers.0.bias: byte count mismatch: data holds 125 bytes"});
  c.push_back({"bad base64", json_edit([](ojson& d) {
                 std::string s = d["model"]["tensors"]["layers.0.bias"]["data"];
                 s[5] = '*';
                 d["model"]["tensors"]["layers.0.bias"]["data"] = s;
               }),
               "model tensor layers.0.bias: data: invalid base64: '*' at offset 5"});
  c.push_back({"unknown dtype",
               json_edit([](ojson& d) { d["model"]["tensors"]["counts"]["dtype"] = "f64"; }),
               "model tensor counts: unknown dtype \"f64\""});
  c.push_back({"negative dimension", json_edit([](ojson& d) {
                 d["model"]["tensors"]["counts"]["shape"] = ojson::array({-3, 1, -7});
               }),
               "model tensor counts: shape [-3,1,-7]: dimensions must be integers >= 0"});
  // Found by fuzzing (tests/fuzz/corpus/checkpoint/rank8.json): a shape of more than
  // Shape::kMaxRank dimensions was refused by Shape itself, as invalid_argument without the file.
  c.push_back(
      {"more dimensions than a tensor can have", json_edit([](ojson& d) {
         d["model"]["tensors"]["counts"]["shape"] = ojson::array({1, 1, 1, 1, 1, 1, 1, 2});
       }),
       "model tensor counts: shape [1,1,1,1,1,1,1,2]: 8 dimensions, tensors have at most 6"});
  c.push_back({"shape not an array",
               json_edit([](ojson& d) { d["model"]["tensors"]["counts"]["shape"] = "3x7"; }),
               "model tensor counts: shape: expected an array, got string"});
  c.push_back({"upper-case crc32", json_edit([](ojson& d) {
                 std::string s = d["model"]["tensors"]["counts"]["crc32"];
                 for (char& ch : s) ch = static_cast<char>(std::toupper(ch));
                 d["model"]["tensors"]["counts"]["crc32"] = s + "X";
               }),
               "model tensor counts: crc32: expected 8 lowercase hex digits"});
  c.push_back({"tensor without crc32",
               json_edit([](ojson& d) { d["model"]["tensors"]["counts"].erase("crc32"); }),
               "model tensor counts: missing key 'crc32'"});
  c.push_back({"model without tensors", json_edit([](ojson& d) { d["model"].erase("tensors"); }),
               "model: missing key 'tensors'"});
  c.push_back({"tensor entry not an object",
               json_edit([](ojson& d) { d["model"]["tensors"]["counts"] = 3; }),
               "model tensor counts: expected an object, got number"});
  return c;
}

TEST(CheckpointFormat, DamagedCorpusIsRefusedWithTheProblemNamed) {
  const std::string good = serialize(make_sample(11, 42));
  ASSERT_NO_THROW(parse_checkpoint(good, kOrigin));
  const std::vector<Damage> cases = corpus(good);
  EXPECT_GE(cases.size(), 50u);
  for (const Damage& damage : cases) {
    const std::string text = damage.make(good);
    try {
      parse_checkpoint(text, kOrigin);
      ADD_FAILURE() << damage.name << ": accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::input) << damage.name << ": " << msg;
      EXPECT_EQ(msg.rfind(std::string(kOrigin) + ": ", 0), 0u)
          << damage.name << ": the message must start with the file: " << msg;
      EXPECT_NE(msg.find(damage.expected), std::string::npos)
          << damage.name << ":\n  expected: " << damage.expected << "\n  got:      " << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << damage.name << ": threw a non-ampctl exception: " << e.what();
    }
  }
}

TEST(CheckpointFormat, CrcMismatchReportsBothValues) {
  const CheckpointData d = make_sample(4, 1);
  ojson doc = ojson::parse(serialize(d));
  doc["model"]["tensors"]["layers.0.weight"]["crc32"] = "1a2b3c4d";
  try {
    parse_checkpoint(doc.dump(), kOrigin);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("layers.0.weight: crc32 mismatch: stored 1a2b3c4d, computed " +
                                   crc32_hex(crc32(d.model[0].data))),
        std::string::npos)
        << e.what();
  }
}

// Every single-byte truncation of a small checkpoint is refused (none crashes, none loads).
TEST(CheckpointFormat, EveryTruncationOfASmallCheckpointIsRefused) {
  CheckpointData d;
  d.step = 3;
  d.scaler = {{"scale", 2.0},
              {"growth_factor", 2.0},
              {"backoff_factor", 0.5},
              {"growth_interval", 10},
              {"_growth_tracker", 1}};
  d.model.push_back(testing::tensor_of<float>("w", DType::f32, {2}, {1.5f, -2.0f}));
  const std::string text = serialize(d);
  const size_t complete = text.find_last_not_of("\n\t ") + 1;
  for (size_t cut = 0; cut < complete; ++cut) {
    EXPECT_THROW(parse_checkpoint(text.substr(0, cut), kOrigin), Error) << "cut at " << cut;
  }
}

TEST(CheckpointFormat, SummaryCountsParameters) {
  const CheckpointData d = make_sample(2, 77);
  const ojson s = summarize(d, "x.json");
  EXPECT_EQ(s["step"], 77);
  EXPECT_EQ(s["parameters"], 32 * 12 + 32 + 16 * 32 + 16 + 5 * 16 + 21 + 0 + 1);
  EXPECT_EQ(s["precision"], "fp16");
  EXPECT_EQ(s["scale"], 32768.0);
  EXPECT_EQ(s["growth_tracker"], d.scaler["_growth_tracker"]);
  EXPECT_EQ(s["last_loss"], d.metrics["last_loss"]);
  EXPECT_EQ(s["tensors"].size(), d.model.size());
  EXPECT_EQ(s["tensors"][3]["name"], "layers.2.norm");
  EXPECT_EQ(s["tensors"][3]["dtype"], "f16");
}

}  // namespace
}  // namespace ampctl::checkpoint

namespace ampctl::checkpoint {
namespace {

// A language model's vocabulary: the optional top-level "vocab", last; a checkpoint without one
// (every older checkpoint, every other run's) still parses, and a malformed one is refused.
TEST(CheckpointFormat, VocabIsOptionalAndChecked) {
  CheckpointData d = make_sample(4, 10);
  const std::string without = serialize(d);
  EXPECT_EQ(without.find("\"vocab\""), std::string::npos);
  EXPECT_TRUE(parse_checkpoint(without, kOrigin).vocab.is_null());
  d.vocab = nlohmann::json::array({"\n", " ", "a", "\xc3\xa9"});
  const std::string with = serialize(d);
  const ojson doc = ojson::parse(with);
  EXPECT_EQ(std::prev(std::prev(doc.end())).key(), "vocab");
  EXPECT_EQ(std::prev(doc.end()).key(), "crc32");
  const CheckpointData back = parse_checkpoint(with, kOrigin);
  EXPECT_EQ(back.vocab, d.vocab);
  EXPECT_EQ(serialize(back), with);
  for (const nlohmann::json& bad :
       {nlohmann::json::object(), nlohmann::json::array(), nlohmann::json::array({"a", 3})}) {
    ojson broken = doc;
    broken["vocab"] = ojson(bad);
    try {
      parse_checkpoint(broken.dump(), kOrigin);
      ADD_FAILURE() << "accepted vocab " << bad.dump();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input);
      EXPECT_NE(std::string(e.what()).find("vocab"), std::string::npos) << e.what();
    }
    d.vocab = bad;
    EXPECT_THROW(serialize(d), Error);
  }
}

// The document's crc32 covers everything but the tensors' data (their own crc32 covers that):
// an edit of the configuration, the scaler, the metrics or a vocabulary is refused; a document
// without it (written before it existed) is read as it was.
TEST(CheckpointFormat, DocumentCrcCoversEverySection) {
  CheckpointData d = make_sample(8, 10);
  d.vocab = nlohmann::json::array({"a", "b"});
  const std::string good = serialize(d);
  ASSERT_NO_THROW(parse_checkpoint(good, kOrigin));
  const std::vector<std::function<void(ojson&)>> edits = {
      [](ojson& doc) { doc["config"]["seed"] = 8; },
      [](ojson& doc) { doc["metrics"]["skipped_steps"] = 4; },
      [](ojson& doc) { doc["vocab"][1] = "c"; },
      [](ojson& doc) { doc["scheduler"]["type"] = "cosine"; },
      [](ojson& doc) { doc["optimizer"]["step"] = 11; },
  };
  for (const auto& edit : edits) {
    ojson doc = ojson::parse(good);
    edit(doc);
    try {
      parse_checkpoint(doc.dump(1, '\t'), kOrigin);
      ADD_FAILURE() << "an edited document was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input);
      EXPECT_NE(std::string(e.what()).find("crc32 mismatch over the document"), std::string::npos)
          << e.what();
    }
    // Without the document's crc32, the same edit is what an older checkpoint holds.
    doc.erase("crc32");
    EXPECT_NO_THROW(parse_checkpoint(doc.dump(), kOrigin));
  }
  // Reformatted (compact, no tabs) but not edited: the same document.
  EXPECT_NO_THROW(parse_checkpoint(ojson::parse(good).dump(), kOrigin));
}

// Values no run writes are refused with the tensor and the element named.
TEST(CheckpointFormat, TensorDomainsAreChecked) {
  struct Case {
    const char* name;
    DType dtype;
    std::vector<float> values;
    bool optimizer;
    const char* expected;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {"layers.0.weight",
       DType::f32,
       {1, nan},
       false,
       "model tensor layers.0.weight: element 1 is nan"},
      {"bn.running_var", DType::f32, {1, -0.5f}, false, "element 1 is -0.5: a variance"},
      {"bn.running_mean", DType::f32, {-inf}, false, "element 0 is -inf: not finite"},
      {"param_groups.0.exp_avg_sq", DType::f32, {0, -1}, true, "element 1 is -1: a variance"},
      {"param_groups.0.momentum_buffer", DType::f32, {inf}, true, "element 0 is inf: not finite"},
      {"param_groups.0.step", DType::i32, {11}, true, "than the checkpoint's 10"},
      {"param_groups.0.step", DType::i32, {-1}, true, "a counter must be an integer >= 0"},
      {"bn.num_batches_tracked", DType::i32, {-2}, false, "a counter must be an integer >= 0"},
  };
  for (const Case& c : cases) {
    CheckpointData d = make_sample(3, 10);
    NamedTensor t;
    t.name = c.name;
    t.dtype = c.dtype;
    t.shape = {static_cast<int64_t>(c.values.size())};
    t.data.resize(c.values.size() * 4);
    for (size_t i = 0; i < c.values.size(); ++i) {
      if (c.dtype == DType::i32) {
        const auto v = static_cast<int32_t>(c.values[i]);
        std::memcpy(t.data.data() + 4 * i, &v, 4);
      } else {
        std::memcpy(t.data.data() + 4 * i, &c.values[i], 4);
      }
    }
    std::vector<NamedTensor>& list = c.optimizer ? d.optimizer_tensors : d.model;
    std::erase_if(list, [&](const NamedTensor& x) { return x.name == t.name; });  // replaced
    list.push_back(t);
    try {
      parse_checkpoint(serialize(d), kOrigin);
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input);
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.name), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ampctl::checkpoint
