// A MoE layer's experts timed as fsdpp's kernels run them (expert_kernels.h).
#include "fsdpp/estimate/expert_kernels.h"

#include <algorithm>
#include <cmath>

namespace fsdpp {
namespace {

constexpr double kTile = 128;  // a GEMM's output tile, rows and columns

// The ops of one sparse layer's experts, added up as the host issues them.
struct Issued {
  const Cluster& c;
  ExpertKernels k;
  void op(double seconds, double& into) {
    into += seconds;
    k.overhead_s += std::max(0.0, c.op_overhead_s - seconds);
    ++k.ops;
  }
  void gemm(double m, double n, double kk, double bytes) { op(gemm_seconds(m, n, kk, bytes, c), k.gemm_s); }
  // An elementwise op or copy moving `elements` elements of `bytes` each.
  void copy(double elements, double bytes) {
    const double bandwidth = c.copy_bandwidth > 0 ? c.copy_bandwidth : c.memory_bandwidth;
    op(bandwidth > 0 ? elements * bytes / bandwidth : 0.0, k.copy_s);
  }
};

}  // namespace

double gemm_seconds(double m, double n, double k, double bytes, const Cluster& c) {
  const double rate = c.peak_flops * c.compute_efficiency;
  if (c.sm_count <= 0) return 2 * m * n * k / rate;
  const double tiles = std::ceil(m / kTile) * std::ceil(n / kTile);
  const double waves = std::ceil(tiles / c.sm_count);
  const double wave_s = 2 * kTile * kTile * k / (rate / c.sm_count);
  const double memory_s = c.memory_bandwidth > 0 ? (m * k + k * n + m * n) * bytes / c.memory_bandwidth : 0.0;
  return std::max(waves * wave_s, memory_s);
}

ExpertKernels expert_kernels(const DecoderShape& s, const EstimateOptions& o, const Cluster& c) {
  if (!s.moe || s.moe->num_sparse() == 0) return {};
  const auto& moe = *s.moe;
  const int tp = std::max(1, o.tensor_parallel), ep = std::max(1, o.expert_parallel);
  const int pp = std::max(1, o.pipeline.degree);
  const bool split = o.split_experts.value_or(ep == 1);
  const double b = double(dtype_bytes(o.param_dtype));
  const double D = double(s.dim);
  const double microbatches = pp > 1 ? std::max(1, o.pipeline.microbatches) : 1;
  const double tokens = double(o.batch) * double(o.seq_len) / microbatches;
  // The rows whose top-k copies this rank's experts compute (whole experts under tp: each tp rank
  // its own chunk), the pairs they make (balanced: expert parallelism sends as many as it
  // receives), and the experts that get rows.
  const double rows = tp > 1 && !split ? tokens / tp : tokens;
  const double I = split ? std::ceil(double(moe.moe_intermediate) / tp) : double(moe.moe_intermediate);
  const double pairs = rows * double(moe.top_k);
  const double local = double(moe.num_experts) / ep;
  const double active = std::min(local, std::max(1.0, pairs));
  const double n = pairs / active;
  // The tensor whose gradient each expert's gather (or slice) rebuilds whole: the layer's input,
  // or under expert parallelism the rows received.
  const double whole = (ep == 1 ? rows : pairs) * D;

  Issued layer{c, {}};
  const auto forward = [&] {
    for (double e = 0; e < active; ++e) {
      if (ep == 1) layer.copy(2 * n * D, b);  // index_select
      layer.gemm(n, I, D, b);                 // gate
      layer.gemm(n, I, D, b);                 // up
      layer.copy(2 * n * I, b);               // silu
      layer.copy(3 * n * I, b);               // silu(gate) x up
      layer.gemm(n, D, I, b);                 // down
      if (ep == 1) {
        layer.copy(2 * n * D + n, b);         // x routing weight
        layer.copy(2 * whole + n * D, b);     // out.index_add(...): a new output each time
      }
    }
    if (ep > 1) layer.copy(2 * pairs * D, b);  // the experts' outputs joined (cat)
  };
  forward();
  if (o.activation_checkpointing) forward();
  for (double e = 0; e < active; ++e) {
    for (int w = 0; w < 2; ++w) {   // gate and up: the input's gradient, the weight's
      layer.gemm(n, D, I, b);
      layer.gemm(I, D, n, b);
    }
    layer.gemm(n, I, D, b);          // down
    layer.gemm(D, I, n, b);
    for (int g = 0; g < 3; ++g) layer.copy(3 * n * I, b);  // the product's and SiLU's gradients
    if (ep == 1) {
      layer.copy(3 * n * D, b);      // the routing weight's product
      layer.copy(2 * n * D, b);      // and its gradient (a sum over D)
      layer.copy(2 * n * D, b);      // index_add's source gradient (index_select)
    }
    layer.copy(whole, b);            // the gather's or slice's gradient: zeros of every row
    layer.copy(2 * n * D, b);        // its rows written in
    layer.copy(3 * whole, b);        // added into the input's gradient
  }
  const double sparse_here = std::ceil(double(moe.num_sparse()) / pp);
  const double times = sparse_here * microbatches;
  ExpertKernels out = layer.k;
  out.gemm_s *= times;
  out.copy_s *= times;
  out.overhead_s *= times;
  out.ops = static_cast<int64_t>(double(out.ops) * times);
  // The FLOPs flops.h counts for them (6 x the top-k experts' 3 D x I per token and sparse layer).
  out.flops = 18.0 * D * double(moe.moe_intermediate) * double(moe.top_k) * double(moe.num_sparse()) *
              double(o.batch) * double(o.seq_len);
  return out;
}

}  // namespace fsdpp
