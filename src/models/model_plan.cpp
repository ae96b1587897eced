// The defaults of models::ModelPlan and the plan of a CausalLM. See
// include/fsdpp/models/model_plan.h.
#include "fsdpp/models/model_plan.h"

#include "fsdpp/common/error.h"

namespace fsdpp::models {

OuterLayoutOf ModelPlan::apply_experts(const ExpertParallelSpec&) {
  FSDPP_THROW(ConfigError, "[models] {} has no experts to place; expert parallelism needs a "
              "model with experts (Qwen3-MoE)", name());
}

std::vector<torch::nn::Module*> ModelPlan::expert_modules(torch::nn::Module&) { return {}; }

StageLoss ModelPlan::loss(const at::Tensor& inputs, const at::Tensor& targets) {
  auto* lm = causal_lm();
  FSDPP_CHECK(lm != nullptr, "[models] {} is not a language model and its plan gives no loss", name());
  auto out = lm->forward(inputs, targets);
  return {out.loss, out.aux_loss};
}

std::shared_ptr<ModelPlan> plan_of(std::shared_ptr<CausalLM> lm) {
  FSDPP_CHECK(lm != nullptr, "[models] plan_of: no model");
  if (auto* l = as_llama(*lm)) return plan_of(*l);
  if (auto* q = as_qwen3_moe(*lm)) return plan_of(*q);
  FSDPP_THROW(ConfigError, "[models] model.architecture={} has no parallel plan", lm->architecture());
}

}  // namespace fsdpp::models
