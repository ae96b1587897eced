#pragma once
// Private to src/models: a pipeline stage of any model as models::ModelStage (model_plan.h): the
// module, its forward through fsdpp::forward, and on the stage that holds the head its loss; and
// the cut of a model into its stages.

#include <cstdint>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/models/model_plan.h"

namespace fsdpp::models::detail {

// A model's pipeline stages, one per count of units, in order: make(first_unit, count) each,
// after a ConfigError "[models] pipeline stage sizes add up to <total> units; the <model> has
// <units> (<what>)" unless the counts add up to the model's units.
template <typename Stage, typename Make>
std::vector<Stage> cut_into_stages(const std::vector<int>& counts, int64_t units,
                                   std::string_view model, const std::string& what, Make make) {
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  FSDPP_CHECK_AS(ConfigError, total == units,
                 "[models] pipeline stage sizes add up to {} units; the {} has {} ({})", total,
                 model, units, what);
  std::vector<Stage> stages;
  int64_t first = 0;
  for (int c : counts) {
    stages.push_back(make(first, c));
    first += c;
  }
  return stages;
}

// `Stage`: a ModuleHolder of an Impl with forward(at::Tensor), forward(x, positions), has_head()
// and loss(logits, targets) (LlamaStage, Qwen3MoeStage); one with terms of its own besides the
// token loss (Qwen3MoeStage) has loss(logits, targets, token_loss) and last_aux_loss().
template <typename Stage>
ModelStage model_stage(Stage stage) {
  ModelStage s;
  s.module = stage.ptr();
  s.forward = [stage](const at::Tensor& x) mutable { return fsdpp::forward(stage, x); };
  s.forward_positions = [stage](const at::Tensor& x, const at::Tensor& positions) mutable {
    return positions.defined() ? fsdpp::forward(stage, x, positions) : fsdpp::forward(stage, x);
  };
  if (stage->has_head()) {
    s.loss = [stage](const at::Tensor& logits, const at::Tensor& targets,
                     const TokenLoss& token_loss) mutable {
      StageLoss out;
      if constexpr (requires { stage->last_aux_loss(); }) {  // a model with its own terms
        out.loss = stage->loss(logits, targets, token_loss);
        out.aux_loss = stage->last_aux_loss();
      } else {
        out.loss = token_loss ? token_loss(logits, targets) : stage->loss(logits, targets);
      }
      return out;
    };
  }
  return s;
}

}  // namespace fsdpp::models::detail
