// HSDP's shard group when a run names none. See include/fsdpp/parallel/shard_group.h.
#include "fsdpp/parallel/shard_group.h"

#include <algorithm>

namespace fsdpp::parallel {

int default_shard_group(int dp_ranks, int ranks_per_node, int tp) {
  const int node = ranks_per_node > 0 ? ranks_per_node : kDefaultRanksPerNode;
  return std::min(dp_ranks, std::max(1, node / std::max(1, tp)));
}

}  // namespace fsdpp::parallel
