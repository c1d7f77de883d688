#include "ampctl/replay/replay.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/math/amp_math.h"
#include "ampctl/run/metrics_line.h"

namespace ampctl::replay {

namespace fs = std::filesystem;

namespace {

// bf16's largest finite value, (2 - 2^-7) x 2^127.
constexpr double kBf16MaxFinite = 3.3895313892515355e38;

Error input_error(const fs::path& file, const std::string& why) {
  return Error{ErrorKind::input, file.string() + ": " + why};
}

amp::ScalePolicy policy_of(config::ScalePolicy p) {
  switch (p) {
    case config::ScalePolicy::deepspeed:
      return amp::ScalePolicy::deepspeed;
    case config::ScalePolicy::megatron:
      return amp::ScalePolicy::megatron;
    case config::ScalePolicy::fairseq:
      return amp::ScalePolicy::fairseq;
    case config::ScalePolicy::automatic:
      return amp::ScalePolicy::automatic;
    case config::ScalePolicy::pytorch:
    default:
      return amp::ScalePolicy::pytorch;
  }
}

// Why a run recorded no grad_amax, and how the next one will.
std::string missing_amax_hint(const config::RunConfig& cfg) {
  if (cfg.precision == config::Precision::fp32) {
    return "precision fp32 rounds no gradient to 16 bits, so there is nothing to replay; a run "
           "in fp16 or bf16 records grad_amax";
  }
  if (!cfg.logging.grad_amax) {
    return "this run was trained with logging.grad_amax: false; train it again without that "
           "setting (grad_amax is on by default) or with --set logging.grad_amax=true";
  }
  return "the model's backward roundings were not measured on its backend (a GPT on CUDA fuses "
         "them); train it again on the CPU, or on CUDA with AMPCTL_ATTENTION=materialised "
         "AMPCTL_GELU=composed (docs/reference.md, \"Precision\")";
}

}  // namespace

Recording load_recording(const fs::path& dir) {
  Recording rec;
  rec.dir = dir;
  const fs::path config_file = dir / "config.yaml";
  const fs::path metrics_file = dir / "metrics.jsonl";
  std::error_code ec;
  if (!fs::is_regular_file(config_file, ec) || !fs::is_regular_file(metrics_file, ec)) {
    throw Error{ErrorKind::input, dir.string() +
                                      ": not a run directory (config.yaml and metrics.jsonl "
                                      "expected)"};
  }
  const config::RunConfig cfg = config::load_config(config_file);
  rec.config = cfg;
  rec.precision = config::to_string(cfg.precision);
  rec.max_finite = cfg.precision == config::Precision::bf16 ? kBf16MaxFinite : 65504.0;
  if (cfg.training.global_batch != 0) {
    // The micro-batches per rank are global_batch / (batch_size x ranks), and the run directory
    // does not record the rank count.
    throw input_error(config_file,
                      "training.global_batch: replay needs the micro-batches per rank, which "
                      "depend on the rank count the run directory does not record; record the "
                      "run with training.grad_accum_steps instead");
  }
  rec.accum = std::max<int64_t>(1, cfg.training.grad_accum_steps);

  std::ifstream in(metrics_file);
  if (!in) throw input_error(metrics_file, "cannot read it");
  std::map<int64_t, RecordedStep> by_step;
  std::string line;
  int64_t line_no = 0;
  bool any_train = false;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::optional<run::MetricsRecord> r = run::read_metrics_line(line);
    const std::string where = "line " + std::to_string(line_no);
    if (!r) {
      // A torn last line (a killed run) is ignored, as resume drops it; any other bad line is
      // damage.
      if (in.peek() == EOF) break;
      throw input_error(metrics_file, where + " is not a JSON object");
    }
    if (!r->is_train()) continue;
    any_train = true;
    if (!r->defect.empty()) throw input_error(metrics_file, where + ": " + r->defect);
    if (!r->has_grad_amax) {
      throw Error{ErrorKind::input,
                  metrics_file.string() + ": " + where +
                      " has no grad_amax: replay needs the largest gradient every step's "
                      "backward rounded (logging.grad_amax, on by default in fp16 and bf16)",
                  missing_amax_hint(cfg)};
    }
    RecordedStep s;
    s.step = *r->step;
    s.scale = r->scale.value_or(1.0);
    s.found_inf = r->overflowed;
    s.amax = r->grad_amax;
    s.amax_exact = r->grad_amax_exact.value_or(true);
    by_step[s.step] = s;  // a resumed run's later line for a step wins
  }
  if (!any_train) throw input_error(metrics_file, "no train lines: nothing to replay");
  rec.steps.reserve(by_step.size());
  for (auto& [step, s] : by_step) {
    // The rule is replayed step by step: every step needs its line.
    const int64_t expected = static_cast<int64_t>(rec.steps.size()) + 1;
    if (step != expected) {
      throw input_error(metrics_file, "no train line for step " + std::to_string(expected) +
                                          ": replay needs every step (logging.metrics_every: 1)");
    }
    rec.steps.push_back(s);
  }
  return rec;
}

