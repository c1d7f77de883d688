// `ampctl report` opened in a real browser: a run with overflowing steps is trained by the real
// binary, its report is rendered by headless Chromium (Debian's `chromium`, installed by
// scripts/setup.sh), and the test checks both what the browser parsed (the DOM it dumps: the
// plots' <svg>, the loss and scale <polyline>s, one skip marker per skipped step) and what it
// drew (a screenshot, decoded here with zlib: the loss line's blue and the skip markers' red are
// on the page). Skipped, saying so, where no Chromium is installed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

fs::path ampctl_binary() {
  const fs::path self = fs::read_symlink("/proc/self/exe");
  return self.parent_path().parent_path() / "ampctl";
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The first of Debian's and upstream's browser names found on PATH; empty when none.
std::string find_chromium() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin");
  std::string dir;
  std::vector<std::string> all;
  while (std::getline(dirs, dir, ':')) all.push_back(dir);
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    for (const std::string& d : all) {
      const fs::path p = fs::path(d) / name;
      if (access(p.c_str(), X_OK) == 0) return p.string();
    }
  }
  return {};
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// A decoded 8-bit RGB or RGBA PNG (what Chromium writes for screenshots).
struct Image {
  uint32_t width = 0, height = 0;
  int channels = 0;
  std::vector<uint8_t> pixels;  // rows of width * channels bytes
  const uint8_t* at(uint32_t x, uint32_t y) const {
    return &pixels[(static_cast<size_t>(y) * width + x) * channels];
  }
};

uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t{static_cast<uint8_t>(s[at])} << 24) |
         (uint32_t{static_cast<uint8_t>(s[at + 1])} << 16) |
         (uint32_t{static_cast<uint8_t>(s[at + 2])} << 8) |
         uint32_t{static_cast<uint8_t>(s[at + 3])};
}

int paeth(int a, int b, int c) {
  const int p = a + b - c;
  const int pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return a;
  return pb <= pc ? b : c;
}

// PNG (RFC 2083): chunks, zlib-compressed IDAT, one filter byte per row. Non-interlaced 8-bit
// RGB/RGBA only; anything else fails the test with the reason.
Image decode_png(const std::string& png) {
  Image img;
  if (png.size() < 33 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) {
    ADD_FAILURE() << "not a PNG";
    return img;
  }
  std::string idat;
  for (size_t at = 8; at + 8 <= png.size();) {
    const uint32_t len = be32(png, at);
    const std::string type = png.substr(at + 4, 4);
    if (at + 12 + len > png.size()) break;
    if (type == "IHDR") {
      img.width = be32(png, at + 8);
      img.height = be32(png, at + 12);
      const int depth = static_cast<uint8_t>(png[at + 16]);
      const int color = static_cast<uint8_t>(png[at + 17]);
      const int interlace = static_cast<uint8_t>(png[at + 20]);
      if (depth != 8 || (color != 2 && color != 6) || interlace != 0) {
        ADD_FAILURE() << "unexpected PNG format: depth " << depth << " color " << color
                      << " interlace " << interlace;
        return Image{};
      }
      img.channels = color == 2 ? 3 : 4;
    } else if (type == "IDAT") {
      idat += png.substr(at + 8, len);
    }
    at += 12 + len;
  }
  const size_t stride = static_cast<size_t>(img.width) * img.channels;
  std::vector<uint8_t> raw((stride + 1) * img.height);
  uLongf raw_len = raw.size();
  if (uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) !=
          Z_OK ||
      raw_len != raw.size()) {
    ADD_FAILURE() << "IDAT does not inflate to " << raw.size() << " bytes";
    return Image{};
  }
  img.pixels.resize(stride * img.height);
  const int bpp = img.channels;
  for (uint32_t y = 0; y < img.height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    uint8_t* out = &img.pixels[y * stride];
    const uint8_t* up = y ? &img.pixels[(y - 1) * stride] : nullptr;
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= static_cast<size_t>(bpp) ? out[i - bpp] : 0;
      const int b = up ? up[i] : 0;
      const int c = up && i >= static_cast<size_t>(bpp) ? up[i - bpp] : 0;
      int pred = 0;
      switch (filter) {
        case 0:
          pred = 0;
          break;
        case 1:
          pred = a;
          break;
        case 2:
          pred = b;
          break;
        case 3:
          pred = (a + b) / 2;
          break;
        case 4:
          pred = paeth(a, b, c);
          break;
        default:
          ADD_FAILURE() << "bad filter " << int{filter};
          return Image{};
      }
      out[i] = static_cast<uint8_t>(in[i] + pred);
    }
  }
  return img;
}

