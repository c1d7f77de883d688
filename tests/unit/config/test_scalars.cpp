// The scalar grammar (YAML 1.2 core schema, strictly), the float and string writers (checked by
// reading back what they write, for random doubles over the whole range and awkward strings),
// and the did-you-mean distance.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "ampctl/config/document.h"
#include "ampctl/config/problems.h"
#include "ampctl/config/scalars.h"

namespace ampctl::config {
namespace {

Value plain(const std::string& text) {
  Value v;
  v.kind = Value::Kind::scalar;
  v.text = text;
  return v;
}

Value quoted(const std::string& text) {
  Value v = plain(text);
  v.plain = false;
  return v;
}

TEST(ConfigScalars, Integers) {
  int64_t x = 0;
  EXPECT_EQ(read_int(plain("42"), x), ReadStatus::ok);
  EXPECT_EQ(x, 42);
  EXPECT_EQ(read_int(plain("+7"), x), ReadStatus::ok);
  EXPECT_EQ(x, 7);
  EXPECT_EQ(read_int(plain("-9223372036854775808"), x), ReadStatus::ok);
  EXPECT_EQ(x, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(read_int(plain("9223372036854775808"), x), ReadStatus::out_of_range);
  for (const char* bad : {"1.0", "1e3", "0x10", "0o7", "1_000", "", "-", "+", " 1", "1 ", "one"}) {
    EXPECT_EQ(read_int(plain(bad), x), ReadStatus::wrong_type) << bad;
  }
  EXPECT_EQ(read_int(quoted("5"), x), ReadStatus::wrong_type);  // a quoted 5 is a string
}

TEST(ConfigScalars, Floats) {
  double x = 0;
  const std::pair<const char*, double> good[] = {
      {"1", 1.0},     {"-2", -2.0},       {"0.5", 0.5},        {".5", 0.5},
      {"5.", 5.0},    {"1e3", 1000.0},    {"1.0e-3", 1e-3},    {"+1.5E+2", 150.0},
      {"-0.0", -0.0}, {"5e-324", 5e-324}, {"65536.0", 65536.0}};
  for (const auto& [text, value] : good) {
    ASSERT_EQ(read_float(plain(text), x), ReadStatus::ok) << text;
    EXPECT_EQ(x, value) << text;
  }
  for (const char* inf : {".inf", ".Inf", ".INF", "+.inf"}) {
    ASSERT_EQ(read_float(plain(inf), x), ReadStatus::ok);
    EXPECT_EQ(x, std::numeric_limits<double>::infinity());
  }
  ASSERT_EQ(read_float(plain("-.inf"), x), ReadStatus::ok);
  EXPECT_EQ(x, -std::numeric_limits<double>::infinity());
  ASSERT_EQ(read_float(plain(".nan"), x), ReadStatus::ok);
  EXPECT_TRUE(std::isnan(x));
  // JSON's stand-in for infinity: quoted, still a float.
  ASSERT_EQ(read_float(quoted(".inf"), x), ReadStatus::ok);
  EXPECT_EQ(read_float(plain("1e400"), x), ReadStatus::out_of_range);
  for (const char* bad : {"inf", "nan", "Infinity", "e3", "1e", "1e+", ".", "-.", "0x1p3", "1,5",
                          "1.5.2", "1_0", "", " 1"}) {
    EXPECT_EQ(read_float(plain(bad), x), ReadStatus::wrong_type) << bad;
  }
  EXPECT_EQ(read_float(quoted("1.5"), x), ReadStatus::wrong_type);
}

TEST(ConfigScalars, Bools) {
  for (const char* t : {"true", "True", "TRUE"}) EXPECT_EQ(read_bool(plain(t)), true);
  for (const char* f : {"false", "False", "FALSE"}) EXPECT_EQ(read_bool(plain(f)), false);
  for (const char* bad : {"yes", "no", "on", "off", "y", "n", "1", "0", "tRUE"}) {
    EXPECT_FALSE(read_bool(plain(bad)).has_value()) << bad;
  }
  EXPECT_FALSE(read_bool(quoted("true")).has_value());
}

TEST(ConfigScalars, FormatFloatSpelling) {
  EXPECT_EQ(format_float(65536.0), "65536.0");
  EXPECT_EQ(format_float(1.0), "1.0");
  EXPECT_EQ(format_float(0.5), "0.5");
  EXPECT_EQ(format_float(1e-8), "1.0e-08");
  EXPECT_EQ(format_float(1e-3), "0.001");
  EXPECT_EQ(format_float(-2.5e300), "-2.5e+300");
  EXPECT_EQ(format_float(std::numeric_limits<double>::infinity()), ".inf");
  EXPECT_EQ(format_float(-std::numeric_limits<double>::infinity()), "-.inf");
  EXPECT_EQ(format_float(std::nan("")), ".nan");
  EXPECT_EQ(format_float(-0.0), "-0.0");
}

// Every written float reads back bit for bit, through our reader and as YAML 1.1 would see it
// (a '.' in the mantissa).
TEST(ConfigScalars, FormatFloatRoundTripsRandomDoubles) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) {
    uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    if (std::isnan(d)) continue;
    const std::string text = format_float(d);
    double back = 0;
    ASSERT_EQ(read_float(plain(text), back), ReadStatus::ok) << text;
    uint64_t back_bits;
    std::memcpy(&back_bits, &back, sizeof back);
    ASSERT_EQ(back_bits, bits) << text;
    if (std::isfinite(d)) {
      ASSERT_NE(text.substr(0, text.find('e')).find('.'), std::string::npos) << text;
    }
  }
}

// A written string reads back as the same string (and as a string, not a number or bool).
TEST(ConfigScalars, YamlStringRoundTrips) {
  const std::vector<std::string> strings = {"quickstart",
                                            "/usr/share/datasets/fashion-mnist",
                                            "cuda:0",
                                            "true",
                                            "False",
                                            "yes",
                                            "null",
                                            "~",
                                            "123",
                                            "1.5",
                                            ".inf",
                                            "-",
                                            "-x",
                                            "a b",
                                            "a: b",
                                            "a #b",
                                            "#c",
                                            "[x]",
                                            "{y}",
                                            "'q'",
                                            "\"dq\"",
                                            "back\\slash",
                                            "tab\there",
                                            "new\nline",
                                            "ünïcödé",
                                            "",
                                            " lead",
                                            "trail ",
                                            "trail:",
                                            "x,y",
                                            "&anchor",
                                            "*alias",
                                            "!tag",
                                            "%dir",
                                            "@at",
                                            "`tick`",
                                            "?q",
                                            "|",
                                            ">",
                                            "0x10",
                                            "1_000",
                                            "on",
                                            std::string("nul\0byte", 8),
                                            "\x7f"};
  for (const std::string& s : strings) {
    const std::string doc = "k: " + yaml_string(s) + "\n";
    YAML::Node node;
    ASSERT_NO_THROW(node = YAML::Load(doc)) << doc;
    ASSERT_TRUE(node["k"].IsScalar()) << doc;
    EXPECT_EQ(node["k"].Scalar(), s) << doc;
    const bool plain_form = yaml_string(s).front() != '"';
    if (plain_form) {
      // Plain only when it cannot read as anything but a string.
      int64_t i;
      double f;
      EXPECT_NE(read_int(plain(s), i), ReadStatus::ok) << s;
      EXPECT_NE(read_float(plain(s), f), ReadStatus::ok) << s;
      EXPECT_FALSE(read_bool(plain(s)).has_value()) << s;
      EXPECT_EQ(node["k"].Tag(), "?");
    }
  }
  EXPECT_EQ(yaml_string("quickstart"), "quickstart");
  EXPECT_EQ(yaml_string("true"), "\"true\"");
}

TEST(ConfigScalars, Describe) {
  EXPECT_EQ(describe(plain("0.5")), "0.5");
  EXPECT_EQ(describe(quoted("128")), "\"128\"");
  EXPECT_EQ(describe(Value{}), "null");
  Value list;
  list.kind = Value::Kind::list;
  EXPECT_EQ(describe(list), "a list");
  EXPECT_EQ(describe(plain(std::string(100, 'x'))), std::string(40, 'x') + "...");
  EXPECT_EQ(describe(quoted("a\nb")), "\"a\\nb\"");
}

TEST(ConfigProblems, EditDistance) {
  EXPECT_EQ(edit_distance("growth_interval", "growth_interval"), 0u);
  EXPECT_EQ(edit_distance("growth_intervl", "growth_interval"), 1u);   // deletion
  EXPECT_EQ(edit_distance("grwoth_interval", "growth_interval"), 1u);  // transposition
  EXPECT_EQ(edit_distance("growth_factr", "growth_factor"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

TEST(ConfigProblems, ClosestMatch) {
  const std::vector<std::string> keys = {"growth_factor", "backoff_factor", "growth_interval",
                                         "hysteresis", "lr"};
  EXPECT_EQ(closest_match("growth_intervl", keys), "growth_interval");
  EXPECT_EQ(closest_match("growth_factr", keys), "growth_factor");
  EXPECT_EQ(closest_match("hysterisis", keys), "hysteresis");
  EXPECT_EQ(closest_match("lrr", keys), "lr");
  EXPECT_EQ(closest_match("zebra", keys), "");
  EXPECT_EQ(closest_match("lr", keys), "");  // an exact match is no typo
}

TEST(ConfigProblems, ErrorTextListsProblemsAndHints) {
  Problems p;
  p.add(Where{"--set a=1"}, "a", "unknown key", "did you mean 'b'?");
  p.add(Where{"run.yaml", 12, 3}, "scaler.growth_factor", "must be > 1.0, got 0.5");
  p.add(Where{"run.yaml", 2, 1}, "seed", "must be >= 0, got -1");
  try {
    p.throw_if_any(ErrorKind::config);
    FAIL();
  } catch (const ConfigError& e) {
    // File positions in order first, then the overrides.
    EXPECT_EQ(std::string(e.what()),
              "run.yaml:2:1: seed: must be >= 0, got -1\n"
              "run.yaml:12:3: scaler.growth_factor: must be > 1.0, got 0.5\n"
              "--set a=1: a: unknown key\n"
              "hint: did you mean 'b'?");
    EXPECT_EQ(e.exit_code(), 2);
  }
  EXPECT_NO_THROW(Problems{}.throw_if_any(ErrorKind::config));
}

}  // namespace
}  // namespace ampctl::config
