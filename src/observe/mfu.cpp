#include "fsdpp/observe/mfu.h"

#include <ATen/ATen.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <chrono>

#include "fsdpp/dist/device.h"

namespace fsdpp::observe {

double measure_matmul_flops(c10::Device device, c10::ScalarType dtype, int64_t n, int reps) {
  if (device.is_cpu()) return 0;
  at::NoGradGuard no_grad;
  const auto stream = dist::Stream::current(device);
  double seconds = 0;
  {
    const auto options = at::TensorOptions(dtype).device(device);
    auto a = at::randn({n, n}, options), b = at::randn({n, n}, options), c = at::empty({n, n}, options);
    for (int i = 0; i < 3; ++i) at::mm_out(c, a, b);  // warm-up: handles, clocks
    stream.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) at::mm_out(c, a, b);
    stream.synchronize();
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // The inputs' blocks go back to the device: the run's reserved memory is its own.
  c10::getDeviceAllocator(device.type())->emptyCache();
  dist::reset_peak_memory(device);
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) * reps / seconds;
}

double mfu(double flops_per_token, double tokens_per_s, int ranks, double peak_flops) {
  if (peak_flops <= 0 || ranks <= 0) return 0;
  return flops_per_token * tokens_per_s / (static_cast<double>(ranks) * peak_flops);
}

}  // namespace fsdpp::observe
