// ConfigTemplate (run_config.h): one text resolved under many override lists gives what
// parse_config_said gives for each, configuration and problems alike, with the text and each
// override's VALUE read once.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"

namespace {

using ampctl::config::ConfigTemplate;
using ampctl::config::RunConfig;
using ampctl::config::SaidOverride;
using ampctl::config::Where;

const char* kText = R"(name: tmpl
precision: fp16
model: {type: mlp, hidden: [8]}
data:
  train: {source: synthetic, task: classification, samples: 64, features: 4, classes: 2}
  batch_size: 16
optimizer: {type: sgd, lr: 0.1}
scaler: {init_scale: 1024.0, growth_interval: 10}
)";

std::string outcome(const std::function<RunConfig()>& f) {
  try {
    return ampctl::config::to_yaml(f());
  } catch (const ampctl::Error& e) {
    return std::string("error: ") + e.what();
  }
}

TEST(ConfigTemplate, ResolvesAsParseConfigSaidDoesForEveryOverrideList) {
  const ConfigTemplate tmpl(kText, "dir/tmpl.yaml");
  const Where grid{"--grid"};
  const std::vector<std::vector<SaidOverride>> lists = {
      {},
      {{"scaler.init_scale=65536.0", grid}},
      {{"scaler.growth_interval=3", {}}, {"scaler.init_scale=2.0", grid}},
      {{"scaler.policy=auto", grid}, {"scaler.margin=2", grid}},
      {{"scaler.policy=pytorch", grid}, {"scaler.margin=2", grid}},     // margin is auto's: refused
      {{"scaler.init_scale=-1", grid}},                                 // out of range
      {{"scaler.init_scale=[1, 2", grid}},                              // not YAML
      {{"scaler.min_scale=8.0", {}}, {"scaler.init_scale=2.0", grid}},  // cross-key check
      {{"scaler.init_scale=65536.0", grid}},                            // the first list again
  };
  for (int pass = 0; pass < 2; ++pass) {  // the second pass reads every VALUE from the memo
    for (const auto& list : lists) {
      const std::string want =
          outcome([&] { return ampctl::config::parse_config_said(kText, "dir/tmpl.yaml", list); });
      const std::string got = outcome([&] { return tmpl.resolve(list); });
      EXPECT_EQ(got, want) << (list.empty() ? std::string("(none)") : list.front().text);
    }
  }
  EXPECT_NE(outcome([&] {
              return tmpl.resolve({{"scaler.init_scale=-1", grid}});
            }).find("--grid scaler.init_scale=-1"),
            std::string::npos);
}

TEST(ConfigTemplate, TextThatIsNoMappingIsRefusedAtOnce) {
  EXPECT_THROW(ConfigTemplate("- a\n- b\n", "list.yaml"), ampctl::Error);
}

}  // namespace
