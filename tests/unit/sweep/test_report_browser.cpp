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
  // What the browser parsed: five plots (loss, eval, scale, lr, throughput), the run's line in
  // each (the loss raw and smoothed), an eval dot per evaluation, and a red marker per skipped
  // step (metrics are logged every step).
  EXPECT_EQ(count(dom, "<svg"), 5u) << dom.substr(0, 2000);
  EXPECT_EQ(count(dom, "<polyline class=\"run run-0\""), 6u);
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
  const std::string table = html.substr(settings, html.find("</table>", settings) - settings);
  // Two settings of three runs each, a mean ± sd in every metric cell, the reference unmarked
  // and the second setting marked on its final loss.
  EXPECT_EQ(count(table, "<tr class=\"setting\""), 2u) << table;
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
