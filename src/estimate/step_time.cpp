// The step-time model and the layout planner (step_time.h). Memory is the estimator's.
#include "fsdpp/estimate/step_time.h"

#include <algorithm>
#include <cmath>

#include <fmt/ranges.h>

#include "fsdpp/common/error.h"
#include "fsdpp/estimate/expert_kernels.h"
#include "fsdpp/estimate/memory_traffic.h"
#include "fsdpp/parallel/shard_group.h"
#include "fsdpp/pipeline/schedules.h"
#include "fsdpp/pipeline/simulate.h"

namespace fsdpp {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

// Ring collectives: an all-gather or reduce-scatter moves (n-1)/n of the full buffer through each
// rank's link in n-1 steps; an all-reduce is both.
double ring_time(double bytes, int n, double bandwidth, double latency) {
  if (n <= 1 || bytes <= 0) return 0;
  return bytes * (n - 1) / n / bandwidth + (n - 1) * latency;
}

bool spans_nodes(int group, int stride, int devices_per_node) {
  return static_cast<int64_t>(group) * stride > devices_per_node;
}

// HSDP's default shard group on this cluster's nodes unless the options know theirs.
EstimateOptions on_cluster(EstimateOptions o, const Cluster& c) {
  if (o.ranks_per_node <= 0) o.ranks_per_node = c.devices_per_node;
  return o;
}

int data_parallel(const EstimateOptions& o) {
  return o.world_size / (o.tensor_parallel * std::max(1, o.pipeline.degree));
}

std::string layout_name(const EstimateOptions& o, const Cluster& c) {
  const int dp = data_parallel(o);
  std::string dp_part;
  switch (o.strategy) {
    case ShardingStrategy::FULL_SHARD: dp_part = fmt::format("FSDP {}", dp); break;
    case ShardingStrategy::SHARD_GRAD_OP: dp_part = fmt::format("ZeRO-2 {}", dp); break;
    case ShardingStrategy::NO_SHARD: dp_part = fmt::format("DDP {}", dp); break;
    case ShardingStrategy::HYBRID_SHARD:
    case ShardingStrategy::HYBRID_SHARD_ZERO2: {
      const int f = estimate_shard_group(on_cluster(o, c));
      dp_part = fmt::format("HSDP {}x{}", dp / f, f);
      break;
    }
    default: dp_part = fmt::format("{} {}", to_string(o.strategy), dp);
  }
  std::string out;
  if (o.pipeline.degree > 1) {
    out += fmt::format("PP {} ({}, {} mb) x ", o.pipeline.degree, o.pipeline.schedule, o.pipeline.microbatches);
  }
  out += dp_part;
  if (o.tensor_parallel > 1) out += fmt::format(" x TP {}", o.tensor_parallel);
  if (o.expert_parallel > 1) out += fmt::format(", EP {}", o.expert_parallel);
  if (o.activation_checkpointing) out += " + checkpointing";
  return out;
}

}  // namespace

