#pragma once
// HSDP's shard group when a run names none: the one default of fsdpp-train, the estimate and the
// planner (docs/parallelize.md).

namespace fsdpp::parallel {

// One node of a typical GPU machine: the shard group when a node's ranks are not known.
inline constexpr int kDefaultRanksPerNode = 8;

// HYBRID_SHARD's ranks per shard group (ParallelDims::dp_shard) when none is given: the
// data-parallel ranks one node holds, `ranks_per_node` (kDefaultRanksPerNode when it is not
// known: <= 0) over the `tp` ranks each of them spans (at least one), and at most the `dp_ranks`
// being sharded (a stage's under a pipeline). Shard inside a node (fast links), replicate across
// nodes. fsdpp-train's HSDP without replicas has tp 1 (tp > 1 needs the replicate degree given).
int default_shard_group(int dp_ranks, int ranks_per_node = 0, int tp = 1);

}  // namespace fsdpp::parallel
