// What a rank holds of its FSDP units' parameters and states. See unit_states.h.
#include "unit_states.h"

namespace fsdpp::estimate_detail {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// This rank's padded shard of a parameter: split along dim 0 into `world` chunks of
// ceil(rows / world) rows; the whole parameter where the unit is not gathered.
int64_t shard_of(const DataParallelLayout& a, size_t unit, const ModelDescription::Param& p) {
  return a.gathers(unit) ? ceil_div(p.rows, a.unit_shard_world[unit]) * p.row_numel : p.numel();
}

}  // namespace

std::vector<UnitState> unit_states(const DataParallelLayout& a) {
  std::vector<UnitState> us(a.model.units.size());
  for (size_t i = 0; i < a.model.units.size(); ++i) {
    const auto& u = a.model.units[i];
    us[i].numel = u.numel();
    if (!a.gathers(i)) {
      us[i].shard = us[i].numel;
      continue;
    }
    for (const auto& p : u.params) us[i].shard += ceil_div(p.rows, a.unit_shard_world[i]) * p.row_numel;
  }
  return us;
}

std::vector<int64_t> optimizer_order_shards(const DataParallelLayout& a) {
  std::vector<int64_t> shards;
  const auto& units = a.model.units;
  const auto& root_params = units[0].params;
  if (!root_params.empty()) shards.push_back(shard_of(a, 0, root_params[0]));
  for (size_t i = 1; i < units.size(); ++i)
    for (const auto& p : units[i].params) shards.push_back(shard_of(a, i, p));
  for (size_t k = 1; k < root_params.size(); ++k) shards.push_back(shard_of(a, 0, root_params[k]));
  return shards;
}
int64_t model_states(const DataParallelLayout& a, const std::vector<UnitState>& us, int64_t optim_bytes) {
  const double f32 = 4;
  double states = 0;
  for (size_t i = 0; i < a.model.units.size(); ++i) {
    const double psi = static_cast<double>(us[i].numel);
    const int w = a.model.units[i].experts ? a.unit_shard_world[i] : a.dp_world;
    states += !a.traits->shards                       ? psi * (f32 + f32 + optim_bytes)
              : a.traits->keep_unsharded_between_steps ? psi * f32 + psi * (f32 + optim_bytes) / w
                                                       : psi * (f32 + f32 + optim_bytes) / a.unit_shard_world[i];
  }
  return static_cast<int64_t>(states);
}

MemoryEstimate::Held held_between_steps(const DataParallelLayout& a, const std::vector<UnitState>& us,
                                        int64_t reduce_bytes, int64_t optim_bytes) {
  const int64_t f32 = 4;
  MemoryEstimate::Held held;
  for (size_t i = 0; i < us.size(); ++i) {
    held.parameters += us[i].shard * f32;
    held.gradients += a.gathers(i) ? us[i].shard * f32 : us[i].numel * reduce_bytes;
    held.optimizer_state += us[i].shard * optim_bytes;
  }
  return held;
}

}  // namespace fsdpp::estimate_detail