// Pixels within `tol` per channel of the colour #rrggbb.
size_t pixels_near(const Image& img, uint32_t rgb, int tol) {
  const int r = (rgb >> 16) & 255, g = (rgb >> 8) & 255, b = rgb & 255;
  size_t n = 0;
  for (uint32_t y = 0; y < img.height; ++y) {
    for (uint32_t x = 0; x < img.width; ++x) {
      const uint8_t* p = img.at(x, y);
      if (std::abs(p[0] - r) <= tol && std::abs(p[1] - g) <= tol && std::abs(p[2] - b) <= tol) ++n;
    }
  }
  return n;
}

// The page's width as Chromium lays it out at 1280 px: a copy of the page with a one-line script
// that writes document.documentElement.scrollWidth into the title, read back from --dump-dom
// (the report itself has no scripts). -1 when the browser did not answer.
int page_width(const std::string& browser, const fs::path& html, const fs::path& dir) {
  std::string page = read(html);
  const size_t end = page.rfind("</body>");
  if (end == std::string::npos) return -1;
  page.insert(end,
              "<script>document.title = 'width=' + document.documentElement.scrollWidth;"
              "</script>\n");
  const fs::path probe = dir / ("width-" + html.filename().string());
  std::ofstream(probe) << page;
  const fs::path dom = dir / ("width-" + html.filename().string() + ".dom");
  if (run("timeout 120 " + browser + "--dump-dom file://" + probe.string() + " > " + dom.string() +
          " 2>/dev/null") != 0) {
    return -1;
  }
  const std::string text = read(dom);
  const size_t at = text.find("<title>width=");
  return at == std::string::npos ? -1 : std::atoi(text.c_str() + at + 13);
}

std::string browser_command(const std::string& chromium, const fs::path& dir, int height) {
  // No network, no GPU, a throw-away profile; --no-sandbox because tests may run as root.
  return chromium +
         " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage"
         " --disable-background-networking --no-first-run --hide-scrollbars"
         " --user-data-dir=" +
         (dir / "profile").string() + " --window-size=1280," + std::to_string(height) + " ";
}

const char* kOverflowing = R"(name: browser
seed: 0
device: cpu
precision: fp16
model: {type: mlp, hidden: [32]}
data:
  train: {source: synthetic, task: classification, samples: 512, features: 8, classes: 4}
  eval: {split_fraction: 0.25}
  batch_size: 32
optimizer: {type: adamw, lr: 1.0e-3}
scaler: {init_scale: 1.0e+12, growth_interval: 20}
training: {max_steps: 120, eval_every: 40}
logging: {every_steps: 40}
)";

