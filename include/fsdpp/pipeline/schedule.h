#pragma once
// A pipeline schedule: which stage lives on which rank, and each rank's ordered list of actions
// (fsdpp/pipeline/action.h). The generators in fsdpp/pipeline/schedules.h produce the compute
// actions; add_communication (fsdpp/pipeline/communication.h) inserts the sends and recvs;
// verify (fsdpp/pipeline/verify.h) checks the result before a runtime executes it.

#include <string>
#include <vector>

#include "fsdpp/pipeline/action.h"

namespace fsdpp::pipeline {

struct PipelineSchedule {
  std::string name;                          // "GPipe", "1F1B", ... or "csv"
  int num_ranks = 0;                         // p: ranks of the pp dim
  int num_stages = 0;                        // p * stages per rank
  int num_microbatches = 0;                  // m
  std::vector<int> stage_to_rank;            // (num_stages)
  std::vector<std::vector<Action>> actions;  // (num_ranks, ...) in execution order

  int rank_of(int stage) const { return stage_to_rank.at(static_cast<size_t>(stage)); }
  std::vector<int> stages_of(int rank) const;  // ascending
  int stages_per_rank(int rank) const { return static_cast<int>(stages_of(rank).size()); }
};

}  // namespace fsdpp::pipeline
