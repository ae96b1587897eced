#pragma once
// The options of a bf16 run on a GPU (parameters in bf16, gradients reduced in float32, as
// fsdpp-train's training.bf16), for the estimator's and the planner's tests.

#include "fsdpp/estimate/memory_estimate.h"

namespace fsdpp::testing {

inline EstimateOptions gpu_bf16_options(int world, int64_t batch, int64_t seq) {
  EstimateOptions o;
  o.world_size = world;
  o.batch = batch;
  o.seq_len = seq;
  o.param_dtype = EstimateDType::BF16;
  o.reduce_dtype = EstimateDType::FP32;
  o.device_is_gpu = true;
  o.runtime_baseline_bytes = 0;
  return o;
}

}  // namespace fsdpp::testing
