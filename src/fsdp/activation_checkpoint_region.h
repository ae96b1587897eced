#pragma once
// Where the current thread is with respect to activation checkpointing, for the units that run
// inside a checkpointed block. Thread-local for the same reason autograd's grad mode is: the
// question is about the current call stack (the first forward, or the recomputation inside a
// backward, which may run on an autograd device thread), never about another thread.

namespace fsdpp::detail {

enum class CheckpointPhase { NONE, FORWARD, RECOMPUTE };

// The innermost checkpoint phase of this thread.
CheckpointPhase checkpoint_phase();
// In RECOMPUTE: what is being recomputed (a marked module's checkpoint marker; null for the
// functional form); null in the other phases.
const void* recomputing();

class CheckpointPhaseGuard {
 public:
  explicit CheckpointPhaseGuard(CheckpointPhase phase, const void* owner = nullptr);
  ~CheckpointPhaseGuard();
  CheckpointPhaseGuard(const CheckpointPhaseGuard&) = delete;
  CheckpointPhaseGuard& operator=(const CheckpointPhaseGuard&) = delete;

 private:
  CheckpointPhase previous_;
  const void* previous_owner_;
};

}  // namespace fsdpp::detail
