#pragma once
// The machines a step is planned for (fsdpp-plan, fsdpp-estimate --budget; docs/planner.md#clusters):
// a device's peak and memory, its links, and how far the planner's predictions for it are trusted.

#include <string>
#include <vector>

namespace fsdpp {

struct Cluster {
  std::string name;
  int devices_per_node = 8;
  int64_t memory_bytes = 0;         // per device
  double peak_flops = 0;            // dense, in the compute dtype, per device
  double compute_efficiency = 0.5;  // achieved fraction of peak on the model's matmuls
  double intra_bandwidth = 0;       // bytes/s per device, collectives inside a node (bus bandwidth)
  double inter_bandwidth = 0;       // bytes/s per device, collectives across nodes
  double latency_s = 0;             // per step of a ring
  // Bytes/s of the device's own memory (HBM) for the work outside the matmuls; 0: that work is
  // folded into peak_flops x compute_efficiency (the cpu preset, fitted to whole steps).
  double memory_bandwidth = 0;
  bool overlap = true;              // FSDP's collectives run beside compute (GPU streams)
  // CPU clusters: cores per node; ranks beyond it share them (compute and collectives slow down
  // by ranks / cores). 0: each device computes on its own.
  int cores_per_node = 0;
  bool device_is_gpu = true;
  // Small kernels (a MoE layer's per-expert GEMMs and copies, expert_kernels.h): the
  // multiprocessors a GEMM's 128 x 128 output tiles are spread over in waves (0: no waves, a
  // CPU), and the host time to issue one eager LibTorch op, which no kernel beats.
  int sm_count = 0;
  double op_overhead_s = 0;
  // Bytes/s of the experts' copies into new memory (a CPU's page faults included); 0: the memory
  // bandwidth.
  double copy_bandwidth = 0;
  // How far a predicted step is from a measured or published one for this cluster (a relative
  // error, 0.18: +-18%), and what says so: every row shows it, and layouts within it of the
  // fastest are ties (plan_answer.h).
  double error_band = 0.2;
  std::string source;               // the hardware the preset describes
  // Where memory_bytes, compute_efficiency and error_band come from ("assumed", "--memory-gb"):
  // fsdpp-plan's header states the values it ranks with and their origin.
  std::string memory_from, efficiency_from, band_from;
};

// Presets (docs/planner.md#clusters): "h100-sxm" (8 x H100 SXM 80 GB, NVLink 4, 8 x 400 Gb/s
// InfiniBand), "h100-sxm-500w" (torchtitan's, power-capped), "a100-sxm" (8 x A100 80 GB, 8 x 200
// Gb/s), "cpu" (this development machine, calibrated by bench/plan_calibration.py). ConfigError
// lists the names for another.
Cluster cluster_preset(const std::string& name);
std::vector<std::string> cluster_preset_names();

}  // namespace fsdpp
