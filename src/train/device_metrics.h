#pragma once
// What metrics.jsonl and TensorBoard get from a GPU, beside the host's RSS that every run logs:
// the caching allocator's peaks (allocated and reserved, the largest over the ranks) and the
// model FLOPs utilisation against the device's measured bf16 matrix rate. Nothing on the CPU.
// Private to src/train.

#include <nlohmann/json.hpp>

namespace fsdpp::train::detail {

struct TrainSession;

class DeviceMetrics {
 public:
  // Measures the device's matrix rate once (about 20 ms on an H100); nothing on the CPU.
  explicit DeviceMetrics(const TrainSession& s);
  // cuda_peak_allocated_mb, cuda_peak_reserved_mb, cuda_total_mb, mfu. Collective over the
  // world on a GPU (one small all-reduce); every rank calls it when it logs.
  void add_to(nlohmann::json& line, double tokens_per_s) const;

 private:
  const TrainSession& s_;
  double flops_per_token_ = 0;
  double peak_flops_ = 0;
};

}  // namespace fsdpp::train::detail