Outcome replay(const Recording& rec, const std::vector<std::string>& overrides) {
  Outcome out;
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos) {
      throw Error{ErrorKind::usage, "--set/--grid " + o + ": expected KEY=VALUE"};
    }
    const std::string key = o.substr(0, eq);
    if (key.rfind("scaler.", 0) != 0) {
      throw Error{ErrorKind::config,
                  key +
                      ": replay changes scaler.* keys only (the other keys change the "
                      "gradients, which the recording cannot predict: train with them)"};
    }
    out.overrides.emplace_back(key, o.substr(eq + 1));
  }
  const config::RunConfig cfg = config::load_config(rec.dir / "config.yaml", overrides);
  return replay(rec, cfg, std::move(out.overrides));
}

Outcome replay(const Recording& rec, const config::RunConfig& cfg,
               std::vector<std::pair<std::string, std::string>> overrides) {
  Outcome out;
  out.overrides = std::move(overrides);
  const config::ScalerConfig& sc = cfg.scaler;
  const bool scaling = config::scaler_enabled(cfg);

  amp::ScaleUpdateParams p;
  p.growth_factor = sc.growth_factor;
  p.backoff_factor = sc.backoff_factor;
  p.growth_interval = static_cast<int32_t>(
      std::min<int64_t>(sc.growth_interval, std::numeric_limits<int32_t>::max()));
  p.hysteresis = static_cast<int32_t>(sc.hysteresis);
  p.min_scale = static_cast<float>(sc.min_scale);
  p.max_scale = static_cast<float>(sc.max_scale);
  p.policy = policy_of(sc.policy);
  p.consecutive_hysteresis = sc.consecutive_hysteresis;
  p.tolerance = sc.tolerance;
  p.margin = static_cast<int32_t>(sc.margin);
  p.amax_history = static_cast<int32_t>(std::max<int64_t>(sc.amax_history, 1));
  p.max_finite = static_cast<float>(rec.max_finite);
  const bool automatic = p.policy == amp::ScalePolicy::automatic;
  // auto's ring (amp_math.h), as the device keeps it.
  std::vector<float> ring(automatic ? static_cast<size_t>(p.amax_history) : 0, 0.0f);
  // The scaler's initial state (amp/grad_scaler.cpp: lazy_init).
  float scale = scaling ? static_cast<float>(sc.init_scale) : 1.0f;
  int32_t growth_tracker = 0;
  int32_t hysteresis_tracker = p.hysteresis;
  int32_t trackers[amp::kTrackerCount] = {0, -1, -1, 0};
  const bool retry = scaling && sc.on_overflow == config::OnOverflow::retry;
  const int64_t max_retries = retry ? sc.max_retries : 0;

  out.min_scale = std::numeric_limits<double>::infinity();
  out.max_scale = 0.0;
  double headroom_sum = 0.0;
  int64_t headroom_n = 0;
  const double accum = static_cast<double>(rec.accum);
  out.steps.reserve(rec.steps.size());
  for (const RecordedStep& s : rec.steps) {
    ReplayedStep kept{s.step};
    const int64_t retries_before = out.retries;
    const double amax = s.amax.value_or(0.0);
    bool uncertain = !s.amax_exact || !s.amax.has_value();
    bool overflowed = false;
    for (int64_t a = 0;; ++a) {
      const double sd = static_cast<double>(scale);
      kept.scale = sd;
      out.min_scale = std::min(out.min_scale, sd);
      out.max_scale = std::max(out.max_scale, sd);
      // The recorded run overflowed at its scale: at that scale or above this one does too; below
      // it, grad_amax is a lower bound and the prediction uncertain.
      overflowed = amax * sd / accum > rec.max_finite || (s.found_inf && sd >= s.scale);
      if (s.found_inf && sd < s.scale) uncertain = true;
      if (scaling && automatic) {
        // The accumulator the device would hold at this scale: the recorded max per unit of
        // scale times this one (exact for power-of-two scales).
        const auto raw = static_cast<float>(amax * sd / accum);
        ring[static_cast<size_t>(amp::auto_history_slot(trackers, p))] =
            amp::auto_history_entry(raw, scale, overflowed, p);
        const float hist_max = *std::max_element(ring.begin(), ring.end());
        amp::update_scale_auto(&scale, &growth_tracker, trackers, overflowed, hist_max, p);
      } else if (scaling) {
        amp::update_scale_policy(&scale, &growth_tracker, &hysteresis_tracker, trackers,
                                 overflowed ? 1.0f : 0.0f, p);
      }
      if (!overflowed || a == max_retries) {
        if (amax > 0.0) {
          const double h = std::log2(rec.max_finite / (amax * sd / accum));
          headroom_sum += h;
          ++headroom_n;
          out.min_headroom_log2 = out.min_headroom_log2 ? std::min(*out.min_headroom_log2, h) : h;
        }
        break;
      }
      ++out.retries;
    }
    if (overflowed) {
      ++out.skipped;
      if (!out.first_skip) out.first_skip = s.step;
    }
    kept.skipped = overflowed;
    kept.retries = out.retries - retries_before;
    out.steps.push_back(kept);
    if (uncertain) ++out.uncertain_steps;
  }
  out.final_scale = static_cast<double>(scale);
  out.max_scale = std::max(out.max_scale, out.final_scale);
  out.min_scale = std::min(out.min_scale, out.final_scale);
  if (headroom_n > 0) out.mean_headroom_log2 = headroom_sum / static_cast<double>(headroom_n);
  return out;
}

