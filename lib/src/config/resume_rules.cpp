#include "ampctl/config/resume_rules.h"

#include <array>

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

}  // namespace

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
