#pragma once
// The optimizer as the estimate sees it (private to src/estimate/): the optimizer-state adapter's
// kind and the state tensors its first step creates.

#include <cstdint>

#include "fsdpp/estimate/memory_estimate.h"
#include "fsdpp/optim/optimizer_state.h"

namespace fsdpp::estimate_detail {

// The optimizer as the optimizer-state adapter knows it, with what decides its state tensors.
struct EstimatedOptimizer {
  optim::OptimizerKind kind;
  optim::StateConfig config;

  // fp32 state tensors per parameter (the ones its first step creates).
  int64_t states() const { return static_cast<int64_t>(optim::created_state_names(kind, config).size()); }
  // Adam's step, with its two temporaries (exp_avg_sq.sqrt(), and that divided by a scalar).
  bool adam() const { return kind == optim::OptimizerKind::ADAMW || kind == optim::OptimizerKind::ADAM; }
};

inline EstimatedOptimizer estimated_optimizer(EstimateOptimizer o) {
  switch (o) {
    case EstimateOptimizer::ADAMW: return {optim::OptimizerKind::ADAMW, {}};
    case EstimateOptimizer::ADAM: return {optim::OptimizerKind::ADAM, {}};
    case EstimateOptimizer::SGD: return {optim::OptimizerKind::SGD, {}};
    case EstimateOptimizer::SGD_MOMENTUM: return {optim::OptimizerKind::SGD, {.momentum = true}};
  }
  return {optim::OptimizerKind::ADAMW, {}};
}

}  // namespace fsdpp::estimate_detail
