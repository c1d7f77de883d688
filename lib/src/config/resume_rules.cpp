#include "ampctl/config/resume_rules.h"

#include <array>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

namespace ampctl::config {
namespace {

bool in_section(std::string_view key, std::string_view section) {
  return key == section || (key.size() > section.size() &&
                            key.substr(0, section.size()) == section && key[section.size()] == '.');
}

// Sections and keys resume accepts (a section: every key under it).
constexpr std::array<std::string_view, 9> kResumable = {"training",     "logging",     "checkpoint",
                                                        "debug",        "distributed", "device",
                                                        "optimizer.lr", "scheduler",   "scaler"};

// The leaves of a nested JSON object as dotted paths, in document order.
void flatten(const nlohmann::json& j, const std::string& prefix,
             std::vector<std::pair<std::string, const nlohmann::json*>>& out) {
  for (const auto& [key, v] : j.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (v.is_object()) {
      flatten(v, path, out);
    } else {
      out.emplace_back(path, &v);
    }
  }
}

}  // namespace

std::optional<RefusedChange> refused_change(const RunConfig& before, const RunConfig& after) {
  const nlohmann::json a = to_json(before), b = to_json(after);
  std::vector<std::pair<std::string, const nlohmann::json*>> la, lb;
  flatten(a, "", la);
  flatten(b, "", lb);
  std::map<std::string, const nlohmann::json*> in_a(la.begin(), la.end());
  std::map<std::string, const nlohmann::json*> in_b(lb.begin(), lb.end());
  // The keys of both, `after`'s order first, then those only `before` has.
  std::vector<std::string> keys;
  for (const auto& leaf : lb) keys.push_back(leaf.first);
  for (const auto& leaf : la) {
    if (!in_b.count(leaf.first)) keys.push_back(leaf.first);
  }
  const auto text = [](const std::map<std::string, const nlohmann::json*>& m,
                       const std::string& key) -> std::string {
    const auto it = m.find(key);
    return it == m.end() ? "absent" : it->second->dump();
  };
  for (const std::string& key : keys) {
    const std::string x = text(in_a, key), y = text(in_b, key);
    if (x == y) continue;
    if (std::optional<std::string> why = resume_refusal(key)) {
      return RefusedChange{key, x, y, std::move(*why)};
    }
  }
  return std::nullopt;
}

std::string resumable_keys_text() {
  return "training.*, logging.*, checkpoint.*, debug.*, distributed.*, device, optimizer.lr, "
         "scheduler.* (the schedule continues from the checkpoint's step with the new values) and "
         "scaler.* but scaler.enabled and scaler.init_scale (the scale continues from the "
         "checkpoint's under the new rule and settings)";
}

std::optional<std::string> resume_refusal(std::string_view key) {
  if (key == "scaler.enabled") {
    return "the checkpoint holds a loss-scaler state, or none, for the run as it was started";
  }
  if (key == "scaler.init_scale") {
    return "the loss scaler's scale continues from the checkpoint's (scaler.init_scale sets a new "
           "run's)";
  }
  for (std::string_view ok : kResumable) {
    if (in_section(key, ok)) return std::nullopt;
  }
  if (in_section(key, "model")) {
    return "the checkpoint holds the model's tensors, whose shapes and meaning this key sets";
  }
  if (in_section(key, "data.eval")) {
    return "the run's evaluation sets are part of its record (each evaluation's line, "
           "checkpoint.keep_best's and training.early_stop's best): a resumed run evaluates the "
           "sets it was started with";
  }
  if (in_section(key, "data")) {
    return "the checkpoint holds the data loader's cursor (epoch, position, shuffle) over this "
           "data set and batch size";
  }
  if (key == "precision") {
    return "the checkpoint's low-precision weight copy and loss-scaler state were made for this "
           "precision";
  }
  if (in_section(key, "optimizer")) {
    return "the checkpoint holds this optimizer's state (step count, moments or momentum buffer), "
           "which resume continues with the hyperparameters it was built with; only "
           "optimizer.lr (and scheduler.*) may change";
  }
  if (key == "seed") {
    return "the checkpoint holds the positions of the random streams this seed keys "
           "(initialisation, shuffling, dropout)";
  }
  if (key == "name") return "the run keeps the name it was started with";
  return "resume continues the checkpointed run, and this key is not one it may change";
}

}  // namespace ampctl::config
