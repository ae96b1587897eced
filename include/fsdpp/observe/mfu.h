#pragma once
// Model FLOPs utilisation: the model's FLOPs per second (fsdpp/estimate/flops.h) over what the
// device's matrix units do, measured on the device rather than taken from a datasheet.
//
//   const double peak = fsdpp::observe::measure_matmul_flops(world.device());  // once
//   const double mfu = fsdpp::observe::mfu(flops_per_token, tokens_per_s, world.size(), peak);

#include <cstdint>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace fsdpp::observe {

// FLOP/s of `reps` n x n x n products in `dtype` on `device` (random inputs, after a warm-up;
// the device synchronised around them), the caching allocator's blocks they used handed back.
// 0 on the CPU, where fsdpp reports no MFU.
double measure_matmul_flops(c10::Device device, c10::ScalarType dtype = c10::kBFloat16,
                            int64_t n = 8192, int reps = 10);

// The share of `ranks` devices of `peak_flops` each that `tokens_per_s` tokens of
// `flops_per_token` use; 0 when the peak is unknown (0).
double mfu(double flops_per_token, double tokens_per_s, int ranks, double peak_flops);

}  // namespace fsdpp::observe
