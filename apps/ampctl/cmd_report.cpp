// `ampctl report DIR... [--out FILE.html]`: one self-contained HTML page (inline CSS and SVG)
// with the loss curves, the loss scale on a log2 axis with skipped steps marked, grad_amax and its
// headroom (runs recorded with logging.grad_amax), and the comparison table, for a run directory,
// a sweep directory, or several run directories side by side (--out required). Default output:
// DIR/report.html.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ampctl/core/error.h"
#include "ampctl/report/report.h"
#include "commands.h"

namespace ampctl::app {

namespace {

struct ReportOptions {
  std::vector<std::string> dirs;
  std::string out;
};

int run_report(const ReportOptions& options) {
  const std::vector<std::filesystem::path> dirs(options.dirs.begin(), options.dirs.end());
  const std::filesystem::path written = report::write_html_report(dirs, options.out);
  std::printf("[report] wrote %s\n", written.c_str());
  return 0;
}

}  // namespace

void register_report(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<ReportOptions>();
  CLI::App* sub = app.add_subcommand(
      "report",
      "write one self-contained HTML report (loss curves, loss scale, grad_amax and its "
      "headroom for runs that recorded it, run table) for a run directory or a sweep "
      "directory");
  sub->add_option("DIR", options->dirs,
                  "a run directory (metrics.jsonl) or a sweep directory (sweep.json); several "
                  "run directories are drawn on one page (branches of a run, say), which needs "
                  "--out")
      ->required()
      ->type_name("DIR");
  sub->add_option("--out", options->out,
                  "the HTML file to write (default DIR/report.html for one directory)")
      ->type_name("FILE.html");
  commands.push_back({sub, [options] { return run_report(*options); }});
}

}  // namespace ampctl::app
