#include "root_state.h"

#include <torch/csrc/autograd/engine.h>

#include <algorithm>

#include "fsdp_unit.h"
#include "fsdpp/common/error.h"

namespace fsdpp {

void FSDPRootState::lazy_init() {
  if (initialized_) return;
  initialized_ = true;
  units_.clear();
  for (const auto& item : root_->module_->named_modules("", /*include_self=*/true)) {
    FSDPUnit* u = find_unit(*item.value());
    if (!u) continue;
    const std::string& prefix = item.key();
    u->root_ = this;
    u->name_ = prefix.empty() ? "(root)" : prefix;
    if (!prefix.empty()) {
      for (auto& p : u->params_) p->fqn = prefix + "." + p->fqn;
    }
    units_.push_back(u);
  }
}

// ---------------------------------------------------------------------------------------------
// Forward

void FSDPRootState::begin_forward() {
  FSDPP_CHECK(!forward_active_, "[fsdp] the root unit '{}' was called from inside its own forward",
              root_->name());
  forward_active_ = true;
  recording_forward_.clear();
  // The shards may have changed since the last gathers (the optimizer step, a state dict).
  if (comm_) comm_->gathers_follow_compute();
}

FSDPCommContext& FSDPRootState::comm(c10::Device device) {
  if (!comm_) {
    comm_ = std::make_unique<FSDPCommContext>(device);
    comm_->gathers_follow_compute();
  }
  return *comm_;
}

void FSDPRootState::record_forward(FSDPUnit& unit) {
  auto& rec = recording_forward_;
  if (std::find(rec.begin(), rec.end(), &unit) == rec.end()) rec.push_back(&unit);
}

void FSDPRootState::end_forward() {
  forward_active_ = false;
  forward_order_ = recording_forward_;
  for (auto* u : units_) {
    if (u->sharded_) u->drop_prefetch();  // prefetched for a unit that did not run
  }
}

void FSDPRootState::forward_failed() {
  forward_active_ = false;
  for (auto* u : units_) u->drop_prefetch();
}

// ---------------------------------------------------------------------------------------------
// Backward

void FSDPRootState::queue_end_backward() {
  if (end_backward_queued_) return;
  end_backward_queued_ = true;
  recording_backward_.clear();
  torch::autograd::Engine::get_default_engine().queue_callback([this] { end_backward(); });
}

void FSDPRootState::record_backward(FSDPUnit& unit) {
  auto& rec = recording_backward_;
  if (std::find(rec.begin(), rec.end(), &unit) == rec.end()) rec.push_back(&unit);
}

void FSDPRootState::end_backward() {
  end_backward_queued_ = false;
  // Units whose gradients did not all arrive (unused or frozen-path parameters, outputs that
  // did not reach the loss) finish here, in the same order on every rank.
  for (auto it = units_.rbegin(); it != units_.rend(); ++it) {
    if ((*it)->state_ == UnitState::PRE_BACKWARD) (*it)->post_backward();
  }
  for (auto* u : units_) {
    u->finish_gradients();
    u->reshard(!u->keep_unsharded_between_steps());
    u->state_ = UnitState::IDLE;
    u->drop_prefetch();  // prefetched for a unit whose backward did not run
  }
  backward_order_ = recording_backward_;
}

// ---------------------------------------------------------------------------------------------
// Prefetch

void FSDPRootState::prefetch_after(const FSDPUnit& unit, Pass pass, int depth) {
  if (depth <= 0) return;
  const auto& order = pass == Pass::FORWARD ? forward_order_ : backward_order_;
  const auto& done = pass == Pass::FORWARD ? recording_forward_ : recording_backward_;
  auto it = std::find(order.begin(), order.end(), &unit);
  if (it == order.end()) return;
  const int limit = unit.options().limit_all_gathers;
  for (++it; it != order.end() && depth > 0; ++it) {
    // A unit that already ran in this pass (the root finishes its backward last but begins
    // it first) would only be gathered to be dropped.
    if (std::find(done.begin(), done.end(), *it) != done.end()) continue;
    // Still gathered (kept after its forward): nothing to fetch, and no reason to wait for
    // its backward before fetching the next one.
    if (!(*it)->sharded_) continue;
    if (limit > 0 && gathers_in_flight_ >= limit) break;
    (*it)->start_unshard();
    --depth;
  }
}

}  // namespace fsdpp
