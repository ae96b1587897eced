#pragma once
// The layout the estimate plays one rank of (private to src/estimate/): the degrees, the mesh
// parallelize builds from them, this rank's slices of the model and the ranks each of its FSDP
// units is sharded over.

#include <vector>

#include "fsdpp/estimate/memory_estimate.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/parallel/parallel_dims.h"

namespace fsdpp::estimate_detail {

// The checks every estimate makes first (the world, tensor and sequence parallelism), pipelined
// or not. ConfigError ("[estimate] ...") for options that make no run.
void check_tensor_parallel(const ModelDescription& whole, const EstimateOptions& o);


// A run without pipeline parallelism, laid out as parallelize lays it out.
struct DataParallelLayout {
  const StrategyTraits* traits = nullptr;
  int tp = 1, ep = 1;
  int dp_world = 1;     // the data-parallel ranks FSDP spans: world_size / tp
  int shard_world = 1;  // ranks a dense unit is sharded over (1 without sharding)
  bool split_experts = true;
  // The mesh parallelize builds: the dense units shard over dp_shard (replicated over
  // dp_replicate), the experts' over efsdp = dp_shard x tp / ep.
  parallel::ParallelDims dims;
  // What this rank holds before FSDP: its tp slices (the whole model at tp 1), and the experts
  // apart (sliced over ep) where they live on the sparse mesh; `pre_ep` before the experts split.
  ModelDescription pre_ep, model;
  std::vector<int> unit_shard_world;  // per unit of `model`: ranks it is sharded over
  int expert_shard_world = 1;         // an expert unit's (the last one's), else shard_world

  bool gathers(size_t unit) const { return unit_shard_world[unit] > 1; }
};

// The layout of `whole` under `o` (o.pipeline.degree 1), checked as parallelize checks it.
DataParallelLayout data_parallel_layout(const ModelDescription& whole, const EstimateOptions& o);

}  // namespace fsdpp::estimate_detail
