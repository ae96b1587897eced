#pragma once
// Every rank's resident set, gathered for a logged step: its peak so far (VmHWM) and its current
// one (VmRSS), in MiB. metrics.jsonl has both per rank and the largest peak; the run's picture
// draws the current ones (run_plot.h).

#include <vector>

#include "fsdpp/dist/process_group.h"

namespace fsdpp::observe::detail {

struct RankMemory {
  std::vector<double> peak_mb;     // per rank: VmHWM
  std::vector<double> current_mb;  // per rank: VmRSS
  double peak_max_mb = 0;          // the largest VmHWM over the ranks
};

// Collective over `group` (one small all-gather).
RankMemory gather_rank_memory(dist::ProcessGroup& group);

}  // namespace fsdpp::observe::detail
