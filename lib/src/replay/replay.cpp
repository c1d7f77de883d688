#include "ampctl/replay/replay.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

#include "ampctl/config/config_file.h"
#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/core/format.h"
#include "ampctl/core/input_file.h"
#include "ampctl/math/amp_math.h"
#include "ampctl/run/metrics_line.h"

namespace ampctl::replay {

namespace fs = std::filesystem;

namespace {

Error input_error(const fs::path& file, const std::string& why) {
  return Error{ErrorKind::input, file.string() + ": " + why};
}

// A SAX pass over one line that finds a key written twice in one object (nlohmann's parser
// keeps the last silently; which one the trainer meant is unknown).
class DuplicateKeys : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string duplicate;  // the first key found twice
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    m_keys.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (!m_keys.back().insert(k).second && duplicate.empty()) duplicate = k;
    return duplicate.empty();
  }
  bool end_object() override {
    m_keys.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  std::vector<std::set<std::string>> m_keys;
};

std::string duplicate_key(const std::string& line) {
  DuplicateKeys sax;
  nlohmann::json::sax_parse(line, &sax);
  return sax.duplicate;
}

bool same_reading(const RecordedStep& a, const RecordedStep& b) {
  return a.scale == b.scale && a.found_inf == b.found_inf && a.amax == b.amax &&
         a.amax_exact == b.amax_exact;
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
  for (const fs::path& f : {config_file, metrics_file}) {
    // There but not a regular file (a FIFO, a link to /dev/zero): refused naming it, unread.
    if (const std::string kind = non_regular_kind(f); !kind.empty()) {
      throw input_error(f, "is " + kind + ", not a regular file");
    }
  }
  if (!fs::is_regular_file(config_file, ec) || !fs::is_regular_file(metrics_file, ec)) {
    throw Error{ErrorKind::input, dir.string() +
                                      ": not a run directory (config.yaml and metrics.jsonl "
                                      "expected)"};
  }
  rec.config_text = config::read_config_text(config_file);
  rec.config_template =
      std::make_shared<const config::ConfigTemplate>(rec.config_text, config_file.string());
  const config::RunConfig cfg = rec.config_template->resolve({});
  rec.config = cfg;
  rec.precision = config::to_string(cfg.precision);
  rec.max_finite = max_finite(config::half_dtype(cfg.precision));
  if (cfg.training.global_batch != 0) {
    // The micro-batches per rank are global_batch / (batch_size x ranks), and the run directory
    // does not record the rank count.
    throw input_error(config_file,
                      "training.global_batch: replay needs the micro-batches per rank, which "
                      "depend on the rank count the run directory does not record; record the "
                      "run with training.grad_accum_steps instead");
  }
  rec.accum = std::max<int64_t>(1, cfg.training.grad_accum_steps);

  // Read to its end or not at all: a read that fails is an error, never the end of the run.
  LineReader in(metrics_file, kMaxMetricsLineBytes);
  std::map<int64_t, std::pair<RecordedStep, int64_t>> by_step;  // step -> its line, line number
  std::string line;
  bool any_train = false;
  while (in.next(line)) {
    const int64_t line_no = in.line_number();
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::optional<run::MetricsRecord> r = run::read_metrics_line(line);
    const std::string where = "line " + std::to_string(line_no);
    if (!r) {
      // A torn last line (a killed run) is ignored, as resume drops it; any other bad line is
      // damage.
      if (!in.terminated()) break;
      throw input_error(metrics_file, where + " is not a JSON object");
    }
    if (!r->is_train()) continue;
    any_train = true;
    if (!r->defect.empty()) throw input_error(metrics_file, where + ": " + r->defect);
    if (const std::string k = duplicate_key(line); !k.empty()) {
      throw input_error(metrics_file, where + ": the key \"" + k +
                                          "\" is written twice: which value the run meant is "
                                          "unknown");
    }
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
    // A step written twice (a resume that kept a line it should have dropped, two writers) is
    // one step when the lines agree on what replay reads, and ambiguous when they do not.
    const auto [it, fresh] = by_step.emplace(s.step, std::make_pair(s, line_no));
    if (!fresh && !same_reading(it->second.first, s)) {
      throw input_error(metrics_file,
                        where + " and line " + std::to_string(it->second.second) +
                            " are both step " + std::to_string(s.step) +
                            " and disagree (scale, found_inf, grad_amax or grad_amax_exact): "
                            "which one the run took is unknown");
    }
  }
  if (!any_train) throw input_error(metrics_file, "no train lines: nothing to replay");
  rec.steps.reserve(by_step.size());
  for (auto& [step, entry] : by_step) {
    const RecordedStep& s = entry.first;
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

Outcome replay(const Recording& rec, const std::vector<config::SaidOverride>& overrides,
               bool keep_steps) {
  std::vector<std::pair<std::string, std::string>> named;
  for (const config::SaidOverride& o : overrides) {
    const std::string flag = o.said.origin.empty() ? "--set" : o.said.origin;
    const size_t eq = o.text.find('=');
    if (eq == std::string::npos) {
      throw Error{ErrorKind::usage, flag + " " + o.text + ": expected KEY=VALUE"};
    }
    const std::string key = o.text.substr(0, eq);
    if (key.rfind("scaler.", 0) != 0) {
      throw Error{ErrorKind::config,
                  flag + " " + o.text + ": " + key +
                      ": replay changes scaler.* keys only (the other keys change the "
                      "gradients, which the recording cannot predict: train with them)"};
    }
    named.emplace_back(key, o.text.substr(eq + 1));
  }
  const config::RunConfig cfg =
      rec.config_template ? rec.config_template->resolve(overrides)
                          : config::parse_config_said(
                                rec.config_text, (rec.dir / "config.yaml").string(), overrides);
  return replay(rec, cfg, std::move(named), keep_steps);
}

Outcome replay(const Recording& rec, const std::vector<std::string>& overrides) {
  std::vector<config::SaidOverride> said;
  for (const std::string& o : overrides) said.push_back({o, config::Where{}});
  return replay(rec, said);
}

Outcome replay(const Recording& rec, const config::RunConfig& cfg,
               std::vector<std::pair<std::string, std::string>> overrides, bool keep_steps) {
  Outcome out;
  out.overrides = std::move(overrides);
  const config::ScalerConfig& sc = cfg.scaler;
  const bool scaling = config::scaler_enabled(cfg);

  // The settings the trainer's GradScaler gets, for RUN's precision.
  const amp::ScaleUpdateParams p = config::scale_settings(cfg);
  const bool automatic = amp::scale_rule(p.policy).reads_amax;
  // auto's ring (amp_math.h), as the device keeps it.
  std::vector<float> ring(automatic ? static_cast<size_t>(p.amax_history) : 0, 0.0f);
  // The scaler's initial state (amp/grad_scaler.cpp: lazy_init).
  float scale = scaling ? static_cast<float>(sc.init_scale) : 1.0f;
  int32_t growth_tracker = 0;
  int32_t hysteresis_tracker = p.hysteresis;
  std::array<int32_t, amp::kTrackerCount> trackers = amp::kInitialTrackers;
  const bool retry = scaling && sc.on_overflow == config::OnOverflow::retry;
  const int64_t max_retries = retry ? sc.max_retries : 0;

  out.min_scale = std::numeric_limits<double>::infinity();
  out.max_scale = 0.0;
  double headroom_sum = 0.0;
  int64_t headroom_n = 0;
  const double accum = static_cast<double>(rec.accum);
  if (keep_steps) out.steps.reserve(rec.steps.size());
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
        amp::update_scale_auto_ring(&scale, &growth_tracker, trackers.data(), ring.data(), raw,
                                    overflowed, p);
      } else if (scaling) {
        amp::update_scale_policy(&scale, &growth_tracker, &hysteresis_tracker, trackers.data(),
                                 overflowed ? 1.0f : 0.0f, p);
      }
      // An attempt that overflowed at the floor is not retried (train/step.cpp: the retry would
      // be the same computation).
      const bool at_floor = p.min_scale > 0.0f && static_cast<float>(sd) <= p.min_scale;
      if (!overflowed || a == max_retries || at_floor) {
        if (amax > 0.0) {
          const double h = headroom_log2(rec.max_finite, amax * sd / accum);
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
    if (!out.departs_at && (kept.scale != s.scale || kept.skipped != s.found_inf)) {
      out.departs_at = s.step;
    }
    if (keep_steps) out.steps.push_back(kept);
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
                                         "seed",
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
  if (!o.label.empty()) return o.label;
  if (o.overrides.empty()) {
    return o.departs_at ? "(config.yaml, departs at step " + std::to_string(*o.departs_at) + ")"
                        : "(as recorded)";
  }
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
