// describe_plan_rank: a model by its plan, as one rank holds it. See plan_description.h.
#include "fsdpp/estimate/plan_description.h"

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/models/model_plan.h"
#include "fsdpp/parallel/pipeline_cut.h"
#include "fsdpp/tp/regions.h"

namespace fsdpp {
namespace {

// A parameter as this rank holds it: its tp slice along `dim` (-1: whole), as rows x the rest.
ModelDescription::Param rank_param(const at::Tensor& p, int64_t dim, int tp, int tp_rank) {
  auto sizes = p.sizes().vec();
  if (dim >= 0) sizes[static_cast<size_t>(dim)] = tp::shard_range(sizes[static_cast<size_t>(dim)], tp, tp_rank).size;
  int64_t numel = 1;
  for (auto s : sizes) numel *= s;
  const int64_t rows = sizes.empty() ? 1 : std::max<int64_t>(1, sizes[0]);
  return {.rows = rows, .row_numel = numel / rows};
}

}  // namespace

ModelDescription describe_plan_rank(models::ModelPlan& plan, const WrapPolicy& policy, const PlanLayout& l) {
  const auto& d = l.dims;
  // The split dimension of every parameter tensor parallelism splits, by tensor.
  std::map<const void*, int64_t> split;
  if (d.tp > 1) {
    const auto splits = plan.tensor_parallel_splits();
    FSDPP_CHECK_AS(ConfigError, splits.has_value(),
                   "[estimate] tensor parallelism of {}: its plan does not say which parameters it "
                   "splits (ModelPlan::tensor_parallel_splits)",
                   plan.name());
    for (const auto& item : plan.module().named_parameters(/*recurse=*/true)) {
      if (auto it = splits->find(item.key()); it != splits->end()) split[item.value().unsafeGetTensorImpl()] = it->second;
    }
  }
  // The roots FSDP is applied to: this rank's stages of the cut, or the whole module.
  std::vector<models::ModelStage> stages;
  std::vector<torch::nn::Module*> roots;
  if (d.pp > 1) {
    const auto cut = parallel::cut_pipeline(parallel::pipeline_units_of(plan), l.schedule, d.pp,
                                            l.microbatches, l.layers_per_stage);
    stages = plan.split(cut.units_per_stage);
    for (int st : cut.schedule.stages_of(l.rank / (d.world_size() / d.pp))) {
      roots.push_back(stages[static_cast<size_t>(st)].module.get());
    }
  } else {
    roots.push_back(&plan.module());
  }
  const int tp_rank = l.rank % d.tp;  // tp is the dense mesh's innermost dim
  ModelDescription out;
  for (auto* root : roots) {
    std::vector<ModelDescription::Unit> units;
    for (const auto& planned : plan_units(*root, policy)) {
      ModelDescription::Unit unit{.name = planned.path.empty() ? "(root)" : planned.path};
      for (const auto& p : planned.params) {
        const auto it = split.find(p.unsafeGetTensorImpl());
        unit.params.push_back(rank_param(p, it == split.end() ? -1 : it->second, d.tp, tp_rank));
      }
      // The stage's root first, as apply_fully_shard runs it.
      units.insert(planned.path.empty() ? units.begin() : units.end(), std::move(unit));
    }
    for (auto& u : units) out.units.push_back(std::move(u));
  }
  return out;
}

EstimateOptions plan_rank_options(EstimateOptions o, const parallel::ParallelDims& dims) {
  o.world_size = dims.dp();
  o.shard_group_size = dims.dp_shard;
  o.tensor_parallel = 1;
  o.sequence_parallel = false;
  o.expert_parallel = 1;
  o.pipeline = {};
  return o;
}

}  // namespace fsdpp