TEST(ReportBrowser, ChromiumRendersThePlotsWithEverySkippedStepMarked) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    GTEST_SKIP() << "no chromium on PATH (scripts/setup.sh installs Debian's chromium)";
  }
  ASSERT_TRUE(fs::exists(ampctl_binary())) << ampctl_binary();
  const fs::path dir = fs::current_path() / ("report_browser_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "cfg.yaml") << kOverflowing;
  const std::string log = (dir / "log.txt").string();
  ASSERT_EQ(run(ampctl_binary().string() + " train --config " + (dir / "cfg.yaml").string() +
                " --run-dir " + (dir / "run").string() + " > " + log + " 2>&1"),
            0)
      << read(log);
  ASSERT_EQ(run(ampctl_binary().string() + " report " + (dir / "run").string() + " --out " +
                (dir / "report.html").string() + " > " + log + " 2>&1"),
            0)
      << read(log);
  const nlohmann::json summary = nlohmann::json::parse(read(dir / "run" / "summary.json"));
  const int64_t skipped = summary["skipped_steps"].get<int64_t>();
  // 1e12 overflows fp16 gradients at once: about 25 backoffs before the scale fits.
  ASSERT_GE(skipped, 10);

  // No network, no GPU, a throw-away profile; --no-sandbox because tests may run as root.
  const std::string browser = chromium +
                              " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage"
                              " --disable-background-networking --no-first-run --hide-scrollbars"
                              " --user-data-dir=" +
                              (dir / "profile").string() + " --window-size=1280,1400 ";
  const std::string url = "file://" + (dir / "report.html").string();
  const fs::path dom_file = dir / "dom.html";
  ASSERT_EQ(run("timeout 120 " + browser + "--dump-dom " + url + " > " + dom_file.string() +
                " 2> " + log),
            0)
      << read(log);
  const std::string dom = read(dom_file);
  // What the browser parsed: seven plots (loss, eval, scale, lr, throughput, and the grad_amax
  // and its headroom that every fp16 run records by default), the run's line in each (the loss
  // raw and smoothed), an eval dot per evaluation, and a red marker per skipped step (metrics
  // are logged every step).
  EXPECT_EQ(count(dom, "<svg"), 7u) << dom.substr(0, 2000);
  EXPECT_EQ(count(dom, "<polyline class=\"run run-0\""), 8u);
  EXPECT_EQ(count(dom, "<circle class=\"skip\""), static_cast<size_t>(skipped));
  EXPECT_EQ(count(dom, "<circle class=\"eval run-0\""), 3u);
  const int width = page_width(browser, dir / "report.html", dir);
  EXPECT_GT(width, 0) << "Chromium gave no width";
  EXPECT_LE(width, 1280) << "the run's page is wider than 1280 px";

  const fs::path shot = dir / "shot.png";
  ASSERT_EQ(run("timeout 120 " + browser + "--screenshot=" + shot.string() + " " + url + " > " +
                log + " 2>&1"),
            0)
      << read(log);
  const Image img = decode_png(read(shot));
  ASSERT_EQ(img.width, 1280u);
  ASSERT_EQ(img.height, 1400u);
  // What it drew: the run's colour (#1f77b4, the loss and scale lines and the legend swatch) and
  // the skip markers' red (#e00000), each on many pixels; anti-aliasing blends edges, so count
  // near matches.
  const size_t blue = pixels_near(img, 0x1f77b4, 24);
  const size_t red = pixels_near(img, 0xe00000, 24);
  EXPECT_GT(blue, 500u) << "the loss/scale lines were not drawn";
  EXPECT_GT(red, 10u * static_cast<size_t>(skipped)) << "the skip markers were not drawn";
  // Most of the page is the white background, not a blank or error page of one colour.
  const size_t white = pixels_near(img, 0xffffff, 2);
  EXPECT_GT(white, img.width * img.height / 2);
  EXPECT_LT(white, img.width * img.height - 20000);
  if (!HasFailure()) fs::remove_all(dir);
}

// A seeds sweep, 3 seeds x 2 settings (learning rates 0.3 and 0.001: their final losses differ
// far beyond the seeds' spread): the report's Settings section shows each setting's mean ± sd
// and marks the second as differing from the first by Welch's t-test; its line charts are drawn;
// and the page, the runs table included, fits 1280 px. The screenshot is kept in the test's
// folder (tests/report_sweep_browser/shot.png) to look at.
TEST(ReportBrowser, ASeedsSweepShowsMeanSdAndTheTestMarkAndFits1280) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    GTEST_SKIP() << "no chromium on PATH (scripts/setup.sh installs Debian's chromium)";
  }
  const fs::path dir = fs::current_path() / "report_sweep_browser";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "sweep.yaml") << R"(name: seeds
