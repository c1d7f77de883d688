// The console's form (console.h): spdlog's pattern, destination and level for every command, and
// the training commands' --quiet, --log-format and --log-time.
#include "console.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string_view>

namespace ampctl::app {
namespace {

// `%*`: "warning: " before a warning and "error: " before an error (the words main prints
// before its own errors); nothing before an info line.
class LevelPrefix : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    std::string_view prefix;
    if (msg.level == spdlog::level::warn) prefix = "warning: ";
    if (msg.level >= spdlog::level::err && msg.level != spdlog::level::off) prefix = "error: ";
    dest.append(prefix.data(), prefix.data() + prefix.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<LevelPrefix>();
  }
};

}  // namespace

void add_console_options(CLI::App& subcommand, ConsoleFlags& flags) {
  CLI::Option* quiet =
      subcommand.add_flag("--quiet,-q", flags.quiet,
                          "print warnings and errors only (no progress, step or evaluation lines)");
  subcommand
      .add_option("--log-format", flags.format,
                  "text: a compact line every logging.every_steps steps; json: that step's "
                  "metrics.jsonl line (and each evaluation's) as one JSON object per line on "
                  "stdout, every other line on stderr")
      ->check(CLI::IsMember({"text", "json"}))
      ->type_name("text|json")
      ->excludes(quiet);
  subcommand.add_flag("--log-time", flags.time,
                      "start each console line with the time of day ([HH:MM:SS])");
}

std::FILE* apply_console(const ConsoleFlags& flags) {
  const bool json = flags.format == "json";
  if (json) {
    // stdout carries the JSON lines alone.
    auto logger = std::make_shared<spdlog::logger>(
        "", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    spdlog::set_default_logger(std::move(logger));
  }
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<LevelPrefix>('*').set_pattern(flags.time ? "[%H:%M:%S] %*%v" : "%*%v");
  spdlog::set_formatter(std::move(formatter));
  spdlog::set_level(flags.quiet ? spdlog::level::warn : spdlog::level::info);
  return json ? stdout : nullptr;
}

}  // namespace ampctl::app
