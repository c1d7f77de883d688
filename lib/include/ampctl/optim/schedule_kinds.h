// The learning-rate schedules' closed choices (scheduler.type, scheduler.anneal_strategy) and
// their YAML names: plain data with no other include, so the config reads the names from here
// (scripts/dev/check_deps.py, SHARED_HEADERS) and holds these values as they are
// (optim/scheduler.h says what each one does).
#pragma once

#include <utility>

namespace ampctl::optim {

enum class ScheduleType { constant, linear, cosine, step, onecycle };
enum class Anneal { cos, linear };

inline constexpr std::pair<ScheduleType, const char*> kScheduleTypeNames[] = {
    {ScheduleType::constant, "constant"},
    {ScheduleType::linear, "linear"},
    {ScheduleType::cosine, "cosine"},
    {ScheduleType::step, "step"},
    {ScheduleType::onecycle, "onecycle"}};
inline constexpr std::pair<Anneal, const char*> kAnnealNames[] = {{Anneal::cos, "cos"},
                                                                  {Anneal::linear, "linear"}};

}  // namespace ampctl::optim
