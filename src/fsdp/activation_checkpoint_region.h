#pragma once
// Where the current thread is with respect to activation checkpointing, for the units that run
// inside a checkpointed block. Thread-local for the same reason autograd's grad mode is: the
// question is about the current call stack (the first forward, or the recomputation inside a
// backward, which may run on an autograd device thread), never about another thread.

#include <ATen/Tensor.h>

#include <cstddef>
#include <vector>

namespace fsdpp::detail {

enum class CheckpointPhase { NONE, FORWARD, RECOMPUTE };

// The innermost checkpoint phase of this thread.
CheckpointPhase checkpoint_phase();
// In RECOMPUTE: what is being recomputed (a marked module's checkpoint marker; null for the
// functional form); null in the other phases.
const void* recomputing();

// Selective checkpointing's products (CheckpointOptions::keep_products) of the checkpointed call
// this thread is in: appended by its first forward, handed back in the same order to its
// recomputation (kept_linear.cpp).
struct KeptProducts {
  std::vector<at::Tensor> tensors;
  size_t next = 0;  // the recomputation's next one
};

// The innermost checkpointed call's products when it keeps them; null otherwise (outside any
// checkpoint, or inside one that keeps none, even within a selective one).
KeptProducts* kept_products();

class KeptProductsGuard {
 public:
  explicit KeptProductsGuard(KeptProducts* products);
  ~KeptProductsGuard();
  KeptProductsGuard(const KeptProductsGuard&) = delete;
  KeptProductsGuard& operator=(const KeptProductsGuard&) = delete;

 private:
  KeptProducts* previous_;
};

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
