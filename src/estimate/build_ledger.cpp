#include "build_ledger.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace fsdpp::estimate_detail {

void build_model_ledger(Ledger& l, const ModelDescription& whole, const ModelDescription& pre_ep,
                        const ModelDescription& model, const std::vector<int64_t>& flat_shards, int tp) {
  // ---- building the model: every rank builds it whole (each parameter allocated, then redrawn
  // from the seed through a temporary of its size); under TP the plan then replaces each
  // parameter by this rank's slice; then fully_shard, unit by unit from the innermost, copies the
  // rank's rows into the unit's flat shard and frees the full tensors ---------------------------
  l.at("building the model");
  const int64_t f32 = 4;
  const auto& root_params = model.units[0].params;
  {
    // Built before expert parallelism splits units: full[] is over pre_ep's units.
    std::vector<std::vector<Id>> full(pre_ep.units.size());
    // Registration order: (unit, index of the parameter in the unit).
    std::vector<std::pair<size_t, size_t>> order;
    if (!root_params.empty()) order.emplace_back(0, 0);
    for (size_t i = 1; i < pre_ep.units.size(); ++i)
      for (size_t k = 0; k < pre_ep.units[i].params.size(); ++k) order.emplace_back(i, k);
    for (size_t k = 1; k < root_params.size(); ++k) order.emplace_back(0, k);
    for (const auto& [unit, k] : order) full[unit].push_back(l.alloc(kParams, whole.units[unit].params[k].numel() * f32));
    for (const auto& [unit, k] : order) {
      const auto& p = whole.units[unit].params[k];
      if (p.row_numel > 1 || model.shape == std::nullopt) l.touch(kParams, p.numel() * f32);  // init draw
    }
    if (tp > 1) {
      l.at("tensor-parallel slicing");
      std::vector<size_t> next(pre_ep.units.size(), 0);
      for (const auto& [unit, k] : order) {
        Id& id = full[unit][next[unit]++];
        const Id slice = l.alloc(kParams, pre_ep.units[unit].params[k].numel() * f32);
        l.free(id);
        id = slice;
      }
      l.at("building the model");
    }
    // Expert parallelism: each sparse layer's stacked experts resized to this rank's E / ep
    // (parallelize_qwen3_moe_experts), then the experts a unit of their own (also whole experts
    // under tp, which parallelize shards over the sparse mesh).
    std::vector<std::vector<Id>> ids;  // over model's units
    ids.push_back(full[0]);
    for (size_t i = 1; i < pre_ep.units.size(); ++i) {
      const size_t next = ids.size() + 1;  // the experts' unit in `model`, if any
      const bool split = next < model.units.size() && model.units[next].experts;
      if (!split) {
        ids.push_back(full[i]);
        continue;
      }
      l.at("expert-parallel slicing");
      std::vector<Id> layer, experts;
      const auto& mine = model.units[next].params;
      for (size_t k = 0; k < full[i].size(); ++k) {
        if (k >= 6 && k < 9) {
          const int64_t numel = mine[k - 6].numel();
          Id slice = full[i][k];
          if (numel != pre_ep.units[i].params[k].numel()) {
            slice = l.alloc(kParams, numel * f32);
            l.free(full[i][k]);
          }
          experts.push_back(slice);
        } else {
          layer.push_back(full[i][k]);
        }
      }
      ids.push_back(layer);
      ids.push_back(experts);
      l.at("building the model");
    }
    for (size_t k = 1; k <= flat_shards.size(); ++k) {
      const size_t i = k % flat_shards.size();  // the blocks, then the root
      l.alloc(kParams, flat_shards[i] * f32);  // the flat shard, kept
      for (Id id : ids[i]) l.free(id);
    }
  }

}

void deferred_init_ledger(Ledger& l, const ModelDescription& whole,
                          const std::vector<int64_t>& flat_shards, int tp, int64_t chunk_bytes) {
  l.at("initialising the shards (deferred)");
  const int64_t f32 = 4;
  for (size_t k = 1; k <= flat_shards.size(); ++k) l.alloc(kParams, flat_shards[k % flat_shards.size()] * f32);
  int64_t largest = 0;
  for (const auto& u : whole.units)
    for (const auto& p : u.params) largest = std::max(largest, p.numel() * f32);
  const int64_t chunk = std::min(chunk_bytes, largest);
  const Id drawn = l.alloc(kParams, chunk);
  if (tp > 1) l.touch(kParams, chunk / tp);  // a column-split parameter's part of the chunk
  l.free(drawn);
}

}  // namespace fsdpp::estimate_detail