device: cpu
precision: fp16
model: {type: mlp, hidden: [32]}
data:
  train: {source: synthetic, task: classification, samples: 512, features: 8, classes: 4}
  eval: {split_fraction: 0.25}
  batch_size: 32
optimizer: {type: sgd, lr: 0.1}
training: {max_steps: 60, eval_every: 30}
logging: {every_steps: 10}
sweep:
  grid: {optimizer.lr: [0.3, 0.001]}
  seeds: [0, 1, 2]
)";
  const std::string log = (dir / "log.txt").string();
  ASSERT_EQ(run(ampctl_binary().string() + " sweep --config " + (dir / "sweep.yaml").string() +
                " --out " + (dir / "sw").string() + " --jobs 2 > " + log + " 2>&1"),
            0)
      << read(log);
  ASSERT_EQ(run(ampctl_binary().string() + " report " + (dir / "sw").string() + " --out " +
                (dir / "report.html").string() + " > " + log + " 2>&1"),
            0)
      << read(log);
  const std::string html = read(dir / "report.html");
  const size_t settings = html.find("<table id=\"settings\"");
  ASSERT_NE(settings, std::string::npos) << "no Settings table";
  // (Names carry line-break opportunities, <wbr>, after ',', '=' and '/'.)
  std::string table = html.substr(settings, html.find("</table>", settings) - settings);
  for (size_t at = table.find("<wbr>"); at != std::string::npos; at = table.find("<wbr>", at)) {
    table.erase(at, 5);
  }
  // Two settings of three runs each, a mean ± sd in every metric cell, the reference unmarked
  // and the second setting marked on its final loss.
  EXPECT_EQ(count(table, "<tr class=\"setting"), 2u) << table;
  EXPECT_NE(table.find("optimizer.lr=0.3 (reference)"), std::string::npos) << table;
  EXPECT_GE(count(table, "&plusmn;"), 4u) << table;
  const size_t second = table.find("optimizer.lr=0.001");
  ASSERT_NE(second, std::string::npos);
  EXPECT_EQ(table.substr(0, second).find("class=\"mark\""), std::string::npos) << table;
  EXPECT_NE(table.find("class=\"mark\"", second), std::string::npos) << table;
  EXPECT_NE(html.find("<svg id=\"line-final_loss\""), std::string::npos);

  const std::string browser = browser_command(chromium, dir, 2400);
  const int width = page_width(browser, dir / "report.html", dir);
  EXPECT_GT(width, 0) << "Chromium gave no width";
  EXPECT_LE(width, 1280) << "the page is wider than 1280 px";
  const fs::path shot = dir / "shot.png";
  ASSERT_EQ(run("timeout 120 " + browser + "--screenshot=" + shot.string() + " file://" +
                (dir / "report.html").string() + " > " + log + " 2>&1"),
            0)
      << read(log);
  const Image img = decode_png(read(shot));
  EXPECT_EQ(img.width, 1280u);
  // The mark's red and the charts' blue are drawn.
  EXPECT_GT(pixels_near(img, 0xb00000, 24), 20u) << "no test mark drawn";
  EXPECT_GT(pixels_near(img, 0x1f77b4, 24), 500u) << "no chart lines drawn";
}

}  // namespace

