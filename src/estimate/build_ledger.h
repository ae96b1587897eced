#pragma once
// Building the model in the estimator's ledger (private to src/estimate/): what every rank
// allocates before its first step.

#include <vector>

#include "fsdpp/estimate/memory_estimate.h"
#include "ledger.h"

namespace fsdpp::estimate_detail {

// `whole` built in fp32 (each parameter, then its init draw through a temporary of its size);
// under TP each parameter replaced by this rank's slice (`pre_ep`); under EP the sparse layers'
// stacked experts resized to E / ep (`model`'s expert units); then, unit by unit from the
// innermost, the flat shard of `flat_shards[unit]` elements kept and the unit's tensors freed.
void build_model_ledger(Ledger& l, const ModelDescription& whole, const ModelDescription& pre_ep,
                        const ModelDescription& model, const std::vector<int64_t>& flat_shards, int tp);
// Deferred initialisation instead: nothing allocated until the flat shards (zeros), then one chunk
// of at most `chunk_bytes` (fp32 rows of the largest parameter) drawn or read at a time, with this
// rank's columns of it copied out under TP.
void deferred_init_ledger(Ledger& l, const ModelDescription& whole,
                          const std::vector<int64_t>& flat_shards, int tp, int64_t chunk_bytes);

}  // namespace fsdpp::estimate_detail
