// The layout the estimate plays one rank of. See estimate_layout.h.
#include "estimate_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "fsdpp/common/error.h"
#include "fsdpp/parallel/shard_group.h"

namespace fsdpp::estimate_detail {

void check_tensor_parallel(const ModelDescription& whole, const EstimateOptions& o) {
  FSDPP_CHECK_AS(ConfigError, !whole.units.empty(), "[estimate] the model has no units");
  FSDPP_CHECK_AS(ConfigError, o.world_size >= 1, "[estimate] world size {} is not positive", o.world_size);
  const int tp = o.tensor_parallel;
  FSDPP_CHECK_AS(ConfigError, tp >= 1 && o.world_size % tp == 0,
                 "[estimate] tensor-parallel degree {} does not divide the world size {}", tp, o.world_size);
  FSDPP_CHECK_AS(ConfigError, !o.sequence_parallel || tp > 1,
                 "[estimate] sequence parallelism needs a tensor-parallel degree > 1");
  FSDPP_CHECK_AS(ConfigError, !o.sequence_parallel || o.seq_len % tp == 0,
                 "[estimate] sequence parallelism: seq_len={} is not divisible by the tensor-parallel degree {}",
                 o.seq_len, tp);
}


namespace {

// The ranks each unit of `model` is sharded over: the dense ones over shard_world, the experts'
// over efsdp (1 without sharding).
std::vector<int> unit_shard_worlds(const DataParallelLayout& a) {
  std::vector<int> usw(a.model.units.size(), a.shard_world);
  for (size_t i = 0; i < a.model.units.size(); ++i)
    if (a.model.units[i].experts) usw[i] = a.traits->shards ? a.dims.efsdp() : 1;
  return usw;
}

}  // namespace

DataParallelLayout data_parallel_layout(const ModelDescription& whole, const EstimateOptions& o) {
  DataParallelLayout a;
  a.tp = o.tensor_parallel;
  a.ep = o.expert_parallel;
  FSDPP_CHECK_AS(ConfigError, a.ep >= 1 && o.world_size % a.ep == 0,
                 "[estimate] expert-parallel degree {} does not divide the world size {}", a.ep, o.world_size);
  a.split_experts = o.split_experts.value_or(a.ep == 1);
  a.pre_ep = tensor_parallel_slice(whole, a.tp, a.split_experts);
  a.model = rank_slice(whole, a.tp, a.ep, a.split_experts);
  a.dp_world = o.world_size / a.tp;
  FSDPP_CHECK_AS(ConfigError, o.batch >= 1 && o.seq_len >= 1,
                 "[estimate] batch={} and seq_len={} must be positive", o.batch, o.seq_len);
  FSDPP_CHECK_AS(ConfigError, o.forward_prefetch >= 0 && o.backward_prefetch >= 0,
                 "[estimate] forward_prefetch={} and backward_prefetch={} must be >= 0", o.forward_prefetch,
                 o.backward_prefetch);
  a.traits = &traits_of(o.strategy);
  a.dims = estimate_parallel_dims(o);
  a.shard_world = a.traits->shards ? a.dims.dp_shard : 1;
  a.unit_shard_world = unit_shard_worlds(a);
  a.expert_shard_world = a.shard_world;
  for (size_t i = 0; i < a.model.units.size(); ++i)
    if (a.model.units[i].experts) a.expert_shard_world = a.unit_shard_world[i];
  return a;
}

}  // namespace fsdpp::estimate_detail

namespace fsdpp {
namespace {

// "8 data-parallel ranks (world size 16 / tensor_parallel_degree 2)": the ranks HSDP's replicas
// and shard groups split, and where they come from.
std::string data_parallel_ranks(const EstimateOptions& o, int pp, int tp, int dp_ranks) {
  std::string over;
  if (pp > 1) over = fmt::format("pipeline_parallel_degree {}", pp);
  if (tp > 1) over += fmt::format("{}tensor_parallel_degree {}", over.empty() ? "" : " x ", tp);
  return fmt::format("{} data-parallel ranks{} ({})", dp_ranks, pp > 1 ? " per stage" : "",
                     over.empty() ? "the world size" : fmt::format("world size {} / {}", o.world_size, over));
}

// fsdpp-train's rule (train::parallel_dims, which refuses the same keys as "... cannot fill N
// ranks" / "... is N ranks but the world has M"): HSDP's replicas are equal shard groups of the
// data-parallel ranks, so a replicate degree divides them, and times a given shard degree is them.
void check_replicas(const EstimateOptions& o, int pp, int tp, int dp_ranks) {
  FSDPP_CHECK_AS(ConfigError, dp_ranks % o.replicas == 0,
                 "[estimate] parallelism.data_parallel_replicate_degree={} cannot fill {}: HSDP's replicas are "
                 "equal shard groups, so the replicate degree must divide the data-parallel ranks; expected a "
                 "degree that divides {} (1: no replicas)",
                 o.replicas, data_parallel_ranks(o, pp, tp, dp_ranks), dp_ranks);
  FSDPP_CHECK_AS(ConfigError, o.shard_group_size <= 0 || int64_t{o.replicas} * o.shard_group_size == dp_ranks,
                 "[estimate] parallelism.data_parallel_replicate_degree={} x data_parallel_shard_degree={} is {} "
                 "data-parallel ranks but there are {}; expected their product to be the data-parallel ranks "
                 "(data_parallel_shard_degree: -1 takes the ranks left over)",
                 o.replicas, o.shard_group_size, int64_t{o.replicas} * o.shard_group_size,
                 data_parallel_ranks(o, pp, tp, dp_ranks));
}

}  // namespace

int estimate_shard_group(const EstimateOptions& o) {
  const int pp = std::max(1, o.pipeline.degree), tp = std::max(1, o.tensor_parallel);
  const int dp_ranks = o.world_size / (pp * tp);
  if (o.replicas > 1) check_replicas(o, pp, tp, dp_ranks);
  if (o.shard_group_size > 0) return pp > 1 ? std::min(o.shard_group_size, dp_ranks) : o.shard_group_size;
  if (o.replicas > 1) return dp_ranks / o.replicas;
  return parallel::default_shard_group(dp_ranks, o.ranks_per_node, tp);
}

parallel::ParallelDims estimate_parallel_dims(const EstimateOptions& o) {
  const int pp = std::max(1, o.pipeline.degree), tp = o.tensor_parallel;
  parallel::ParallelDims dims{.pp = pp, .tp = tp, .ep = o.expert_parallel};  // dp_shard: the ranks left
  const int dp_ranks = o.world_size / (pp * std::max(1, tp));
  // fsdpp-train's rule: replicas are HSDP's, of shard groups.
  FSDPP_CHECK_AS(ConfigError, o.replicas <= 1 || traits_of(o.strategy).hybrid,
                 "[estimate] parallelism.data_parallel_replicate_degree={} needs training.fsdp hybrid_shard or "
                 "hybrid_shard_zero2 (replicas of shard groups); got {}",
                 o.replicas, to_string(o.strategy));
  if (traits_of(o.strategy).hybrid && dp_ranks >= 1) {
    dims.dp_shard = estimate_shard_group(o);
    FSDPP_CHECK_AS(ConfigError, dp_ranks % dims.dp_shard == 0,
                   "[estimate] {} over {} data-parallel ranks{}: shard groups of {} ranks do not divide them",
                   to_string(o.strategy), dp_ranks, pp > 1 ? " per stage" : "", dims.dp_shard);
    dims.dp_replicate = dp_ranks / dims.dp_shard;
  }
  return dims.resolved(o.world_size);
}

}  // namespace fsdpp
