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
//   EP           four all-to-alls of the routed tokens per sparse layer;
//   experts      a MoE layer's experts as fsdpp runs them, one expert after another: small GEMMs
//                in waves over the SMs, their copies, each op at least an eager op's overhead
//                (expert_kernels.h), in place of their FLOPs at the dense rate.
// What it leaves out is listed in docs/planner.md#what-the-model-leaves-out.

#include <string>
#include <vector>

#include "fsdpp/estimate/cluster.h"
#include "fsdpp/estimate/flops.h"
#include "fsdpp/estimate/memory_estimate.h"

namespace fsdpp {

struct StepTime {
  double compute_s = 0;       // the matmuls and attention, the experts' kernels included
  double experts_s = 0;       // of which the experts' kernels (expert_kernels.h)
  int64_t expert_ops = 0;     // the ops they issue
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
