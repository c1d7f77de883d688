// Sweep expansion: --grid flags, the sweep: section's grid / runs / random / seeds, comma
// splitting, run names and validation before anything runs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/sweep/sweep.h"
#include "test_util.h"

namespace ampctl::sweep {
namespace {

const char* kBase = R"(name: tiny
device: cpu
model: {type: mlp, hidden: [8]}
data:
  train: {source: synthetic, task: classification, samples: 128, features: 4, classes: 3}
  batch_size: 32
training: {max_steps: 4}
)";

std::vector<std::vector<std::string>> overrides_of(const Sweep& s) {
  std::vector<std::vector<std::string>> out;
  for (const Run& r : s.runs) out.push_back(r.overrides);
  return out;
}

std::string error_of(Sweep s) {
  try {
    validate(s);
  } catch (const Error& e) {
    return std::string(e.what()) + "\nhint: " + e.hint();
  }
  return {};
}

// parse_sweep's refusal of kBase + `sweep_text` with --grid `flags` (exit 2), or "no error".
std::string refusal_of(const std::string& sweep_text, const std::vector<std::string>& flags) {
  try {
    parse_sweep(std::string(kBase) + sweep_text, "t.yaml", flags);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  return "no error";
}

// "1,2,...,n".
std::string numbers(int n) {
  std::string out;
  for (int i = 1; i <= n; ++i) {
    if (i > 1) out += ',';
    out += std::to_string(i);
  }
  return out;
}

TEST(SweepSplit, CommasOutsideBrackets) {
  EXPECT_EQ(split_values("1,2, 3"), (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_EQ(split_values("[64,64],[128]"), (std::vector<std::string>{"[64,64]", "[128]"}));
  EXPECT_EQ(split_values("{a: 1, b: 2},'x,y'"),
            (std::vector<std::string>{"{a: 1, b: 2}", "'x,y'"}));
  EXPECT_TRUE(split_values("").empty());
}

TEST(SweepGrid, FlagsMakeCartesianProductLastKeyFastest) {
  const Sweep s = parse_sweep(kBase, "tiny.yaml",
                              {"scaler.init_scale=1024,65536", "scaler.growth_interval=10,100"});
  const std::vector<std::vector<std::string>> want = {
      {"scaler.init_scale=1024", "scaler.growth_interval=10"},
      {"scaler.init_scale=1024", "scaler.growth_interval=100"},
      {"scaler.init_scale=65536", "scaler.growth_interval=10"},
      {"scaler.init_scale=65536", "scaler.growth_interval=100"}};
  EXPECT_EQ(overrides_of(s), want);
  EXPECT_EQ(s.runs[0].name, "init_scale=1024,growth_interval=10");
}

TEST(SweepGrid, SectionIsStrippedAndFlagsReplaceItsAxes) {
  const std::string text = std::string(kBase) +
                           "sweep:\n  grid:\n    scaler.init_scale: [1024, 2048]\n"
                           "    model.hidden: [[8], [4, 4]]\n";
  const Sweep s = parse_sweep(text, "tiny.yaml", {"scaler.init_scale=16"});
  EXPECT_EQ(s.base_text.find("sweep"), std::string::npos);
  ASSERT_EQ(s.runs.size(), 2u);
  EXPECT_EQ(s.runs[0].overrides,
            (std::vector<std::string>{"scaler.init_scale=16", "model.hidden=[8]"}));
  EXPECT_EQ(s.runs[1].overrides,
            (std::vector<std::string>{"scaler.init_scale=16", "model.hidden=[4, 4]"}));
}

TEST(SweepRuns, ExplicitRunsAndSeeds) {
  const std::string text = std::string(kBase) +
                           "sweep:\n  runs: [{optimizer.lr: 0.01}, {optimizer.lr: 0.1, "
                           "scaler.hysteresis: 2}]\n  seeds: [0, 1]\n";
  const Sweep s = parse_sweep(text, "tiny.yaml");
  const std::vector<std::vector<std::string>> want = {
      {"optimizer.lr=0.01", "seed=0"},
      {"optimizer.lr=0.01", "seed=1"},
      {"optimizer.lr=0.1", "scaler.hysteresis=2", "seed=0"},
      {"optimizer.lr=0.1", "scaler.hysteresis=2", "seed=1"}};
  EXPECT_EQ(overrides_of(s), want);
}

// Named runs entries (issue 48 item 7): the name names the run's folder instead of its
// overrides, with the values combined with it (grid, seed) after it; the setting is the name
// without the seed; the name is no override. A key with a control character (the marker that
// carries a name inside the expansion starts with one) is refused.
TEST(SweepRuns, NamedEntriesNameTheirRunsAndSettings) {
  const Sweep s = parse_sweep(std::string(kBase) + R"(sweep:
  runs:
    - {name: base}
    - {name: fast, optimizer.lr: 0.3}
    - {optimizer.lr: 0.01}
  grid: {scaler.init_scale: [1024]}
  seeds: [0, 1]
)",
                              "named.yaml");
  std::vector<std::string> names, settings;
  for (const ampctl::sweep::Run& r : s.runs) {
    names.push_back(r.name);
    settings.push_back(r.setting);
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "base,init_scale=1024,seed=0", "base,init_scale=1024,seed=1",
                       "fast,init_scale=1024,seed=0", "fast,init_scale=1024,seed=1",
                       "lr=0.01,init_scale=1024,seed=0", "lr=0.01,init_scale=1024,seed=1"}));
  EXPECT_EQ(settings,
            (std::vector<std::string>{"base,init_scale=1024", "base,init_scale=1024",
                                      "fast,init_scale=1024", "fast,init_scale=1024", "", ""}));
  EXPECT_EQ(s.runs[2].overrides,
            (std::vector<std::string>{"optimizer.lr=0.3", "scaler.init_scale=1024", "seed=0"}));
  EXPECT_EQ(s.runs[2].said.size(), s.runs[2].overrides.size());
  EXPECT_EQ(s.runs[2].said[0].line, 11);  // optimizer.lr's value in the second entry
  // Two entries with one name, and names that are no folder name: exit 2 naming the line.
  for (const auto& [runs, line, why] : std::vector<std::tuple<std::string, int, std::string>>{
           {"    - {name: a}\n    - {name: a, optimizer.lr: 0.3}\n", 11, "used twice"},
           {"    - {name: a/b}\n", 10, "holds '/'"},
           {"    - {name: .hidden}\n", 10, "starts with '.'"},
           {"    - {name: [x]}\n", 10, "holds '['"}}) {
    try {
      parse_sweep(std::string(kBase) + "sweep:\n  runs:\n" + runs, "bad.yaml");
      ADD_FAILURE() << runs;
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(std::string(e.what()).find("bad.yaml:" + std::to_string(line) + ":"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(
      parse_sweep(std::string(kBase) + "sweep:\n  runs:\n    - {\"\\x01\": 1}\n", "c.yaml"), Error);
  EXPECT_THROW(parse_sweep(kBase, "c.yaml", {std::string("\x01=1,2")}), Error);
}

TEST(SweepRandom, ReproducibleAndWithinBounds) {
  const std::string text = std::string(kBase) +
                           "sweep:\n  random:\n    n: 20\n    seed: 7\n    params:\n"
                           "      optimizer.lr: {log_uniform: [1.0e-4, 1.0e-1]}\n"
                           "      optimizer.weight_decay: {uniform: [0.0, 0.5]}\n"
                           "      scaler.growth_interval: {uniform: [10, 1000]}\n"
                           "      scaler.hysteresis: {choice: [1, 2, 3]}\n";
  const Sweep a = parse_sweep(text, "tiny.yaml");
  const Sweep b = parse_sweep(text, "tiny.yaml");
  ASSERT_EQ(a.runs.size(), 20u);
  EXPECT_EQ(overrides_of(a), overrides_of(b));
  bool low_decade = false, high_decade = false;
  for (const sweep::Run& r : a.runs) {
    ASSERT_EQ(r.overrides.size(), 4u);
    const double lr = std::stod(r.overrides[0].substr(r.overrides[0].find('=') + 1));
    EXPECT_GE(lr, 1e-4);
    EXPECT_LE(lr, 1e-1);
    if (lr < 1e-3) low_decade = true;
    if (lr > 1e-2) high_decade = true;
    const double wd = std::stod(r.overrides[1].substr(r.overrides[1].find('=') + 1));
    EXPECT_GE(wd, 0.0);
    EXPECT_LE(wd, 0.5);
    const std::string gi = r.overrides[2].substr(r.overrides[2].find('=') + 1);
    EXPECT_EQ(gi.find('.'), std::string::npos) << "integer bounds give integers: " << gi;
    const int g = std::stoi(gi);
    EXPECT_GE(g, 10);
    EXPECT_LE(g, 1000);
    const std::string h = r.overrides[3];
    EXPECT_TRUE(h == "scaler.hysteresis=1" || h == "scaler.hysteresis=2" ||
                h == "scaler.hysteresis=3");
  }
  EXPECT_TRUE(low_decade && high_decade) << "log_uniform spreads over the decades";
  Sweep valid = a;
  EXPECT_NO_THROW(validate(valid));
  const std::string other =
      text.substr(0, text.find("seed: 7")) + "seed: 8" + text.substr(text.find("seed: 7") + 7);
  EXPECT_NE(overrides_of(parse_sweep(other, "tiny.yaml")), overrides_of(a));
}

TEST(SweepNames, StableShortAndUnique) {
  EXPECT_EQ(run_name({}), "base");
  EXPECT_EQ(run_name({"model.hidden=[4, 4]"}), "hidden=_4__4_");
  const std::string long_name = run_name({std::string("name=") + std::string(200, 'x')});
  EXPECT_EQ(long_name.rfind("run-", 0), 0u);
  EXPECT_EQ(long_name, run_name({std::string("name=") + std::string(200, 'x')}));
}

TEST(SweepValidate, ResolvesEveryRun) {
  Sweep s = parse_sweep(kBase, "tiny.yaml", {"scaler.init_scale=1024,65536"});
  validate(s);
  EXPECT_EQ(s.base_name, "tiny");
  ASSERT_EQ(s.runs.size(), 2u);
  EXPECT_NE(s.runs[0].resolved_yaml.find("init_scale: 1024"), std::string::npos)
      << s.runs[0].resolved_yaml;
}

TEST(SweepValidate, UnknownKeyNamesRunKeyAndSuggestion) {
  const std::string err =
      error_of(parse_sweep(kBase, "tiny.yaml", {"scaler.growth_intervl=10,100"}));
  EXPECT_NE(err.find("run growth_intervl=10"), std::string::npos) << err;
  EXPECT_NE(err.find("scaler.growth_intervl"), std::string::npos) << err;
  EXPECT_NE(err.find("growth_interval"), std::string::npos) << err;
}

TEST(SweepValidate, WrongTypeAndOutOfRangeNameTheKey) {
  std::string err = error_of(parse_sweep(kBase, "tiny.yaml", {"scaler.growth_interval=10,abc"}));
  EXPECT_NE(err.find("run growth_interval=abc"), std::string::npos) << err;
  EXPECT_NE(err.find("scaler.growth_interval"), std::string::npos) << err;
  EXPECT_EQ(err.find("run growth_interval=10:"), std::string::npos) << err;
  err = error_of(parse_sweep(kBase, "tiny.yaml", {"scaler.growth_factor=0.5"}));
  EXPECT_NE(err.find("scaler.growth_factor"), std::string::npos) << err;
}

TEST(SweepSpecErrors, EmptyValueListsNameTheKey) {
  try {
    parse_grid_flag("scaler.init_scale=");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("scaler.init_scale: empty value list"), std::string::npos);
  }
  try {
    parse_sweep(std::string(kBase) + "sweep:\n  grid: {scaler.hysteresis: []}\n", "t.yaml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("sweep.grid.scaler.hysteresis: empty value list"),
              std::string::npos)
        << e.what();
  }
  try {
    parse_sweep(std::string(kBase) + "sweep:\n  gird: {seed: [1]}\n", "t.yaml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.hint().find("did you mean 'grid'?"), std::string::npos) << e.hint();
  }
  EXPECT_THROW(parse_grid_flag("novalue"), Error);
}

TEST(SweepSpecErrors, AKeyInTwoGridFlagsIsRefused) {
  // Two flags for one key would either drop one list (sweep) or multiply rows that set the key
  // twice (replay): its values belong in one list.
  const std::vector<std::string> flags = {"scaler.init_scale=1,2", "scaler.growth_interval=5",
                                          "scaler.init_scale=3,4"};
  for (const auto& call :
       {std::function<void()>([&] { parse_grid_flags(flags); }),
        std::function<void()>([&] { parse_sweep(kBase, "tiny.yaml", flags); })}) {
    try {
      call();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(std::string(e.what()).find("--grid scaler.init_scale: given by two --grid flags"),
                std::string::npos)
          << e.what();
    }
  }
  // A --grid for a key of the file's own grid still replaces that axis.
  const Sweep spec =
      parse_sweep(std::string(kBase) + "sweep:\n  grid: {scaler.init_scale: [1, 2, 3]}\n", "t.yaml",
                  {"scaler.init_scale=8,16"});
  EXPECT_EQ(spec.runs.size(), 2u);
  EXPECT_EQ(parse_grid_flags({"scaler.init_scale=1,2", "seed=0"}).size(), 2u);
}

TEST(SweepSpecErrors, MoreThanMaxRunsIsRefusedBeforeExpanding) {
  // A random.n or a grid product past kMaxRuns is refused at once (a huge n once kept the
  // expansion busy for minutes); the bound itself is accepted.
  EXPECT_NE(refusal_of("sweep:\n  random: {n: 999999999999, params: {seed: {choice: [1]}}}\n", {})
                .find("t.yaml: sweep.random.n: 999999999999 samples; a sweep has at most 10000"),
            std::string::npos);
  const std::string values = numbers(200);
  EXPECT_NE(refusal_of("sweep:\n  runs: [{optimizer.lr: 1.0e-3}, {optimizer.lr: 2.0e-3}]\n"
                       "  seeds: [0, 1]\n",
                       {"scaler.init_scale=" + values, "scaler.growth_interval=" + values})
                .find("t.yaml: sweep: too many runs (2 runs x 200 values of scaler.init_scale x "
                      "200 values of scaler.growth_interval x 2 seeds); a sweep has at most 10000"),
            std::string::npos);
  // Runs x keys past kMaxOverrides: 10000 samples of 21 params, and 8192 grid runs (13 axes of
  // two values) x 13 + 12 keys of one value each.
  std::string params;
  for (int i = 0; i < 21; ++i) {
    if (i) params += ", ";
    params += 'k';
    params += std::to_string(i);
    params += ": {choice: [1]}";
  }
  EXPECT_NE(refusal_of("sweep:\n  random: {n: 10000, params: {" + params + "}}\n", {})
                .find("t.yaml: sweep.random: 10000 samples x 21 params; a sweep sets at most "
                      "200000 overrides in all its runs"),
            std::string::npos);
  std::vector<std::string> flags;
  for (int i = 0; i < 25; ++i) {
    std::string flag(1, 'k');
    flag += std::to_string(i);
    flag += i < 13 ? "=1,2" : "=1";
    flags.push_back(flag);
  }
  EXPECT_NE(
      refusal_of("", flags).find("t.yaml: sweep: 8192 runs x up to 25 keys each; a sweep sets "
                                 "at most 200000 overrides in all its runs"),
      std::string::npos);
  flags.resize(24);  // 8192 x 24 = 196608: accepted
  EXPECT_EQ(parse_sweep(kBase, "t.yaml", flags).runs.size(), 8192u);
  // 100 x 100 = kMaxRuns exactly: accepted.
  const std::string hundred = numbers(100);
  const Sweep spec = parse_sweep(
      kBase, "t.yaml", {"scaler.init_scale=" + hundred, "scaler.growth_interval=" + hundred});
  EXPECT_EQ(spec.runs.size(), kMaxRuns);
}

TEST(SweepSpecErrors, AKeySetByTwoPartsIsRefused) {
  // The later part would win silently: runs named init_scale=1 and =2 would both run 16.
  EXPECT_EQ(refusal_of("sweep:\n  runs: [{scaler.init_scale: 1}, {scaler.init_scale: 2}]\n"
                       "  grid: {scaler.init_scale: [16]}\n",
                       {}),
            "t.yaml: sweep: scaler.init_scale is set by both sweep.runs and sweep.grid");
  EXPECT_EQ(refusal_of("sweep:\n  runs: [{seed: 1}]\n", {"seed=3,4"}),
            "t.yaml: sweep: seed is set by both sweep.runs and --grid");
  EXPECT_EQ(refusal_of("sweep:\n  grid: {seed: [1, 2]}\n  seeds: [5]\n", {}),
            "t.yaml: sweep: seed is set by both sweep.grid and sweep.seeds");
  EXPECT_EQ(refusal_of("sweep:\n  random: {n: 2, params: {optimizer.lr: {uniform: [0.1, 0.2]}}}\n",
                       {"optimizer.lr=0.5"}),
            "t.yaml: sweep: optimizer.lr is set by both --grid and sweep.random.params");
  // A section and a key in it.
  EXPECT_EQ(
      refusal_of("sweep:\n  runs: [{scaler: {init_scale: 2}}]\n", {"scaler.growth_interval=5,10"}),
      "t.yaml: sweep: scaler (set by sweep.runs) holds scaler.growth_interval (set by --grid)");
  // Within one part whose keys every run applies: two grid axes, two random params.
  EXPECT_EQ(
      refusal_of("sweep:\n  grid: {scaler: ['{init_scale: 2}'], scaler.init_scale: [4, 8]}\n", {}),
      "t.yaml: sweep: scaler (set by sweep.grid) holds scaler.init_scale (set by sweep.grid)");
  EXPECT_EQ(refusal_of("sweep:\n  random: {n: 2, params: {optimizer: {choice: ['{lr: 0.1}']},\n"
                       "    optimizer.lr: {uniform: [0.1, 0.2]}}}\n",
                       {}),
            "t.yaml: sweep: optimizer (set by sweep.random.params) holds optimizer.lr (set by "
            "sweep.random.params)");
  // Still accepted: a --grid replacing the file's axis of its key, a key in several runs (a
  // section in one, a key of it in another), and different keys in each part.
  EXPECT_EQ(parse_sweep(std::string(kBase) +
                            "sweep:\n  runs: [{scaler: {init_scale: 2}}, {scaler.init_scale: 4}]\n",
                        "t.yaml")
                .runs.size(),
            2u);
  EXPECT_EQ(parse_sweep(std::string(kBase) + "sweep:\n  grid: {scaler.init_scale: [1, 2]}\n"
                                             "  runs: [{optimizer.lr: 0.1}, {optimizer.lr: 0.2}]\n"
                                             "  seeds: [0, 1]\n",
                        "t.yaml", {"scaler.init_scale=4,8,16"})
                .runs.size(),
            12u);
}

TEST(SweepSaid, AFileValueIsNamedByItsLineAndReadsPathsFromTheFilesFolder) {
  // A value of the sweep section is part of the file: a problem names its line and column, and a
  // relative path is read from the file's folder, as the base's own paths are. A --grid value is
  // the command line's: named "--grid KEY=VALUE", a path read from the current directory.
  namespace fs = std::filesystem;
  const fs::path dir = ampctl::testing::fresh_dir("sweep", "said");
  fs::create_directories(dir / "cfg");
  const fs::path file = dir / "cfg" / "s.yaml";
  std::ofstream(file) << "name: s\n"
                         "device: cpu\n"
                         "model: {type: mlp, hidden: [8]}\n"
                         "data:\n"
                         "  train: {source: csv, path: base.csv, label_column: -1}\n"
                         "  batch_size: 4\n"
                         "training: {max_steps: 2}\n"
                         "sweep:\n"
                         "  grid: {data.train.path: [a.csv, /abs/b.csv]}\n"
                         "  runs: [{optimizer.lr: 0.01}, {optimizer.lr: nope}]\n";
  Sweep spec = load_sweep(file, {"training.max_steps=2,x"});
  ASSERT_EQ(spec.runs.size(), 8u);
  std::string message;
  try {
    validate(spec);  // fills each valid run's resolved_yaml, then lists the invalid ones
  } catch (const Error& e) {
    message = e.what();
  }
  const std::string f = file.string();
  EXPECT_NE(message.find(f + ":10:47: optimizer.lr: expected a number, got nope"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(": --grid training.max_steps=x: training.max_steps: expected an integer"),
            std::string::npos)
      << message;
  // The first run (lr 0.01, a.csv, max_steps 2) resolves: its paths are the file folder's.
  const config::RunConfig first = config::parse_config(spec.runs[0].resolved_yaml, "resolved.yaml");
  EXPECT_EQ(first.data.train.path, (dir / "cfg" / "a.csv").lexically_normal().string());
  const config::RunConfig second =
      config::parse_config(spec.runs[2].resolved_yaml, "resolved.yaml");
  EXPECT_EQ(second.data.train.path, "/abs/b.csv");
  // A --grid path is the current directory's.
  Sweep flagged = load_sweep(file, {"data.train.path=c.csv"});
  flagged.runs.resize(1);
  validate(flagged);
  EXPECT_EQ(config::parse_config(flagged.runs[0].resolved_yaml, "r.yaml").data.train.path,
            (fs::current_path() / "c.csv").lexically_normal().string());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ampctl::sweep