namespace {

// Keys of RunConfig's JSON that do not change the recorded gradients (see the header).
bool ignored_key(const std::string& path) {
  static const char* const kIgnored[] = {"scaler",
                                         "name",
                                         "device",
                                         "logging",
                                         "checkpoint",
                                         "distributed",
                                         "training.max_steps",
                                         "training.eval_every",
                                         "training.eval_batches",
                                         "training.divergence_patience"};
  for (const char* k : kIgnored) {
    if (path == k) return true;
  }
  return false;
}

// The first dotted path (in `a`'s key order, then `b`'s extra keys) where a and b differ.
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b,
                             const std::string& prefix) {
  if (ignored_key(prefix)) return "";
  if (!a.is_object() || !b.is_object()) return a == b ? "" : prefix;
  for (const auto& [k, v] : a.items()) {
    const std::string path = prefix.empty() ? k : prefix + "." + k;
    const std::string d = first_difference(v, b.contains(k) ? b.at(k) : nlohmann::json(), path);
    if (!d.empty()) return d;
  }
  for (const auto& [k, v] : b.items()) {
    const std::string path = prefix.empty() ? k : prefix + "." + k;
    if (!a.contains(k) && !ignored_key(path)) return path;
  }
  return "";
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// A YAML value as JSON: a number, bool or null when it reads as one, else its text.
nlohmann::ordered_json value_json(const std::string& text) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded() || j.is_object() || j.is_array()) return text;
  return j;
}

