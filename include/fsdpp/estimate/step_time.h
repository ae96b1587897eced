#pragma once
// How long a training step takes, before running it, and which layout is fastest on a cluster
// (fsdpp-plan, docs/planner.md). The memory of each layout is the estimator's (memory_estimate.h);
// the time is modelled here:
//   compute      model FLOPs of a rank's share (training_flops_per_token, flops.h, x 4/3 for the forward
//                recomputed under activation checkpointing) / (peak x compute_efficiency);
//   memory       the bytes moved outside the matmuls (memory_traffic.h: elementwise ops, the
//                loss, FSDP's copies and casts, the optimizer) / the device's memory bandwidth,
//                on the compute's stream (a cluster without memory_bandwidth folds it into its
//                compute rate);
//   FSDP         all-gathers and reduce-scatters (all-reduces for NO_SHARD, the replicate
//                all-reduce of HYBRID) of the rank's parameter slice, ring cost (bytes x (n-1)/n /
//                bandwidth + (n-1) x latency per unit), over the node's links when the group fits
//                in a node, the network's otherwise; overlapped with compute when the cluster
//                overlaps (GPU streams), less one unit's gather and one unit's reduction;
//   TP           four all-reduces of the activations per layer and microbatch, not overlapped;
//   PP           the bubble of the verified schedule (pipeline::simulate) and the p2p sends;
//   EP           four all-to-alls of the routed tokens per sparse layer.
// What it leaves out is listed in docs/planner.md#what-the-model-leaves-out.

#include <string>
#include <vector>

#include "fsdpp/estimate/flops.h"
#include "fsdpp/estimate/memory_estimate.h"

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
  std::string source;               // the hardware the preset describes
  // Where memory_bytes and compute_efficiency come from ("assumed", "--memory-gb"): fsdpp-plan's
  // header states the values it ranks with and their origin.
  std::string memory_from, efficiency_from;
};

// Presets (docs/planner.md#clusters): "h100-sxm" (8 x H100 SXM 80 GB, NVLink 4, 8 x 400 Gb/s
// InfiniBand), "h100-sxm-500w" (torchtitan's, power-capped), "a100-sxm" (8 x A100 80 GB, 8 x 200
// Gb/s), "cpu" (this development machine, calibrated by bench/plan_calibration.py). ConfigError
// lists the names for another.
Cluster cluster_preset(const std::string& name);
std::vector<std::string> cluster_preset_names();

struct StepTime {
  double compute_s = 0;
  double memory_bound_s = 0;  // the non-matmul work at the memory bandwidth (memory_traffic.h)
  double fsdp_comm_s = 0;     // all of it
  double fsdp_exposed_s = 0;  // what compute does not hide
  double tp_comm_s = 0;
  double pp_bubble_s = 0;
  double pp_p2p_s = 0;
  double ep_comm_s = 0;
  double total_s = 0;
  double tokens_per_s_per_device = 0;
  double mfu = 0;  // model FLOPs per second per device / peak
  std::vector<std::string> notes;
};

// The step of `options` (world size, strategy, tp, pp, ep, checkpointing, batch per data-parallel
// rank, seq_len, dtypes: everything estimate_memory reads) on `cluster`. ConfigError for options
// the estimator refuses.
StepTime predict_step_time(const ModelDescription& model, const EstimateOptions& options,
                           const Cluster& cluster);

struct PlanEntry {
  std::string layout;  // "FSDP 32 x TP 8", "HSDP 4x8 + checkpointing", "PP 4 (1F1B, 16 mb) x FSDP 2"
  EstimateOptions options;
  MemoryEstimate memory;
  StepTime time;
  std::string rejected;  // non-empty: why this layout cannot run
};

struct Plan {
  std::vector<PlanEntry> fitting;   // fastest first
  std::vector<PlanEntry> rejected;  // with the reason each fails
};

// Every layout of `world_size` devices for a global batch of `global_batch` sequences of
// `base.seq_len` tokens: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD and HYBRID_SHARD (a node per shard
// group), each with tp 1/2/4/8 (within a node), pp 1/2/4/8 (each of `schedules`, a microbatch
// per sequence), ep (MoE: powers of 2 up to the experts) and activation checkpointing on and off;
// base gives the dtypes, optimizer and prefetch. `check_memory` false: every layout that splits is
// timed, without the memory estimate (for layouts the estimator does not model, such as PP with
// TP: fsdpp-plan --time-only); their memory is left 0.
Plan plan_layouts(const ModelDescription& model, const EstimateOptions& base, const Cluster& cluster,
                  int world_size, int64_t global_batch,
                  const std::vector<std::string>& schedules = {"1F1B"}, bool check_memory = true);

}  // namespace fsdpp
