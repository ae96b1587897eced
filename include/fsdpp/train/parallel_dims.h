#pragma once
// The mesh of a training run from its parallelism: section (torchtitan's ParallelDims): data
// parallel replicas x data parallel shards x tensor parallel ranks, the last the innermost dim so
// that a tp group is consecutive ranks (inside a node, as Megatron places it).
//
//   auto dims = train::parallel_dims(cfg, world.size());   // checked: [config] errors
//   parallel::parallelize(plan, world, dims, o);            // the mesh and the composition
//   dims.dp_rank(world.rank());                             // which part of the batch
//
// Without TP and replicas it is plain FSDP over the world (fsdpp's 1-D mesh); HYBRID strategies
// then keep their own group size (training.fsdp_config.fsdp_hybrid_shard_group_size).

#include <cstdint>
#include <string>

#include "fsdpp/parallel/parallel_dims.h"
#include "fsdpp/parallel/pipeline_cut.h"

namespace fsdpp::train {

struct TrainConfig;

// One ParallelDims for the trainer and parallelize: the degrees the keys name, resolved for the
// world (dp_shard filled in, HYBRID's groups chosen).
using ParallelDims = parallel::ParallelDims;

// Every dim as the run lays it out, for the log: "pp 1 x dp_replicate 1 x dp_shard 2 x tp 2
// (sequence parallel) x ep 1"; ep, carved out of the data-parallel ranks, "x ep 2 (within
// dp_shard)".
std::string layout_line(const ParallelDims& dims, bool sequence_parallel);

// The most ranks a degree may name (more than any job has).
inline constexpr int64_t kMaxDegree = 1 << 20;

// The keys' checks that need no world and no model (called by TrainConfig::validate_run):
// degrees >= 1 and at most kMaxDegree (the shard degree -1 too), sequence parallelism only with a
// tp degree > 1, the pipeline's schedule and microbatch size. What a degree asks of the model's
// shape is the model's: fsdpp-train's in TrainConfig::validate, a plan's when it is applied.
void validate_parallelism(const TrainConfig& cfg);

// The degrees on `world_size` ranks; throws ConfigError naming the keys when their product is
// not the world size or the strategy cannot hold them (replicas without a HYBRID strategy).
// A HYBRID strategy without data_parallel_replicate_degree shards over groups of
// fsdp_hybrid_shard_group_size ranks (or `local_world_size`, a node's, when it is 0 and
// local_world_size > 0), the replicas the dp ranks left over.
ParallelDims parallel_dims(const TrainConfig& cfg, int world_size, int local_world_size = 0);

// A pipelined run's microbatches per step (pp > 1): per_device_train_batch_size x
// gradient_accumulation_steps / pipeline_parallel_microbatch_size, checked with the schedule
// and the cut parallel::cut_pipeline makes of them (ConfigError naming the keys when they do not
// fit together). `units`: the model's pipeline units and what they are (ModelPlan's
// pipeline_units and describe_pipeline_units, or fsdpp-train's model section's before it is built).
int pipeline_microbatches(const TrainConfig& cfg, const ParallelDims& dims,
                          const parallel::PipelineUnits& units);

}  // namespace fsdpp::train