nlohmann::ordered_json number_or_null(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return nullptr;
  return *v;
}

}  // namespace

std::string gradient_key_differing(const Recording& rec, const config::RunConfig& cfg) {
  return first_difference(config::to_json(cfg), config::to_json(rec.config), "");
}

std::string setting_text(const Outcome& o) {
  if (o.overrides.empty()) return "(as recorded)";
  std::string s;
  for (const auto& [k, v] : o.overrides) {
    if (!s.empty()) s += " ";
    s += (k.rfind("scaler.", 0) == 0 ? k.substr(7) : k) + "=" + v;
  }
  return s;
}

std::string table_intro(const Recording& rec) {
  return "[replay] " + rec.dir.string() + ": " + std::to_string(rec.steps.size()) + " steps, " +
         rec.precision + ", " + std::to_string(rec.accum) + " micro-batch(es) per rank\n";
}

const char* const kTableNote =
    "[replay] headroom: log2(max finite / (grad_amax x scale / micro-batches)) at the scale each "
    "step kept; uncertain: steps whose grad_amax is a lower bound (the recorded run overflowed at "
    "a higher scale, or grad_amax_exact was false)\n";

std::string table_text(const std::vector<Outcome>& outcomes) {
  size_t width = 7;
  for (const auto& o : outcomes) width = std::max(width, setting_text(o).size());
  std::string s;
  char line[1024];
  std::snprintf(line, sizeof line, "%-*s %7s %10s %7s %10s %10s %10s %9s %9s %9s\n",
                static_cast<int>(width), "setting", "skipped", "first_skip", "retries", "min_scale",
                "max_scale", "final", "mean_head", "min_head", "uncertain");
  s += line;
  for (const auto& o : outcomes) {
    const std::string first = o.first_skip ? std::to_string(*o.first_skip) : "-";
    const std::string mean =
        o.mean_headroom_log2 ? fmt("%.2f", *o.mean_headroom_log2) : std::string("-");
    const std::string min =
        o.min_headroom_log2 ? fmt("%.2f", *o.min_headroom_log2) : std::string("-");
    const std::string setting = setting_text(o);
    std::snprintf(line, sizeof line, " %7lld %10s %7lld %10.4g %10.4g %10.4g %9s %9s %9lld\n",
                  static_cast<long long>(o.skipped), first.c_str(),
                  static_cast<long long>(o.retries), o.min_scale, o.max_scale, o.final_scale,
                  mean.c_str(), min.c_str(), static_cast<long long>(o.uncertain_steps));
    s += setting + std::string(width - setting.size(), ' ') + line;
  }
  return s;
}

nlohmann::ordered_json to_json(const std::vector<Outcome>& outcomes) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Outcome& o : outcomes) {
    nlohmann::ordered_json ov = nlohmann::ordered_json::object();
    for (const auto& [k, v] : o.overrides) ov[k] = value_json(v);
    nlohmann::ordered_json j;
    j["overrides"] = ov;
    j["skipped"] = o.skipped;
    j["first_skip"] = o.first_skip ? nlohmann::ordered_json(*o.first_skip) : nullptr;
    j["retries"] = o.retries;
    j["min_scale"] = o.min_scale;
    j["max_scale"] = o.max_scale;
    j["final_scale"] = o.final_scale;
    j["mean_headroom_log2"] = number_or_null(o.mean_headroom_log2);
    j["min_headroom_log2"] = number_or_null(o.min_headroom_log2);
    j["uncertain_steps"] = o.uncertain_steps;
    list.push_back(j);
  }
  return list;
}

}  // namespace ampctl::replay