StepTime predict_step_time(const ModelDescription& model, const EstimateOptions& o, const Cluster& c) {
  StepTime t;
  const DecoderShape& shape = *model.shape;
  const int pp = std::max(1, o.pipeline.degree);
  const int tp = o.tensor_parallel;
  const int dp = data_parallel(o);
  FSDPP_CHECK_AS(ConfigError, dp >= 1 && dp * tp * pp == o.world_size,
                 "[estimate] world size {} does not split into tp {} x pp {} x data parallel", o.world_size, tp, pp);
  const double tokens = double(o.batch) * double(o.seq_len);  // per data-parallel rank and step
  const double flops_per_token = training_flops_per_token(model, o.seq_len);
  const int ranks_here = std::min(o.world_size, c.devices_per_node);
  // CPU ranks beyond the cores share them: everything they do slows down alike.
  const double crowding = c.cores_per_node > 0 ? std::max(1.0, double(ranks_here) / c.cores_per_node) : 1.0;
  const double rate = c.peak_flops * c.compute_efficiency;

  // Compute: this rank's share of the model's FLOPs (a tp slice of each matmul, a pp stage) at
  // the matmuls' rate; a MoE's experts as their kernels run (expert_kernels.h).
  const double recompute = o.activation_checkpointing ? 8.0 / 6.0 : 1.0;
  const ExpertKernels experts = expert_kernels(shape, o, c);
  t.experts_s = experts.total_s() * crowding;
  t.expert_ops = experts.ops;
  t.compute_s = (flops_per_token * tokens - experts.flops) * recompute / (tp * pp) / rate * crowding + t.experts_s;

  // FSDP over the data-parallel ranks: the rank's parameter slice.
  const double params = double(tensor_parallel_slice(model, tp).num_params()) / pp;
  const double param_bytes = params * dtype_bytes(o.param_dtype);
  const double grad_bytes = params * dtype_bytes(o.reduce_dtype);
  const int units = std::max<int>(1, static_cast<int>(model.units.size()) / pp);
  const bool hybrid = o.strategy == ShardingStrategy::HYBRID_SHARD || o.strategy == ShardingStrategy::HYBRID_SHARD_ZERO2;
  const int f = hybrid ? estimate_shard_group(on_cluster(o, c)) : dp;
  const double bw_f = spans_nodes(f, tp, c.devices_per_node) ? c.inter_bandwidth : c.intra_bandwidth;
  const auto ring = [&](double bytes, int n, double bw) { return ring_time(bytes, n, bw, c.latency_s * units); };
  switch (o.strategy) {
    case ShardingStrategy::FULL_SHARD:
    case ShardingStrategy::HYBRID_SHARD:
      t.fsdp_comm_s = 2 * ring(param_bytes, f, bw_f) + ring(grad_bytes, f, bw_f);
      break;
    case ShardingStrategy::SHARD_GRAD_OP:
    case ShardingStrategy::HYBRID_SHARD_ZERO2:
      t.fsdp_comm_s = ring(param_bytes, f, bw_f) + ring(grad_bytes, f, bw_f);
      break;
    default:  // NO_SHARD, ZERO1: an all-reduce of the gradients
      t.fsdp_comm_s = 2 * ring(grad_bytes, f, bw_f);
  }
  if (c.memory_bandwidth > 0) {
    t.memory_bound_s = step_memory_traffic(model, o, f).total() / c.memory_bandwidth * crowding;
  }
  if (hybrid && dp / f > 1) t.fsdp_comm_s += 2 * ring(grad_bytes / f, dp / f, c.inter_bandwidth);
  t.fsdp_comm_s *= crowding;
  // Overlapped with compute (prefetched gathers, reductions behind the next unit's backward),
  // except the first unit's gather and the last unit's reduction.
  t.fsdp_exposed_s = c.overlap ? std::max(0.0, t.fsdp_comm_s - t.compute_s - t.memory_bound_s) + t.fsdp_comm_s / units
                               : t.fsdp_comm_s;

  // TP: two all-reduces of the activations forward and two backward per layer (one more pair
  // when the forward is recomputed), on the critical path.
  if (tp > 1) {
    const double act = tokens * double(shape.dim) * dtype_bytes(o.param_dtype);
    const double per_layer = (o.activation_checkpointing ? 6 : 4) * 2 * ring_time(act, tp, c.intra_bandwidth, c.latency_s);
    t.tp_comm_s = per_layer * double(shape.n_layers) / pp * crowding;
  }

  // EP: tokens to their experts and back, forward and backward, per sparse layer.
  if (shape.moe && o.expert_parallel > 1) {
    const double routed = tokens * double(shape.moe->top_k) * double(shape.dim) * dtype_bytes(o.param_dtype);
    const double bw = spans_nodes(o.expert_parallel, tp, c.devices_per_node) ? c.inter_bandwidth : c.intra_bandwidth;
    t.ep_comm_s = 4 * ring_time(routed, o.expert_parallel, bw, c.latency_s) * double(shape.moe->num_sparse()) / pp * crowding;
  }

  // PP: the schedule's bubble (played out by the verified schedule), and the activations sent.
  if (pp > 1) {
    const auto sim = pipeline::simulate(pipeline::make_schedule(o.pipeline.schedule, pp, o.pipeline.microbatches));
    const double stage = t.compute_s + t.memory_bound_s + t.tp_comm_s + t.ep_comm_s;
    t.pp_bubble_s = stage * sim.bubble_fraction / (1 - sim.bubble_fraction);
    const double act = tokens / o.pipeline.microbatches * double(shape.dim) * dtype_bytes(o.param_dtype);
    const double bw = spans_nodes(pp, dp * tp, c.devices_per_node) ? c.inter_bandwidth : c.intra_bandwidth;
    t.pp_p2p_s = 2.0 * o.pipeline.microbatches * (act / bw + c.latency_s) * crowding;
    t.notes.push_back(fmt::format("{} on {} stages, {} microbatches: bubble {:.1f}% of the makespan",
                                  o.pipeline.schedule, pp, o.pipeline.microbatches, 100 * sim.bubble_fraction));
  }

  t.total_s = t.compute_s + t.memory_bound_s + t.fsdp_exposed_s + t.tp_comm_s + t.ep_comm_s + t.pp_bubble_s + t.pp_p2p_s;
  t.tokens_per_s_per_device = tokens * dp / t.total_s / o.world_size;
  t.mfu = flops_per_token * t.tokens_per_s_per_device / c.peak_flops;
  return t;
}

