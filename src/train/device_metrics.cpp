#include "device_metrics.h"

#include <torch/torch.h>

#include "fsdpp/dist/device.h"
#include "fsdpp/estimate/flops.h"
#include "fsdpp/train/memory_check.h"
#include "fsdpp/train/mfu.h"
#include "session.h"

namespace fsdpp::train::detail {

DeviceMetrics::DeviceMetrics(const TrainSession& s) : s_(s) {
  const c10::Device device = s.world.device();
  // MFU needs the model's FLOPs per token: fsdpp-train's models give them, train()'s do not.
  if (!dist::has_device_memory(device)) return;
  flops_per_token_ = s.run_model.flops_per_token(s);
  if (flops_per_token_ <= 0) return;
  peak_flops_ = measure_matmul_flops(device);
  s.say(fmt::format("[train] {}: bf16 matrix multiply measured at {:.0f} TFLOP/s; {:.3g} FLOPs "
                    "per token (6N + attention): MFU is logged against it",
                    device.str(), peak_flops_ / 1e12, flops_per_token_));
}

void DeviceMetrics::add_to(nlohmann::json& line, double tokens_per_s) const {
  const c10::Device device = s_.world.device();
  if (!dist::has_device_memory(device)) return;
  const auto m = dist::device_memory(device);
  auto peaks = torch::tensor({static_cast<double>(m.peak_allocated), static_cast<double>(m.peak_reserved)},
                             torch::kDouble);
  s_.world.group()->all_reduce(peaks, dist::ReduceOp::MAX, {"metrics"});
  constexpr double kMB = 1 << 20;
  line["cuda_peak_allocated_mb"] = peaks[0].item<double>() / kMB;
  line["cuda_peak_reserved_mb"] = peaks[1].item<double>() / kMB;
  line["cuda_total_mb"] = static_cast<double>(m.total) / kMB;
  if (flops_per_token_ > 0) line["mfu"] = mfu(flops_per_token_, tokens_per_s, s_.world.size(), peak_flops_);
}

}  // namespace fsdpp::train::detail
