#include "fsdpp/pipeline/schedule.h"

namespace fsdpp::pipeline {

std::vector<int> PipelineSchedule::stages_of(int rank) const {
  std::vector<int> stages;
  for (int s = 0; s < static_cast<int>(stage_to_rank.size()); ++s)
    if (stage_to_rank[static_cast<size_t>(s)] == rank) stages.push_back(s);
  return stages;
}

}  // namespace fsdpp::pipeline
