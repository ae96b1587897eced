#pragma once
// The time of a Qwen3-MoE step's experts as fsdpp runs them (models/qwen3_moe.cpp), for the
// planner (step_time.h): not their FLOPs at the dense matmuls' rate but the kernels, one expert
// after another, each of its (rows, width) GEMMs cut into 128 x 128 output tiles that run in
// waves over the device's SMs, and the copies around them:
//   forward, per expert   gather its rows (index_select), gate and up GEMMs, SiLU, their product,
//                         the down GEMM, the routing weight, and an out-of-place index_add into
//                         the layer's output (a copy of all the microbatch's rows); under expert
//                         parallelism the rows arrive grouped (narrow, then one cat);
//   backward, per expert  the six GEMMs (each input's gradient and each weight's), the SiLU and
//                         product gradients, and autograd's gradient of the gather or slice: a
//                         zero tensor of all the rows, written, then added into the rows' gradient.
// An op takes at least the cluster's op_overhead_s (the host issues them one by one); a GEMM the
// larger of its waves and its bytes at the memory bandwidth; a copy its bytes (on a cluster
// without a memory bandwidth, the cpu preset, copies are folded into its fitted rate).
//
//   const auto k = fsdpp::expert_kernels(shape, options, fsdpp::cluster_preset("h100-sxm"));
//   k.total_s();   // of the rank's step: every microbatch, the sparse layers of its stage

#include "fsdpp/estimate/cluster.h"
#include "fsdpp/estimate/memory_estimate.h"

namespace fsdpp {

struct ExpertKernels {
  double gemm_s = 0;      // the GEMMs, in waves (or at the rate on a CPU)
  double copy_s = 0;      // gathers, elementwise ops and the per-expert full-size copies
  double overhead_s = 0;  // what ops shorter than op_overhead_s add up to beyond their own time
  double flops = 0;       // the experts' GEMM FLOPs (the 6 x active expert parameters of flops.h)
  int64_t ops = 0;        // ops issued
  double total_s() const { return gemm_s + copy_s + overhead_s; }
};

// The rank's share of the step of `options` (batch x seq_len tokens per data-parallel rank, its
// pipeline microbatches, the sparse layers of its stage, tp and ep slices, recomputation under
// activation checkpointing). Zero for a dense model.
ExpertKernels expert_kernels(const DecoderShape& shape, const EstimateOptions& options,
                             const Cluster& cluster);

// One GEMM of an (m x k) by (k x n) product on `cluster` in `dtype_bytes` elements: its 128 x 128
// output tiles in waves of sm_count, each at the SM's share of peak x efficiency; no less than its
// bytes at the memory bandwidth. Without SMs (a CPU): its FLOPs at peak x efficiency.
double gemm_seconds(double m, double n, double k, double dtype_bytes, const Cluster& cluster);

}  // namespace fsdpp
