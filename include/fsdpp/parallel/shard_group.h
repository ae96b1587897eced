#pragma once
// HSDP's shard group when a run names none: the one default of fsdpp-train, the estimate and the
// planner (docs/parallelize.md).

namespace fsdpp::parallel {

// One node of a typical GPU machine: the shard group when a node's ranks are not known.
inline constexpr int kDefaultRanksPerNode = 8;

// HYBRID_SHARD's ranks per shard group (ParallelDims::dp_shard) when none is given: a node's
// ranks, `ranks_per_node` (kDefaultRanksPerNode when it is not known: <= 0), and at most the
// `dp_ranks` being sharded. Shard inside a node (fast links), replicate across nodes.
int default_shard_group(int dp_ranks, int ranks_per_node = 0);

}  // namespace fsdpp::parallel
