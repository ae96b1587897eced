// parallel_dims: the parallelism: section resolved on a world. See
// include/fsdpp/train/parallel_dims.h.
#include "fsdpp/train/parallel_dims.h"

#include <fmt/format.h>

#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/train/config.h"

namespace fsdpp::train {

void validate_parallelism(const TrainConfig& cfg) {
  const auto& p = cfg.parallelism;
  const auto& t = cfg.training;
  FSDPP_CHECK_AS(ConfigError, p.data_parallel_replicate_degree >= 1,
                 "[config] parallelism.data_parallel_replicate_degree={}: expected >= 1",
                 p.data_parallel_replicate_degree);
  FSDPP_CHECK_AS(ConfigError, p.data_parallel_shard_degree == -1 || p.data_parallel_shard_degree >= 1,
                 "[config] parallelism.data_parallel_shard_degree={}: expected -1 (the ranks the "
                 "other degrees leave) or >= 1",
                 p.data_parallel_shard_degree);
  FSDPP_CHECK_AS(ConfigError, p.tensor_parallel_degree >= 1,
                 "[config] parallelism.tensor_parallel_degree={}: expected >= 1",
                 p.tensor_parallel_degree);
  FSDPP_CHECK_AS(ConfigError, !p.enable_sequence_parallel || p.tensor_parallel_degree > 1,
                 "[config] parallelism.enable_sequence_parallel=true needs "
                 "parallelism.tensor_parallel_degree > 1 (it splits what tensor parallelism "
                 "leaves whole); got tensor_parallel_degree={}",
                 p.tensor_parallel_degree);
  FSDPP_CHECK_AS(ConfigError, p.expert_parallel_degree >= 1,
                 "[config] parallelism.expert_parallel_degree={}: expected >= 1",
                 p.expert_parallel_degree);
  if (p.expert_parallel_degree > 1) {
    FSDPP_CHECK_AS(ConfigError, cfg.model.architecture == ModelArchitecture::QWEN3_MOE,
                   "[config] parallelism.expert_parallel_degree={} needs experts: "
                   "model.architecture=qwen3_moe (got {})",
                   p.expert_parallel_degree, cfg.model.architecture.name());
    FSDPP_CHECK_AS(ConfigError, !traits_of(t.fsdp).hybrid && !t.fp16 &&
                                    t.fsdp_config.offload_optimizer_state_dir.empty() &&
                                    !t.fsdp_config.offload_params,
                   "[config] parallelism.expert_parallel_degree={} with training.fsdp={}{}: "
                   "expert parallelism runs with full_shard, shard_grad_op, zero1 or no_shard, in "
                   "fp32 or bf16, without offload",
                   p.expert_parallel_degree, to_string(t.fsdp),
                   t.fp16 ? ", fp16" : (t.fsdp_config.offload_params ||
                                        !t.fsdp_config.offload_optimizer_state_dir.empty()
                                            ? ", offload"
                                            : ""));
  }
  if (p.tensor_parallel_degree == 1) return;
  // Each of these keeps state per rank that would have to agree across the tp group (the
  // scaler's inf check, the offloaded optimizer's files): not built for TP yet.
  FSDPP_CHECK_AS(ConfigError, !t.fp16,
                 "[config] training.fp16=true with parallelism.tensor_parallel_degree={}: the "
                 "gradient scaler does not check the tp group yet; use training.bf16",
                 p.tensor_parallel_degree);
  FSDPP_CHECK_AS(ConfigError, t.fsdp_config.offload_optimizer_state_dir.empty() && !t.fsdp_config.offload_params,
                 "[config] training.fsdp_config offload (offload_params / "
                 "offload_optimizer_state_dir) with parallelism.tensor_parallel_degree={} is not "
                 "supported; drop the offload or the tensor parallelism",
                 p.tensor_parallel_degree);
}

ParallelDims parallel_dims(const TrainConfig& cfg, int world_size) {
  const auto& p = cfg.parallelism;
  const auto traits = traits_of(cfg.training.fsdp);
  ParallelDims d;
  d.tp = static_cast<int>(p.tensor_parallel_degree);
  d.dp_replicate = static_cast<int>(p.data_parallel_replicate_degree);
  d.sequence_parallel = p.enable_sequence_parallel;
  d.ep = static_cast<int>(p.expert_parallel_degree);
  FSDPP_CHECK_AS(ConfigError, world_size % d.ep == 0,
                 "[config] parallelism.expert_parallel_degree={} does not divide the world size {}",
                 d.ep, world_size);
  const int64_t others = p.tensor_parallel_degree * p.data_parallel_replicate_degree;
  const std::string degrees = fmt::format(
      "parallelism.data_parallel_replicate_degree={} x data_parallel_shard_degree={} x "
      "tensor_parallel_degree={}",
      p.data_parallel_replicate_degree, p.data_parallel_shard_degree, p.tensor_parallel_degree);
  if (p.data_parallel_shard_degree == -1) {
    FSDPP_CHECK_AS(ConfigError, world_size % others == 0,
                   "[config] {} cannot fill {} ranks: the replicate and tensor degrees ({}) must "
                   "divide the world size",
                   degrees, world_size, others);
    d.dp_shard = static_cast<int>(world_size / others);
  } else {
    FSDPP_CHECK_AS(ConfigError, others * p.data_parallel_shard_degree == world_size,
                   "[config] {} is {} ranks but the world has {}; expected their product to be "
                   "the world size (data_parallel_shard_degree: -1 takes the ranks left over)",
                   degrees, others * p.data_parallel_shard_degree, world_size);
    d.dp_shard = static_cast<int>(p.data_parallel_shard_degree);
  }
  if (d.dp_replicate > 1) {
    FSDPP_CHECK_AS(ConfigError, traits.hybrid,
                   "[config] parallelism.data_parallel_replicate_degree={} needs training.fsdp "
                   "hybrid_shard or hybrid_shard_zero2 (replicas of shard groups); got {}",
                   d.dp_replicate, to_string(cfg.training.fsdp));
    const int64_t group = cfg.training.fsdp_config.hybrid_shard_group_size;
    FSDPP_CHECK_AS(ConfigError, group == 0 || group == d.dp_shard,
                   "[config] training.fsdp_config.fsdp_hybrid_shard_group_size={} disagrees with "
                   "parallelism.data_parallel_shard_degree={}; set one of them",
                   group, d.dp_shard);
  } else if (traits.hybrid && d.tp > 1) {
    FSDPP_CHECK_AS(ConfigError, false,
                   "[config] training.fsdp={} with parallelism.tensor_parallel_degree={} needs "
                   "parallelism.data_parallel_replicate_degree > 1 (the replicas); or use "
                   "full_shard",
                   to_string(cfg.training.fsdp), d.tp);
  }
  return d;
}

std::shared_ptr<dist::DeviceMesh> ParallelDims::build_mesh(dist::World& world) const {
  FSDPP_CHECK(world.size() == world_size(), "[train] a mesh of {} ranks on a world of {}",
              world_size(), world.size());
  if (dp_replicate > 1) {
    return world.init_device_mesh({dp_replicate, dp_shard, tp}, {"replicate", "shard", "tp"});
  }
  return world.init_device_mesh({dp_shard, tp}, {"shard", "tp"});
}

std::shared_ptr<dist::DeviceMesh> ParallelDims::build_expert_mesh(dist::World& world) const {
  return world.init_device_mesh({world.size() / ep, ep}, {"efsdp", "ep"});
}

std::string ParallelDims::describe() const {
  std::string s;
  if (dp_replicate > 1) s += fmt::format("dp_replicate {} x ", dp_replicate);
  s += fmt::format("dp_shard {} x tp {}", dp_shard, tp);
  if (sequence_parallel) s += " (sequence parallel)";
  return s;
}

}  // namespace fsdpp::train
