#pragma once
// fully_shard's units in the estimator's ledger (private to src/estimate/): each unit's shard,
// its all-gathers (prefetched or not, bounded by limit_all_gathers), its reshard after forward
// and its gradients' reduce-scatter, in the order the step runs them.

#include <cstdint>
#include <utility>
#include <vector>

#include "estimate_layout.h"
#include "ledger.h"
#include "unit_states.h"

namespace fsdpp::estimate_detail {

// The order the units run in: the decoder layers, each with its experts' unit when expert
// parallelism made one; forward as registered, backward from the root's outputs down.
struct UnitOrder {
  struct Block {
    size_t unit;
    int experts = -1;
  };
  std::vector<Block> blocks;
  std::vector<size_t> forward, backward;
  std::vector<size_t> backward_pos;  // a unit's place in `backward`
};
UnitOrder unit_order(const ModelDescription& model);

// The units' gathers, reshards and reduces as fully_shard runs them, in the ledger.
class FsdpUnits {
 public:
  struct Settings {
    bool keep_unsharded = false;  // ZERO1: gathered once per step, in forward, and kept
    bool mixed_precision = false;
    bool offload = false;  // CPU offload on a GPU: shards on the host
    int64_t param_bytes = 4, reduce_bytes = 4;
    int limit_all_gathers = 0;
  };
  FsdpUnits(Ledger& l, const DataParallelLayout& a, std::vector<UnitState>& us, Settings s);

  // A new step: nothing refreshed, nothing reduced yet.
  void start_step();
  // The unit's parameters gathered for its compute (its gather issued now unless prefetched).
  void unshard(size_t i);
  // After unit order[pos]: the next `depth` units' gathers issued, within limit_all_gathers.
  void prefetch(const std::vector<size_t>& order, size_t pos, int depth);
  void reshard(size_t i);
  // The unit's gradients reduce-scattered into its shard (or all-reduced in place unsharded).
  void reduce(size_t i);
  // The last reduce-scatter's buffers, once it has finished at the end of backward.
  void finish_reduces();

 private:
  bool needs_gather(size_t i) const;
  void start_gather(size_t i);

  Ledger& l_;
  const DataParallelLayout& a_;
  std::vector<UnitState>& us_;
  Settings s_;
  // A gather in flight holds its (shard_world x shard) output, and with mixed precision the
  // shard converted to param_dtype (the all-gather input), until the unit copies it out.
  std::vector<std::pair<Id, Id>> pending_;
  int in_flight_ = 0;
  std::vector<bool> refreshed_;  // ZERO1 refreshes its gathered parameters once per step
  int last_reduced_ = -1;
};

}  // namespace fsdpp::estimate_detail
