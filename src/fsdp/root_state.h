#pragma once
// What only the root unit keeps, once for its whole tree of units (PyTorch FSDP2's FSDPState):
// lazy initialisation (the units in order, named by their paths), the forward and backward
// orders of the last step that prefetching follows and the ones being recorded now, the count
// of prefetched all-gathers in flight (what limit_all_gathers bounds), the end-of-backward
// callback that finishes every unit, and the gradient-sync switch.
//
// The root unit owns it; every unit reaches it through FSDPUnit::root(). A unit that gets a
// parent (fully_shard of a module around it) drops its own.

#include <memory>
#include <string>
#include <vector>

#include "comm_context.h"

namespace fsdpp {

class FSDPUnit;

class FSDPRootState {
 public:
  explicit FSDPRootState(FSDPUnit& root) : root_(&root) {}
  FSDPRootState(const FSDPRootState&) = delete;
  FSDPRootState& operator=(const FSDPRootState&) = delete;

  // Once, at the root's first forward (or the first call that needs the units): finds the units
  // in the root's module, names them and their parameters by their paths and points them here.
  void lazy_init();
  // Every unit, the root first, in module order (lazy_init first).
  const std::vector<FSDPUnit*>& units() {
    lazy_init();
    return units_;
  }

  // Forward. The root's forward begins (an error when it is already running) and ends; a unit
  // records itself when its forward begins. At the end, the recorded order becomes the one the
  // next forward prefetches by, and gathers prefetched for units that did not run are dropped.
  void begin_forward();
  bool forward_active() const { return forward_active_; }
  void record_forward(FSDPUnit& unit);
  void end_forward();
  void forward_failed();  // the root's forward threw: drop every prefetched gather

  // Backward. The first pre-backward of a step queues the end-of-backward callback on the
  // autograd engine; a unit records itself when its backward begins.
  void queue_end_backward();
  bool end_backward_queued() const { return end_backward_queued_; }
  void record_backward(FSDPUnit& unit);

  // Prefetching: starts the gathers of the `depth` units after `unit` in the last step's order
  // of `pass` that have not run in this pass yet, while fewer than `unit`'s limit_all_gathers
  // prefetched gathers are in flight.
  enum class Pass { FORWARD, BACKWARD };
  void prefetch_after(const FSDPUnit& unit, Pass pass, int depth);
  // Called by each unit when its all-gather is issued and when it is used or dropped.
  void gather_started() { ++gathers_in_flight_; }
  void gather_finished() { --gathers_in_flight_; }
  int gathers_in_flight() const { return gathers_in_flight_; }

  // The streams and held buffers of the tree's collectives (comm_context.h), made at the first
  // gather on `device` (the units' compute device).
  FSDPCommContext& comm(c10::Device device);

  // The gradient-sync switch: off, units keep their unreduced gradients (accumulation).
  void set_requires_gradient_sync(bool sync) { requires_gradient_sync_ = sync; }
  bool requires_gradient_sync() const { return requires_gradient_sync_; }

 private:
  // The end-of-backward callback: units whose gradients did not all arrive finish (last unit
  // first), then every unit waits for its reductions, reshards and drops unused prefetches.
  void end_backward();

  FSDPUnit* root_;
  bool initialized_ = false;
  bool forward_active_ = false;
  bool end_backward_queued_ = false;
  bool requires_gradient_sync_ = true;
  std::vector<FSDPUnit*> units_;
  // Orders of the last complete forward / backward (pre-forward / pre-backward calls), and the
  // ones being recorded now.
  std::vector<FSDPUnit*> forward_order_, backward_order_;
  std::vector<FSDPUnit*> recording_forward_, recording_backward_;
  int gathers_in_flight_ = 0;  // prefetched all-gathers issued and not yet used
  std::unique_ptr<FSDPCommContext> comm_;
};

}  // namespace fsdpp
