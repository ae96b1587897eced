// The schedules' traits: lookup by name and the checked number of stages per rank. See
// include/fsdpp/pipeline/schedule_traits.h.
#include "fsdpp/pipeline/schedule_traits.h"

#include <cctype>
#include <iterator>

#include "fsdpp/common/error.h"

namespace fsdpp::pipeline {
namespace {

std::string normalized(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c != '-' && c != '_' && c != ' ') {
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
  }
  if (out.rfind("schedule", 0) == 0 && out.size() > 8) out = out.substr(8);
  return out;
}

}  // namespace

int ScheduleTraits::stages_per_rank_for(int requested) const {
  if (requested <= 0) return stages_per_rank;
  FSDPP_CHECK_AS(ConfigError, any_stages_per_rank || requested == stages_per_rank,
                 "[pipeline] schedule {} runs {} stage{} per rank; got {}", name, stages_per_rank,
                 stages_per_rank == 1 ? "" : "s", requested);
  return requested;
}

PipelineSchedule ScheduleTraits::make(int num_ranks, int v, int num_microbatches) const {
  return generate(num_ranks, stages_per_rank_for(v), num_microbatches);
}

const ScheduleTraits* find_schedule_traits(std::string_view name) {
  const std::string key = normalized(name);
  for (const auto& t : kScheduleTraits) {
    if (normalized(t.name) == key) return &t;
  }
  if (key == "zbv") return &kScheduleTraits[std::size(kScheduleTraits) - 1];
  return nullptr;
}

const ScheduleTraits& schedule_traits(std::string_view name) {
  const ScheduleTraits* t = find_schedule_traits(name);
  FSDPP_CHECK_AS(ConfigError, t != nullptr, "[pipeline] unknown schedule '{}'; expected {}", name,
                 schedule_list());
  return *t;
}

std::string schedule_list() {
  std::string out;
  const size_t n = std::size(kScheduleTraits);
  for (size_t i = 0; i < n; ++i) {
    out += (i == 0 ? "" : i + 1 == n ? " or " : ", ") + std::string(kScheduleTraits[i].name);
  }
  return out;
}

}  // namespace fsdpp::pipeline
