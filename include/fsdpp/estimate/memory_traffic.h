#pragma once
// The bytes a training step moves through the device's own memory outside its matmuls: the
// elementwise work (norms, residual adds, rotary, SwiGLU's products, attention's reads and
// writes beside its FLOPs), the loss over the logits, FSDP's copies and casts and the
// optimizer's step. On a GPU this work is bound by memory bandwidth, not by the matmul rate,
// and weighs more the narrower the model (it grows as dim, the matmuls as dim^2): the planner
// adds it to a step's compute at the device's memory bandwidth (step_time.h).
//
//   auto t = fsdpp::step_memory_traffic(fsdpp::describe_decoder(shape), options, /*shard_degree=*/8);
//   double seconds = t.total() / 3.35e12;  // an H100 SXM's HBM3
//
// Counted, not fitted: each op's reads and writes once, as a fused kernel would move them
// (docs/planner.md#the-model-of-a-step lists the counts). Caches, kernel launches and
// non-fused ops' extra passes are left out, so this is a floor.

#include "fsdpp/estimate/memory_estimate.h"

namespace fsdpp {

struct MemoryTraffic {
  double activations = 0;  // the layers' elementwise ops, forward, backward and recomputation
  double loss = 0;         // the logits' casts, log-softmax and its backward
  double fsdp = 0;         // casts of the shards for the gathers, the gathers' copy-out, the
                           // gradients' cast and copy-in for the reduction
  double optimizer = 0;    // the optimizer's reads and writes of its state, gradients and params
  double total() const { return activations + loss + fsdp + optimizer; }
};

// For one data-parallel rank's step of `options` (batch x seq_len tokens, its tp slice and
// pipeline stage: the layers of the most loaded stage, the loss on the last; its shards over
// shard_degree ranks, the FSDP group of its strategy). ConfigError for a model without a shape.
MemoryTraffic step_memory_traffic(const ModelDescription& model, const EstimateOptions& options,
                                  int shard_degree);

}  // namespace fsdpp
