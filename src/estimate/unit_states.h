#pragma once
// What a rank holds of its FSDP units' parameters and states (private to src/estimate/): each
// unit's shard, the optimizer's parameters in its order, ZeRO's accounting of the persistent
// model states and what stays between steps.

#include <cstdint>
#include <vector>

#include "estimate_layout.h"
#include "estimated_optimizer.h"
#include "ledger.h"

namespace fsdpp::estimate_detail {

struct UnitState {
  int64_t numel = 0;        // unsharded elements
  int64_t shard = 0;        // this rank's padded elements
  Id unsharded = -1;        // gathered parameters
  std::vector<Id> grads;    // unsharded gradients accumulating in backward
  Id grad_shard = -1;       // reduced gradient shard (until zero_grad)
  std::vector<Id> in_flight;  // reduce-scatter input and ring buffers while the collective runs
};

// Every unit's elements and this rank's padded shard of them.
std::vector<UnitState> unit_states(const DataParallelLayout& a);
// The parameter shards in the optimizer's order (module registration: the embedding, the blocks,
// then the final norm and the output layer), element counts.
std::vector<int64_t> optimizer_order_shards(const DataParallelLayout& a);
// Persistent model state per rank (ZeRO's accounting, no padding, no temporaries): fp32
// parameters and gradients and `optim_bytes` of state per element, each sharded as the strategy
// shards it (the experts over their own ranks).
int64_t model_states(const DataParallelLayout& a, const std::vector<UnitState>& us, int64_t optim_bytes);
// What the rank holds between steps: fp32 parameter shards, their gradients after the reduce
// (fp32 shards, or reduce_dtype replicas where a unit is not sharded) and the optimizer's state.
MemoryEstimate::Held held_between_steps(const DataParallelLayout& a, const std::vector<UnitState>& us,
                                        int64_t reduce_bytes, int64_t optim_bytes);

}  // namespace fsdpp::estimate_detail
