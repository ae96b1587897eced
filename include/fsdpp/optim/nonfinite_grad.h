#pragma once
// Which parameter's gradient went non-finite first: the search behind "[train] step 7: the
// gradient of 'layers.1.attention.wq.weight' is nan".
//
//   const double norm = fsdpp::clip_grad_norm_(*model, 1.0);   // one fused reduction per step
//   if (!std::isfinite(norm)) {                                 // rare: only then search
//     auto bad = fsdpp::first_nonfinite_grad(*model, world->group().get());
//     ...
//   }
//
// The global gradient norm is non-finite exactly when some gradient element is, so the norm that
// clipping computes anyway is the cheap per-step check; this search runs only after it fails.
// Under an fp16 loss scaler a non-finite gradient is expected now and then (the scaler skips
// the step and lowers the scale), so the caller skips the check there.

#include <torch/nn/module.h>

#include <optional>
#include <string>

namespace fsdpp {

namespace dist {
class ProcessGroup;
}

struct NonfiniteGrad {
  std::string name;  // the parameter's name from `root`, as named_parameters() gives it
  std::string kind;  // "nan", "inf" or "-inf": the first non-finite value in this rank's shard
  int rank = 0;      // the lowest global rank whose shard of it is non-finite
};

// The first parameter of `root` (in named_parameters() order, the order of the model's
// definition) whose gradient has a NaN or an infinity on any rank; nullopt when every gradient
// is finite. Collective over `group` (one small all-reduce; nullptr or a group of one for a
// single process): each rank looks at its own shards, and the ranks agree on the lowest index.
std::optional<NonfiniteGrad> first_nonfinite_grad(torch::nn::Module& root,
                                                  dist::ProcessGroup* group);

}  // namespace fsdpp
