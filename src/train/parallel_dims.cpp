// parallel_dims: the parallelism: section resolved on a world. See
// include/fsdpp/train/parallel_dims.h.
#include "fsdpp/train/parallel_dims.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/parallel/pipeline_cut.h"
#include "fsdpp/parallel/shard_group.h"
#include "fsdpp/pipeline/schedule_traits.h"
#include "fsdpp/train/config.h"

namespace fsdpp::train {

namespace {

// The pipeline's keys that need no world. What pipelining does not compose with is refused by
// name, with the reason (docs/parallelize.md#what-fsdpp-train-refuses).
void validate_pipeline(const TrainConfig& cfg) {
  const auto& p = cfg.parallelism;
  FSDPP_CHECK_AS(ConfigError, p.pipeline_parallel_degree >= 1,
                 "[config] parallelism.pipeline_parallel_degree={}: expected >= 1",
                 p.pipeline_parallel_degree);
  FSDPP_CHECK_AS(ConfigError, p.pipeline_parallel_microbatch_size >= 1,
                 "[config] parallelism.pipeline_parallel_microbatch_size={}: expected >= 1 "
                 "(sequences per microbatch)",
                 p.pipeline_parallel_microbatch_size);
  FSDPP_CHECK_AS(ConfigError, p.pipeline_parallel_layers_per_stage >= 0,
                 "[config] parallelism.pipeline_parallel_layers_per_stage={}: expected >= 1, or 0 "
                 "(the units split evenly over the stages)",
                 p.pipeline_parallel_layers_per_stage);
  // What fsdpp-train's model does not do under a pipeline (a tied table): validate_layout
  // (config.cpp); what distillation does not: validate_distillation.
}

}  // namespace

void validate_parallelism(const TrainConfig& cfg) {
  const auto& p = cfg.parallelism;
  // A degree is a number of ranks: one beyond any job is a typo, and is refused before it is
  // narrowed to an int anywhere (99999999999 was printed as 1215752191).
  for (const auto& [key, degree] :
       {std::pair<const char*, int64_t>{"pipeline_parallel_degree", p.pipeline_parallel_degree},
        {"data_parallel_replicate_degree", p.data_parallel_replicate_degree},
        {"data_parallel_shard_degree", p.data_parallel_shard_degree},
        {"tensor_parallel_degree", p.tensor_parallel_degree},
        {"expert_parallel_degree", p.expert_parallel_degree}}) {
    FSDPP_CHECK_AS(ConfigError, degree <= kMaxDegree,
                   "[config] parallelism.{}={}: expected a number of ranks, at most {}", key,
                   degree, kMaxDegree);
  }
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
  validate_pipeline(cfg);
}

ParallelDims parallel_dims(const TrainConfig& cfg, int world_size, int local_world_size) {
  const auto& p = cfg.parallelism;
  const auto traits = traits_of(cfg.training.fsdp);
  validate_parallelism(cfg);  // every degree <= kMaxDegree: the narrowing below is exact
  ParallelDims d;
  d.tp = static_cast<int>(p.tensor_parallel_degree);
  d.dp_replicate = static_cast<int>(p.data_parallel_replicate_degree);
  d.ep = static_cast<int>(p.expert_parallel_degree);
  FSDPP_CHECK_AS(ConfigError, world_size % d.ep == 0,
                 "[config] parallelism.expert_parallel_degree={} does not divide the world size {}",
                 d.ep, world_size);
  d.pp = static_cast<int>(p.pipeline_parallel_degree);
  const int64_t others =
      p.tensor_parallel_degree * p.data_parallel_replicate_degree * p.pipeline_parallel_degree;
  const std::string degrees = fmt::format(
      "parallelism.{}data_parallel_replicate_degree={} x data_parallel_shard_degree={} x "
      "tensor_parallel_degree={}",
      d.pp > 1 ? fmt::format("pipeline_parallel_degree={} x ", d.pp) : "",
      p.data_parallel_replicate_degree, p.data_parallel_shard_degree, p.tensor_parallel_degree);
  if (p.data_parallel_shard_degree == -1) {
    FSDPP_CHECK_AS(ConfigError, world_size % others == 0,
                   "[config] {} cannot fill {} ranks: the {} degrees ({}) must divide the world "
                   "size",
                   degrees, world_size, d.pp > 1 ? "pipeline, replicate and tensor" : "replicate and tensor",
                   others);
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
  if (traits.hybrid && d.dp_replicate == 1 &&
      (local_world_size > 0 || cfg.training.fsdp_config.hybrid_shard_group_size > 0)) {
    // Shard inside a node (fast links), replicate across nodes: fsdpp-run lays ranks out node
    // by node, so groups of LOCAL_WORLD_SIZE consecutive dp ranks are the nodes.
    // Under a pipeline (pp outermost) a node holds fewer of a stage's dp ranks than its own:
    // at most dp_shard of them (parallel::default_shard_group, the estimate's and the planner's).
    const bool given = cfg.training.fsdp_config.hybrid_shard_group_size > 0;
    const int shard = given ? cfg.hybrid_shard_group_size(local_world_size)
                            : parallel::default_shard_group(d.dp_shard, local_world_size, d.tp);
    FSDPP_CHECK_AS(ConfigError, shard <= d.dp_shard && d.dp_shard % shard == 0,
                   "[config] training.fsdp={} shards over groups of {} ranks ({}), which must "
                   "divide the world size {}{}",
                   to_string(cfg.training.fsdp), shard,
                   cfg.training.fsdp_config.hybrid_shard_group_size > 0
                       ? "training.fsdp_config.fsdp_hybrid_shard_group_size"
                       : "LOCAL_WORLD_SIZE",
                   world_size,
                   d.pp > 1 ? fmt::format(" (its {} data-parallel ranks per stage)", d.dp_shard) : "");
    d.dp_replicate = d.dp_shard / shard;
    d.dp_shard = shard;
  }
  // The experts' ranks are carved out of dp_shard x tp (parallel_dims.h): under a pipeline or
  // HSDP that is less than the world, which the check above divides. Said here, with the other
  // keys, before anything is written (before: the memory check's `ParallelDims.ep` error, after
  // the data was tokenized and config.yaml written).
  FSDPP_CHECK_AS(ConfigError, (d.dp_shard * d.tp) % d.ep == 0,
                 "[config] parallelism.expert_parallel_degree={} does not divide dp_shard x tp = "
                 "{} x {} = {}, the ranks of one pipeline stage's replica that the experts' groups "
                 "are carved out of (pp {} x dp_replicate {} x dp_shard {} x tp {} on {} ranks); "
                 "use an expert_parallel_degree that divides {}",
                 d.ep, d.dp_shard, d.tp, d.dp_shard * d.tp, d.pp, d.dp_replicate, d.dp_shard, d.tp,
                 world_size, d.dp_shard * d.tp);
  return d;
}

namespace {
std::string count_units(int64_t n) { return fmt::format("{} unit{}", n, n == 1 ? "" : "s"); }
}  // namespace

int pipeline_microbatches(const TrainConfig& cfg, const ParallelDims& dims,
                          const parallel::PipelineUnits& units) {
  const auto& p = cfg.parallelism;
  const auto& t = cfg.training;
  const int64_t rows = t.per_device_train_batch_size * t.gradient_accumulation_steps;
  const int64_t mb = p.pipeline_parallel_microbatch_size;
  FSDPP_CHECK_AS(ConfigError, rows % mb == 0,
                 "[config] parallelism.pipeline_parallel_microbatch_size={} does not divide the "
                 "{} sequences of a step on each dp rank (training.per_device_train_batch_size={} "
                 "x gradient_accumulation_steps={}); the microbatches must be equal",
                 mb, rows, t.per_device_train_batch_size, t.gradient_accumulation_steps);
  const int microbatches = static_cast<int>(rows / mb);
  // The cut and the schedule as parallelize makes them, its errors under the keys that set them.
  try {
    (void)parallel::cut_pipeline(units, std::string(p.pipeline_parallel_schedule.name()), dims.pp,
                                 microbatches, static_cast<int>(p.pipeline_parallel_layers_per_stage));
  } catch (const ConfigError& e) {
    FSDPP_THROW(ConfigError,
                "[config] parallelism.pipeline_parallel_schedule={}, pipeline_parallel_degree={}, "
                "pipeline_parallel_layers_per_stage={} with the model's {} and {} microbatches "
                "(per_device_train_batch_size={} x gradient_accumulation_steps={} / "
                "pipeline_parallel_microbatch_size={}): {}",
                p.pipeline_parallel_schedule, dims.pp, p.pipeline_parallel_layers_per_stage,
                count_units(units.count),
                microbatches, t.per_device_train_batch_size,
                t.gradient_accumulation_steps, mb, e.what());
  }
  return microbatches;
}

std::string layout_line(const ParallelDims& d, bool sequence_parallel) {
  return fmt::format("pp {} x dp_replicate {} x dp_shard {} x tp {}{} x ep {}{}", d.pp, d.dp_replicate,
                     d.dp_shard, d.tp, sequence_parallel ? " (sequence parallel)" : "", d.ep,
                     d.ep > 1 ? " (within dp_shard)" : "");
}

}  // namespace fsdpp::train