Plan plan_layouts(const ModelDescription& model, const EstimateOptions& base, const Cluster& c, int world_size,
                  int64_t global_batch, const std::vector<std::string>& schedules, bool check_memory) {
  FSDPP_CHECK_AS(ConfigError, world_size >= 1 && global_batch >= 1,
                 "[estimate] the plan needs a world size and a global batch of at least 1, got {} and {}", world_size,
                 global_batch);
  const DecoderShape& shape = *model.shape;
  const int per_node = std::min(world_size, c.devices_per_node);
  // A CPU node's memory is shared by its ranks; a GPU's is its own.
  const int64_t budget = c.device_is_gpu ? c.memory_bytes : c.memory_bytes / per_node;
  Plan plan;
  const auto reject = [&](EstimateOptions o, std::string why) {
    plan.rejected.push_back({layout_name(o, c), std::move(o), {}, {}, std::move(why)});
  };
  std::vector<int> eps = {1};
  if (shape.moe) {
    for (int e = 2; e <= world_size && e <= shape.moe->num_experts; e *= 2) eps.push_back(e);
  }
  for (int tp : {1, 2, 4, 8}) {
    for (int pp : {1, 2, 4, 8}) {
      if (world_size % (tp * pp) != 0 || tp > per_node) continue;
      const int dp = world_size / (tp * pp);
      for (ShardingStrategy s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::HYBRID_SHARD,
                                 ShardingStrategy::SHARD_GRAD_OP, ShardingStrategy::NO_SHARD}) {
        const bool hybrid = s == ShardingStrategy::HYBRID_SHARD;
        const int group = parallel::default_shard_group(dp, c.devices_per_node, tp);  // a node's dp ranks
        if (hybrid && (dp == group || dp % group != 0)) continue;  // HSDP: more than one node of shards
        if (dp == 1 && s != ShardingStrategy::FULL_SHARD) continue;  // one rank: the strategies are one
        for (int ep : eps) {
          if (ep > 1 && (dp % ep != 0)) continue;
          for (const std::string& schedule : pp > 1 ? schedules : std::vector<std::string>{""}) {
          for (bool ckpt : {false, true}) {
            EstimateOptions o = base;
            o.world_size = world_size;
            o.strategy = s;
            o.tensor_parallel = tp;
            o.sequence_parallel = tp > 1;  // as torchtitan and Megatron pair them
            o.expert_parallel = ep;
            o.shard_group_size = hybrid ? group : 0;
            o.replicas = 0;  // the layout is the planner's: not the base config's replicate degree
            o.ranks_per_node = c.devices_per_node;
            o.activation_checkpointing = ckpt;
            o.device_is_gpu = c.device_is_gpu;
            o.pipeline = {};
            if (pp > 1) {
              o.pipeline.degree = pp;
              o.pipeline.schedule = schedule;
            }
            if (global_batch % dp != 0) {
              o.batch = std::max<int64_t>(1, global_batch / dp);
              o.pipeline.microbatches = std::max<int64_t>(1, o.batch);
              reject(o, fmt::format("the global batch of {} sequences does not split over {} data-parallel ranks",
                                    global_batch, dp));
              continue;
            }
            o.batch = global_batch / dp;
            if (pp > 1) {
              o.pipeline.microbatches = static_cast<int>(o.batch);
              if (o.batch < pp) {
                reject(o, fmt::format("{} sequences per data-parallel rank make {} microbatches, fewer than the {} "
                                      "stages: the pipeline would idle most of the step",
                                      o.batch, o.batch, pp));
                continue;
              }
            }
            PlanEntry e{layout_name(o, c), o, {}, {}, ""};
            try {
              if (check_memory) e.memory = estimate_memory(model, o);
              e.time = predict_step_time(model, o, c);
            } catch (const ConfigError& error) {
              e.rejected = error.what();
              plan.rejected.push_back(std::move(e));
              continue;
            }
            if (e.memory.total > budget) {
              e.rejected = fmt::format("needs {:.1f} GiB per device > {:.1f} GiB, peak at {} (parameters {:.1f}, "
                                       "gradients {:.1f}, optimizer {:.1f}, activations {:.1f}, gathered {:.1f})",
                                       e.memory.total / kGiB, budget / kGiB, e.memory.peak_at,
                                       e.memory.parameters / kGiB, e.memory.gradients / kGiB,
                                       e.memory.optimizer_state / kGiB, e.memory.activations / kGiB,
                                       e.memory.unsharded / kGiB);
              plan.rejected.push_back(std::move(e));
              continue;
            }
            plan.fitting.push_back(std::move(e));
          }
          }
        }
      }
    }
  }
  std::stable_sort(plan.fitting.begin(), plan.fitting.end(),
                   [](const PlanEntry& a, const PlanEntry& b) { return a.time.total_s < b.time.total_s; });
  return plan;
}

}  // namespace fsdpp
