#pragma once
// What each ShardingStrategy does, in one table that the FSDP unit (which groups it communicates
// over, when it frees gathered parameters), the memory estimator (what it counts per rank) and
// the trainer (which mesh it builds, which counters it reports) all read, so that a strategy
// added later is described once.
//
//   const auto& t = fsdpp::traits_of(ShardingStrategy::HYBRID_SHARD);
//   if (t.hybrid) mesh = world.init_device_mesh({replicas, shards}, {"replicate", "shard"});

#include <iterator>

#include "fsdpp/fsdp/fully_shard.h"

namespace fsdpp {

struct StrategyTraits {
  ShardingStrategy strategy;
  // A 2-D mesh: shard inside its "shard" dim, replicate across "replicate"; else a 1-D mesh.
  bool hybrid;
  // Parameters are split over a shard group at all (false: NO_SHARD replicates them and only
  // all-reduces gradients).
  bool shards;
  // Gathered parameters are freed after each forward and gathered again in backward (ZeRO-3);
  // else they stay gathered from forward to the end of backward.
  bool reshard_after_forward;
  // Parameters stay gathered between steps, refreshed once per step in forward (ZERO1).
  bool keep_unsharded_between_steps;
  // Each rank keeps a 1/shard-world part of the gradients (ZERO1 too, as fsdpp implements it:
  // its backward reduce-scatters) and of the optimizer state.
  bool shards_grads;
  bool shards_optimizer_state;
};

inline constexpr StrategyTraits kStrategyTraits[] = {
    //                                   hybrid shards reshard keep   grads  optim
    {ShardingStrategy::FULL_SHARD,         false, true,  true,  false, true,  true},
    {ShardingStrategy::SHARD_GRAD_OP,      false, true,  false, false, true,  true},
    {ShardingStrategy::ZERO1,              false, true,  false, true,  true,  true},
    {ShardingStrategy::NO_SHARD,           false, false, false, false, false, false},
    {ShardingStrategy::HYBRID_SHARD,       true,  true,  true,  false, true,  true},
    {ShardingStrategy::HYBRID_SHARD_ZERO2, true,  true,  false, false, true,  true},
};

// The row of `s` in the table.
constexpr const StrategyTraits& traits_of(ShardingStrategy s) {
  for (const auto& row : kStrategyTraits) {
    if (row.strategy == s) return row;
  }
  return kStrategyTraits[0];  // unreachable for a valid enumerator
}

// Every strategy has its row, in the enum's order.
static_assert([] {
  for (int i = 0; i < static_cast<int>(std::size(kStrategyTraits)); ++i) {
    if (static_cast<int>(kStrategyTraits[i].strategy) != i) return false;
  }
  return std::size(kStrategyTraits) == static_cast<size_t>(ShardingStrategy::HYBRID_SHARD_ZERO2) + 1;
}());

}  // namespace fsdpp
