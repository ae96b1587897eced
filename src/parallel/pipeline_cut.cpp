// The pipeline's cut and schedule. See include/fsdpp/parallel/pipeline_cut.h.
#include "fsdpp/parallel/pipeline_cut.h"

#include <fmt/format.h>

#include "fsdpp/common/error.h"
#include "fsdpp/models/llama_stages.h"
#include "fsdpp/models/model_plan.h"
#include "fsdpp/pipeline/communication.h"
#include "fsdpp/pipeline/schedule_traits.h"

namespace fsdpp::parallel {

std::string PipelineCut::describe() const {
  std::string counts;
  for (size_t i = 0; i < units_per_stage.size(); ++i) {
    counts += (i ? "+" : "") + std::to_string(units_per_stage[i]);
  }
  return fmt::format("{}, {} stages of {} units, {} microbatches", schedule.name,
                     units_per_stage.size(), counts, schedule.num_microbatches);
}

PipelineUnits pipeline_units_of(const models::ModelPlan& plan) {
  return {plan.pipeline_units(), plan.describe_pipeline_units()};
}

PipelineCut cut_pipeline(const PipelineUnits& model_units, const std::string& name, int pp,
                         int microbatches, int layers_per_stage) {
  const int64_t units = model_units.count;
  const auto& traits = pipeline::schedule_traits(name);
  FSDPP_CHECK_AS(ConfigError, pp >= 1 && microbatches >= 1,
                 "[parallel] a pipeline of {} ranks and {} microbatches; expected >= 1 of each",
                 pp, microbatches);
  PipelineCut cut;
  int stages = traits.stages_per_rank * pp;
  if (layers_per_stage > 0) {
    cut.units_per_stage = models::units_per_stage(units, layers_per_stage);
    stages = static_cast<int>(cut.units_per_stage.size());
    const bool fits = traits.any_stages_per_rank ? stages % pp == 0 && stages >= 2 * pp
                                                 : stages == traits.stages_per_rank * pp;
    FSDPP_CHECK_AS(ConfigError, fits,
                   "[parallel] {} units ({}) in stages of {} make {} stages, but schedule {} on "
                   "{} pipeline ranks needs {}",
                   units, model_units.what, layers_per_stage, stages, traits.name, pp,
                   traits.any_stages_per_rank
                       ? fmt::format("a multiple of {} (at least {})", pp, 2 * pp)
                       : fmt::format("{} ({} per rank)", traits.stages_per_rank * pp,
                                     traits.stages_per_rank));
  } else {
    FSDPP_CHECK_AS(ConfigError, units >= stages,
                   "[parallel] schedule {} on {} pipeline ranks needs {} stages but the model has "
                   "{} units ({}); use a model of more units or fewer pipeline ranks",
                   traits.name, pp, stages, units, model_units.what);
    cut.units_per_stage = models::even_units_per_stage(units, stages);
  }
  cut.schedule = pipeline::add_communication(traits.make(pp, stages / pp, microbatches));
  return cut;
}

}  // namespace fsdpp::parallel
