// The cluster presets (cluster.h, docs/planner.md#clusters).
#include "fsdpp/estimate/cluster.h"

#include <fmt/ranges.h>

#include "fsdpp/common/error.h"

namespace fsdpp {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
// One eager LibTorch op issued to a GPU: the dispatcher and a CUDA launch. Assumed (no GPU has
// measured it here): what a MoE layer's per-expert kernels cost at the least.
constexpr double kGpuOpOverhead = 6e-6;
// The GPU presets' band: the largest error of the six checks in docs/planner.md (published runs
// and the measured H100 step): 0.81 of Megatron's GPT-3 on 4,608 GPUs.
constexpr double kGpuBand = 0.19;
constexpr const char* kGpuBandFrom = "the largest error of the six checks in docs/planner.md";
// One small op on this machine's CPU through LibTorch: a product of two 32 x 128 tensors called
// from Python took 4.1 us, the Python call included.
constexpr double kCpuOpOverhead = 4e-6;

}  // namespace

std::vector<std::string> cluster_preset_names() { return {"h100-sxm", "h100-sxm-500w", "a100-sxm", "cpu"}; }

Cluster cluster_preset(const std::string& name) {
  Cluster c;
  c.name = name;
  if (name == "h100-sxm" || name == "h100-sxm-500w") {
    c.devices_per_node = 8;
    c.memory_bytes = static_cast<int64_t>(79.6 * kGiB);  // 80 GB HBM3, as the driver reports it
    c.peak_flops = 989e12;                                // bf16 dense, SXM
    // What a large bf16 GEMM reaches of the peak; not measured here (no GPU): an assumption,
    // and the one number a GPU run calibrates (--compute-efficiency).
    c.compute_efficiency = name == "h100-sxm" ? 0.60 : 0.52;
    c.intra_bandwidth = 360e9;  // NVLink 4 (900 GB/s both ways): NCCL's ring bus bandwidth
    c.inter_bandwidth = 40e9;   // one 400 Gb/s InfiniBand NIC per GPU (50 GB/s), as achieved
    c.latency_s = 10e-6;
    c.memory_bandwidth = 3.35e12;  // HBM3
    c.source = name == "h100-sxm" ? "8 x H100 SXM per node, NVLink 4, 8 x 400 Gb/s InfiniBand"
                                  : "torchtitan's H100s capped at 500 W";
    c.memory_from = "80 GB HBM3 as the driver reports it";
    c.efficiency_from = name == "h100-sxm" ? "assumed" : "assumed: 0.60 x ~0.87 for the cap";
    c.sm_count = 132;
    c.op_overhead_s = kGpuOpOverhead;
    c.error_band = kGpuBand;
    c.band_from = kGpuBandFrom;
  } else if (name == "a100-sxm") {
    c.devices_per_node = 8;
    c.memory_bytes = static_cast<int64_t>(79.2 * kGiB);
    c.peak_flops = 312e12;
    c.compute_efficiency = 0.60;
    c.intra_bandwidth = 230e9;  // NVLink 3
    c.inter_bandwidth = 22e9;   // 8 x 200 Gb/s HDR InfiniBand
    c.latency_s = 10e-6;
    c.memory_bandwidth = 2.039e12;  // HBM2e
    c.source = "8 x A100 SXM per node, NVLink 3, 8 x 200 Gb/s InfiniBand";
    c.memory_from = "80 GB HBM2e as the driver reports it";
    c.efficiency_from = "assumed";
    c.sm_count = 108;
    c.op_overhead_s = kGpuOpOverhead;
    c.error_band = kGpuBand;
    c.band_from = kGpuBandFrom;
  } else if (name == "cpu") {
    // This development machine (2 cores, Gloo over loopback, fp32), fitted by
    // bench/plan_calibration.py to runs of fsdpp-train measured here (docs/planner.md).
    c.devices_per_node = 8;
    c.cores_per_node = 2;
    c.memory_bytes = static_cast<int64_t>(20 * kGiB);  // the node's, shared by its ranks
    // Fitted on 2026-11-26 to the fastest of three runs of each of the ten layouts on a quiet
    // machine: every layout within +-12% (docs/planner.md#measured-here).
    c.peak_flops = 47.5e9;  // one core, fp32, as fsdpp-train's matmuls reach it: efficiency 1
    c.compute_efficiency = 1.0;
    c.intra_bandwidth = 0.5e9;  // Gloo over loopback, with its copies, on the ranks' own cores
    c.inter_bandwidth = 0.5e9;
    c.latency_s = 120e-6;
    c.overlap = false;
    c.device_is_gpu = false;
    c.source = "this machine: 2 cores shared by the ranks, Gloo over loopback, fp32";
    c.memory_from = "the node's, shared by its ranks";
    c.efficiency_from = "folded into the fitted peak";
    c.op_overhead_s = kCpuOpOverhead;
    // A MoE's per-expert copies (fresh tensors of every row, expert_kernels.h): fitted on the
    // 8-expert row of bench/plan_moe_cpu.py (docs/planner.md#moe-steps-measured-here).
    c.copy_bandwidth = 2.5e9;
    c.error_band = 0.12;
    c.band_from = "calibrated: the ten layouts of bench/plan_calibration.py within 12% of their fastest runs";
  } else {
    FSDPP_THROW(ConfigError, "[estimate] cluster '{}' is not a preset; expected one of {} (or give its numbers)",
                name, fmt::join(cluster_preset_names(), ", "));
  }
  return c;
}

}  // namespace fsdpp
