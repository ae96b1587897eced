#pragma once
// Private to src/models: a pipeline stage of any model as models::ModelStage (model_plan.h): the
// module, its forward through fsdpp::forward, and on the stage that holds the head its loss.

#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/models/model_plan.h"

namespace fsdpp::models::detail {

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