// Issue 48 items 6 and 8: the pages a user opens most, laid out by Chromium at 1280 px. A sweep of
// 5 settings x 3 seeds (scaler.policy's five rules: categories) whose run names are long and
// whose numbers carry 17 digits, and a page of two runs with grad_amax: each fits 1280 px, and
// every number a person reads (table cells, chart labels, the summary) has at most 6
// significant digits. The fixtures are written here (no training): the layout is the test.
namespace {

// Numbers in `text` (a cell or a label) with more than 6 significant digits, listed.
std::string long_numbers(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    std::string digits;
    while (j < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == '.')) {
      if (text[j] != '.') digits += text[j];
      ++j;
    }
    const size_t first = digits.find_first_not_of('0');
    const size_t significant = first == std::string::npos ? 1 : digits.size() - first;
    if (significant > 6) out += text.substr(i, j - i) + " ";
    i = j;
  }
  return out;
}

// The text a person reads in the page's number cells, chart labels and summary values.
std::string numbers_too_long(const std::string& html) {
  std::string bad;
  const auto scan = [&](const std::string& open, const std::string& close) {
    for (size_t at = html.find(open); at != std::string::npos; at = html.find(open, at + 1)) {
      const size_t body = html.find('>', at) + 1;
      const size_t end = html.find(close, body);
      std::string text = html.substr(body, end - body);
      // Tags inside (a <br>) are not numbers, nor a tooltip's <title>: it names a setting by
      // the overrides as the user spelled them (init_scale=1048576.0).
      for (size_t t = text.find("<title>"); t != std::string::npos; t = text.find("<title>")) {
        text.erase(t, text.find("</title>", t) + 8 - t);
      }
      std::string plain;
      bool in_tag = false;
      for (char c : text) {
        if (c == '<') in_tag = true;
        if (!in_tag) plain += c;
        if (c == '>') in_tag = false;
      }
      const std::string found = long_numbers(plain);
      if (!found.empty()) bad += open + ": " + found + "\n";
    }
  };
  scan("<td class=\"num\"", "</td>");
  scan("<text ", "</text>");
  scan("<table id=\"summary\"", "</table>");
  scan("<p class=\"verdict\"", "</p>");
  return bad;
}

void write_file(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

// A run of 200 steps with 17-digit losses, grad_amax and a few skips; its summary.json.
nlohmann::json write_fixture_run(const fs::path& dir, const std::string& name, double offset) {
  std::string metrics;
  double scale = 1048576.0;
  for (int s = 1; s <= 200; ++s) {
    const bool inf = s % 67 == 0;
    nlohmann::json line = {{"kind", "train"},
                           {"step", s},
                           {"loss", offset + 2.0 / (s + 0.123456789)},
                           {"scale", scale},
                           {"found_inf", inf},
                           {"skipped", inf},
                           {"growth_tracker", 0},
                           {"lr", 1e-3 / 3.0},
                           {"time_s", 0.0123456789 * s},
                           {"grad_amax", 0.01234567891 * (1 + s % 7)},
                           {"grad_amax_exact", true}};
    metrics += line.dump() + "\n";
    if (inf) scale /= 2;
    if (s % 50 == 0) {
      metrics +=
          nlohmann::json{{"kind", "eval"}, {"step", s}, {"loss", offset + 1.5 / s / 3.0}}.dump() +
          "\n";
    }
  }
  write_file(dir / "metrics.jsonl", metrics);
  write_file(dir / "config.yaml", kOverflowing);  // precision fp16, one micro-batch
  nlohmann::json summary = {{"name", name},
                            {"status", "ok"},
                            {"steps", 200},
                            {"skipped_steps", 2},
                            {"retries", 0},
                            {"final_loss", offset + 2.0 / 200.123456789},
                            {"best_loss", offset + 1.0 / 3.0},
                            {"best_eval_loss", offset + 0.0025 / 3.0},
                            {"final_scale", scale},
                            {"min_scale", scale},
                            {"max_scale", 1048576.0},
                            {"wall_time_s", 2.469135782},
                            {"samples_per_s", 12345.678901234}};
  write_file(dir / "summary.json", summary.dump(2));
  return summary;
}

}  // namespace

