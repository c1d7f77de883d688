// A sweep over scaler.init_scale with gradient numerics (a short configs/sweep_underflow.yaml)
// through the real binary: in sweep.csv the underflow column falls as the scale grows while the
// skipped steps rise, and the HTML report shows the underflow and headroom plots and columns.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

fs::path ampctl_binary() {
  return fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "ampctl";
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

TEST(SweepNumerics, UnderflowFallsAndSkippedStepsRiseWithTheInitialScale) {
  if (!fs::exists(ampctl_binary())) GTEST_SKIP() << "no ampctl binary";
  const fs::path dir = fs::current_path() / ("sweep_numerics_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // configs/sweep_underflow.yaml, validated, and its short version: 12 steps of a smaller model
  // on three of its scales.
  const std::string validate = ampctl_binary().string() + " validate --config " +
                               AMPCTL_TEST_DATA_DIR "/../../configs/sweep_underflow.yaml > " +
                               dir.string() + ".log 2>&1";
  ASSERT_EQ(std::system(validate.c_str()), 0) << read(dir.string() + ".log");
  std::ofstream(dir / "short.yaml") << R"(name: short_underflow
seed: 0
device: cpu
precision: fp16
model: {type: mlp, hidden: [64], activation: relu}
data:
  train: {source: synthetic, task: classification, samples: 1024, features: 32, classes: 10}
  batch_size: 128
optimizer: {type: adamw, lr: 1.0e-3}
scaler: {init_scale: 65536.0, growth_interval: 1000000}
training: {max_steps: 12}
logging: {every_steps: 6, numerics_every: 3, tensorboard: true}
sweep:
  grid:
    scaler.init_scale: [1.0e-6, 1.0, 1.0e12]
)";
  const std::string cmd = ampctl_binary().string() + " sweep --config " +
                          (dir / "short.yaml").string() + " --jobs 2 --out " +
                          (dir / "out").string() + " > " + (dir.string() + ".log") + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read(dir.string() + ".log");
  std::istringstream csv(read(dir / "out" / "sweep.csv"));
  std::string line;
  ASSERT_TRUE(std::getline(csv, line));
  const std::vector<std::string> header = split(line);
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  ASSERT_TRUE(col.count("mean_underflow_frac") && col.count("min_headroom_log2")) << line;
  std::map<double, std::pair<double, double>> by_scale;  // scale -> (underflow, skipped)
  while (std::getline(csv, line)) {
    if (line.empty()) continue;
    const std::vector<std::string> f = split(line);
    ASSERT_EQ(f[col["status"]], "ok") << line;
    const std::string name = f[col["name"]];
    const double scale = std::stod(name.substr(name.find('=') + 1));
    by_scale[scale] = {std::stod(f[col["mean_underflow_frac"]]),
                       std::stod(f[col["skipped_steps"]])};
    EXPECT_FALSE(f[col["min_headroom_log2"]].empty()) << line;
  }
  ASSERT_EQ(by_scale.size(), 3u);
  const auto low = by_scale.at(1.0e-6), mid = by_scale.at(1.0), high = by_scale.at(1.0e12);
  EXPECT_GT(low.first, 0.5);  // most values flushed at 1e-6
  EXPECT_LT(mid.first, low.first);
  EXPECT_LE(high.first, mid.first);
  EXPECT_EQ(low.second, 0);
  EXPECT_GT(high.second, mid.second);  // 1e12 overflows until the scaler backs off
  // Each run has its own event file; the report shows the numerics plots and columns.
  for (const auto& e : fs::directory_iterator(dir / "out")) {
    if (!e.is_directory()) continue;
    size_t events = 0;
    for (const auto& f : fs::directory_iterator(e.path())) {
      events += f.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
    }
    EXPECT_EQ(events, 1u) << e.path();
  }
  const std::string report_cmd = ampctl_binary().string() + " report " + (dir / "out").string() +
                                 " > " + dir.string() + ".log 2>&1";
  ASSERT_EQ(std::system(report_cmd.c_str()), 0) << read(dir.string() + ".log");
  const std::string html = read(dir / "out" / "report.html");
  EXPECT_NE(html.find("<svg id=\"underflow\""), std::string::npos);
  EXPECT_NE(html.find("<svg id=\"headroom\""), std::string::npos);
  EXPECT_NE(html.find("<th>mean underflow</th>"), std::string::npos);
  EXPECT_NE(html.find("underflow fraction"), std::string::npos);
  fs::remove_all(dir);
  fs::remove(dir.string() + ".log");
}

}  // namespace
