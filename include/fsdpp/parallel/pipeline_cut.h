#pragma once
// Which units of a model each pipeline stage holds and the schedule that runs them, decided
// from the schedule's own description (fsdpp/pipeline/schedule_traits.h) before anything is
// cut: the first step of parallelize (docs/parallelize.md#pipeline).
//
//   auto cut = parallel::cut_pipeline({10, "the embedding, 8 blocks and the head"}, "ZBVZeroBubble",
//                                     /*pp=*/2, /*microbatches=*/4);
//   cut.units_per_stage;   // {3, 3, 2, 2}: two stages per rank in a V
//   cut.schedule;          // with communication, verified by the runtime

#include <cstdint>
#include <string>
#include <vector>

#include "fsdpp/pipeline/schedule.h"

namespace fsdpp::models {
class ModelPlan;
}

namespace fsdpp::parallel {

// A model's pipeline units as a cut sees them: how many, and what they are (for messages: "the
// embedding, 4 blocks and the head", "the children of sequential_plan 'mlp'";
// models::ModelPlan::describe_pipeline_units).
struct PipelineUnits {
  int64_t count = 0;
  std::string what;
};
// A plan's: ModelPlan::pipeline_units and describe_pipeline_units.
PipelineUnits pipeline_units_of(const models::ModelPlan& plan);

struct PipelineCut {
  pipeline::PipelineSchedule schedule;
  std::vector<int> units_per_stage;  // one count per stage, in stage order
  // "ZBVZeroBubble, 4 stages of 3+3+2+2 units, 4 microbatches".
  std::string describe() const;
};

// The model's `units` over the stages of `schedule` on `pp` ranks: as even as can be over the
// schedule's stages, or layers_per_stage units each (torchtitan's
// pipeline_parallel_layers_per_stage; the stage count must then fit the schedule: pp for one
// stage per rank, 2pp for the V, a multiple of pp of at least 2pp for the looped schedules).
// ConfigError naming the schedule, the counts, what the units are and what fits.
PipelineCut cut_pipeline(const PipelineUnits& units, const std::string& schedule, int pp,
                         int microbatches, int layers_per_stage = 0);

}  // namespace fsdpp::parallel
