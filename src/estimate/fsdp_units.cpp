// fully_shard's units in the estimator's ledger. See fsdp_units.h.
#include "fsdp_units.h"

#include <algorithm>

namespace fsdpp::estimate_detail {
UnitOrder unit_order(const ModelDescription& model) {
  UnitOrder o;
  const size_t n = model.units.size();
  for (size_t i = 1; i < n; ++i) {
    if (model.units[i].experts) {
      o.blocks.back().experts = static_cast<int>(i);
    } else {
      o.blocks.push_back({i});
    }
  }
  for (size_t i = 0; i < n; ++i) o.forward.push_back(i);
  o.backward.push_back(0);  // the root's outputs (logits, loss) get their gradients first
  for (auto b = o.blocks.rbegin(); b != o.blocks.rend(); ++b) {
    o.backward.push_back(b->unit);  // a layer's output gets its gradient before its experts'
    if (b->experts >= 0) o.backward.push_back(static_cast<size_t>(b->experts));
  }
  o.backward_pos.assign(n, 0);
  for (size_t k = 0; k < o.backward.size(); ++k) o.backward_pos[o.backward[k]] = k;
  return o;
}

FsdpUnits::FsdpUnits(Ledger& l, const DataParallelLayout& a, std::vector<UnitState>& us, Settings s)
    : l_(l), a_(a), us_(us), s_(s), pending_(us.size(), {-1, -1}), refreshed_(us.size(), false) {}

void FsdpUnits::start_step() {
  std::fill(refreshed_.begin(), refreshed_.end(), false);
  last_reduced_ = -1;
}

bool FsdpUnits::needs_gather(size_t i) const {
  return a_.gathers(i) && (s_.keep_unsharded ? !refreshed_[i] : us_[i].unsharded < 0);
}

void FsdpUnits::start_gather(size_t i) {
  if (pending_[i].first >= 0) return;
  // The all-gather input: the shard converted to param_dtype, or copied from the host.
  const int64_t pb = s_.param_bytes;
  Id cast = s_.mixed_precision || s_.offload ? l_.alloc(kUnsharded, us_[i].shard * pb) : -1;
  pending_[i] = {l_.alloc(kUnsharded, static_cast<int64_t>(a_.unit_shard_world[i]) * us_[i].shard * pb), cast};
  ++in_flight_;
}

void FsdpUnits::unshard(size_t i) {
  auto& u = us_[i];
  if (!needs_gather(i)) return;
  start_gather(i);
  refreshed_[i] = true;
  if (u.unsharded < 0) u.unsharded = l_.alloc(kUnsharded, u.numel * s_.param_bytes);  // rows copied out
  l_.free(pending_[i].first);
  l_.free(pending_[i].second);
  pending_[i] = {-1, -1};
  --in_flight_;
}

void FsdpUnits::prefetch(const std::vector<size_t>& order, size_t pos, int depth) {
  for (size_t k = pos + 1; k < order.size() && depth > 0; ++k, --depth) {
    if (s_.limit_all_gathers > 0 && in_flight_ >= s_.limit_all_gathers) break;
    if (needs_gather(order[k])) start_gather(order[k]);
  }
}

void FsdpUnits::reshard(size_t i) {
  if (s_.keep_unsharded) return;
  l_.free(us_[i].unsharded);
  us_[i].unsharded = -1;
}

void FsdpUnits::reduce(size_t i) {
  auto& u = us_[i];
  const int64_t rb = s_.reduce_bytes, f32 = 4;
  // The previous unit's reduce-scatter has finished by now (the next one queues behind it).
  if (last_reduced_ >= 0) {
    for (Id id : us_[last_reduced_].in_flight) l_.free(id);
    us_[last_reduced_].in_flight.clear();
  }
  // (shard_world, shard) input: zeros, then each gradient copied into its rows. Without
  // sharding it is all-reduced in place (replicas) or used as is (one rank): it becomes the
  // gradient the optimizer reads.
  const bool gathers = a_.gathers(i);
  Id input = l_.alloc(gathers ? kGradWork : kGradShards, static_cast<int64_t>(a_.unit_shard_world[i]) * u.shard * rb);
  for (Id g : u.grads) l_.free(g);
  u.grads.clear();
  if (gathers) {
    if (s_.offload) l_.touch(kGradWork, u.shard * rb);  // reduced on the device, then copied out
    u.grad_shard = l_.alloc(kGradShards, u.shard * rb);
    // The ring's send and receive buffers (one chunk each) live as long as the input.
    u.in_flight = {input, l_.alloc(kGradWork, 2 * u.shard * rb)};
    if (rb != f32) {  // the reduced shard goes back to fp32 for the optimizer
      Id up = l_.alloc(kGradShards, u.shard * f32);
      l_.free(u.grad_shard);
      u.grad_shard = up;
    }
  } else {
    u.grad_shard = input;
  }
  last_reduced_ = static_cast<int>(i);
}

void FsdpUnits::finish_reduces() {
  if (last_reduced_ >= 0) {
    for (Id id : us_[last_reduced_].in_flight) l_.free(id);
  }
}

}  // namespace fsdpp::estimate_detail
