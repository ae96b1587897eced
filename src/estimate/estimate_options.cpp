// EstimateOptions from the options fully_shard runs with (memory_estimate.h).
#include "fsdpp/common/error.h"
#include "fsdpp/estimate/memory_estimate.h"

namespace fsdpp {
namespace {

EstimateDType estimate_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return EstimateDType::FP32;
    case at::kBFloat16: return EstimateDType::BF16;
    case at::kHalf: return EstimateDType::FP16;
    default: break;
  }
  FSDPP_THROW(ConfigError, "[estimate] mixed-precision dtype {} is not modelled; expected float32, "
              "bfloat16 or float16", c10::toString(t));
}

}  // namespace

EstimateOptions estimate_options_of(const FullyShardOptions& fsdp) {
  EstimateOptions o;
  o.strategy = fsdp.strategy;
  // MixedPrecisionPolicy's defaults: unset param_dtype is the parameters' own (fsdpp-train's
  // are float32), unset reduce_dtype is param_dtype.
  const auto& mp = fsdp.mp_policy;
  o.param_dtype = mp.param_dtype ? estimate_dtype(*mp.param_dtype) : EstimateDType::FP32;
  o.reduce_dtype = mp.reduce_dtype ? estimate_dtype(*mp.reduce_dtype) : o.param_dtype;
  o.cpu_offload = fsdp.offload_policy.offload_params;
  o.forward_prefetch = fsdp.forward_prefetch;
  o.backward_prefetch =
      fsdp.backward_prefetch == BackwardPrefetch::NONE ? 0 : fsdp.backward_prefetch_depth;
  o.backward_prefetch_post = fsdp.backward_prefetch == BackwardPrefetch::BACKWARD_POST;
  o.limit_all_gathers = fsdp.limit_all_gathers;
  return o;
}

}  // namespace fsdpp
