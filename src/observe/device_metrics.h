#pragma once
// What metrics.jsonl and TensorBoard get from a GPU, beside the host's RSS that every run logs:
// the caching allocator's peaks (allocated and reserved, the largest over the ranks) and the
// model FLOPs utilisation against the device's measured bf16 matrix rate. Nothing on the CPU.

#include <c10/core/Device.h>

#include <string>

#include <nlohmann/json.hpp>

#include "fsdpp/dist/process_group.h"

namespace fsdpp::observe::detail {

class DeviceMetrics {
 public:
  // Measures the device's matrix rate once (about 20 ms on an H100) when there is a model's
  // `flops_per_token` (0: no MFU); nothing on the CPU.
  DeviceMetrics(c10::Device device, double flops_per_token);
  // The measured rate, for the run's output; empty when there is no MFU to log.
  std::string describe() const;
  // cuda_peak_allocated_mb, cuda_peak_reserved_mb, cuda_total_mb, mfu (over the ranks of
  // `group`). Collective over `group` on a GPU (one small all-reduce); every rank calls it when
  // it logs.
  void add_to(nlohmann::json& line, double tokens_per_s, dist::ProcessGroup& group) const;

 private:
  c10::Device device_;
  double flops_per_token_ = 0;
  double peak_flops_ = 0;
};

}  // namespace fsdpp::observe::detail
