#include "device_metrics.h"

#include <torch/torch.h>

#include <fmt/format.h>

#include "fsdpp/dist/device.h"
#include "fsdpp/observe/mfu.h"

namespace fsdpp::observe::detail {

DeviceMetrics::DeviceMetrics(c10::Device device, double flops_per_token) : device_(device) {
  // MFU needs the model's FLOPs per token: fsdpp-train's models give them, train()'s do not.
  if (!dist::has_device_memory(device)) return;
  flops_per_token_ = flops_per_token;
  if (flops_per_token_ <= 0) return;
  peak_flops_ = measure_matmul_flops(device);
}

std::string DeviceMetrics::describe() const {
  if (flops_per_token_ <= 0) return "";
  return fmt::format("[train] {}: bf16 matrix multiply measured at {:.0f} TFLOP/s; {:.3g} FLOPs "
                     "per token (6N + attention): MFU is logged against it",
                     device_.str(), peak_flops_ / 1e12, flops_per_token_);
}

void DeviceMetrics::add_to(nlohmann::json& line, double tokens_per_s, dist::ProcessGroup& group) const {
  if (!dist::has_device_memory(device_)) return;
  const auto m = dist::device_memory(device_);
  auto peaks = torch::tensor({static_cast<double>(m.peak_allocated), static_cast<double>(m.peak_reserved)},
                             torch::kDouble);
  group.all_reduce(peaks, dist::ReduceOp::MAX, {"metrics"});
  constexpr double kMB = 1 << 20;
  line["cuda_peak_allocated_mb"] = peaks[0].item<double>() / kMB;
  line["cuda_peak_reserved_mb"] = peaks[1].item<double>() / kMB;
  line["cuda_total_mb"] = static_cast<double>(m.total) / kMB;
  if (flops_per_token_ > 0) line["mfu"] = mfu(flops_per_token_, tokens_per_s, group.size(), peak_flops_);
}

}  // namespace fsdpp::observe::detail