TEST(ReportBrowser, ASweepOfFiveSettingsAndATwoRunPageFit1280WithShortNumbers) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    GTEST_SKIP() << "no chromium on PATH (scripts/setup.sh installs Debian's chromium)";
  }
  const fs::path dir = fs::current_path() / ("report_width_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path sweep = dir / "sweep";
  nlohmann::json runs = nlohmann::json::array();
  int k = 0;
  for (const char* policy : {"pytorch", "deepspeed", "megatron", "fairseq", "auto"}) {
    for (int seed = 0; seed < 3; ++seed, ++k) {
      // A long name with commas, as a grid over several keys spells it (91 characters).
      const std::string name = std::string("policy=") + policy +
                               ",init_scale=1048576.0,growth_interval=2000,backoff_factor=0.5,"
                               "hysteresis=2,seed=" +
                               std::to_string(seed);
      nlohmann::json row = write_fixture_run(sweep / name, name, 0.001 * k);
      row["name"] = name;
      row["overrides"] = {std::string("scaler.policy=") + policy,
                          "scaler.init_scale=1048576.0",
                          "scaler.growth_interval=2000",
                          "scaler.backoff_factor=0.5",
                          "scaler.hysteresis=2",
                          "seed=" + std::to_string(seed)};
      row["overflow_rate"] = 2.0 / 200.0;
      row["mean_underflow_frac"] = 0.000123456789;
      row["run_dir"] = (sweep / name).string();
      runs.push_back(row);
    }
  }
  write_file(sweep / "sweep.json",
             nlohmann::json{{"metric", "final_loss"}, {"best", nullptr}, {"runs", runs}}.dump(2));
  const std::string log = (dir / "log.txt").string();
  ASSERT_EQ(run(ampctl_binary().string() + " report " + sweep.string() + " --out " +
                (dir / "sweep.html").string() + " > " + log + " 2>&1"),
            0)
      << read(log);
  const fs::path a = dir / "first-run-with-a-rather-long-directory-name";
  const fs::path b = dir / "second-run-with-a-rather-long-directory-name";
  write_fixture_run(a, "a", 0.0);
  write_fixture_run(b, "b", 0.5);
  ASSERT_EQ(run(ampctl_binary().string() + " report " + a.string() + " " + b.string() + " --out " +
                (dir / "two.html").string() + " > " + log + " 2>&1"),
            0)
      << read(log);

  const std::string browser = browser_command(chromium, dir, 1400);
  for (const char* page : {"sweep.html", "two.html"}) {
    const std::string html = read(dir / page);
    EXPECT_EQ(numbers_too_long(html), "") << page;
    // The categorical settings are points, not a line; every run has its replay command.
    if (std::string(page) == "sweep.html") {
      EXPECT_NE(html.find("class=\"plot small categorical\""), std::string::npos);
      const std::string line = html.substr(html.find("<svg id=\"line-final_loss\""));
      EXPECT_EQ(line.substr(0, line.find("</svg>")).find("<polyline"), std::string::npos);
      EXPECT_EQ(count(html, "<code>ampctl replay "), 15u);
    } else {
      EXPECT_EQ(count(html, "<code>ampctl replay "), 2u);
    }
    // min headroom from grad_amax: a number in every row, no dash.
    const size_t table = html.find("<table id=\"runs\"");
    ASSERT_NE(table, std::string::npos);
    const std::string rows = html.substr(table, html.find("</table>", table) - table);
    // (The two runs have no numerics: their mean underflow is the one dash each.)
    EXPECT_EQ(count(rows, "<td class=\"na\">"), std::string(page) == "two.html" ? 2u : 0u) << page;
    const int width = page_width(browser, dir / page, dir);
    EXPECT_GT(width, 0) << "Chromium gave no width for " << page;
    EXPECT_LE(width, 1280) << page << " is wider than 1280 px";
  }
  if (!HasFailure()) fs::remove_all(dir);
}
