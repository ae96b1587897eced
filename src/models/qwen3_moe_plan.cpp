// Qwen3-MoE's plan for parallelize: its stages, its tensor-parallel plan, its experts, its
// layers. See include/fsdpp/models/model_plan.h.
#include <optional>

#include "fsdpp/models/llama_stages.h"
#include "fsdpp/models/model_plan.h"
#include "fsdpp/models/qwen3_moe_ep.h"
#include "fsdpp/models/qwen3_moe_stages.h"
#include "fsdpp/models/qwen3_moe_tp_plan.h"
#include "model_stage.h"

namespace fsdpp::models {
namespace {

class Qwen3MoePlan final : public ModelPlan {
 public:
  explicit Qwen3MoePlan(Qwen3Moe model) : model_(model), lm_(models::causal_lm(std::move(model))) {}

  torch::nn::Module& module() override { return *model_; }
  std::string name() const override { return "Qwen3-MoE"; }
  CausalLM* causal_lm() override { return lm_.get(); }
  int64_t pipeline_units() const override { return qwen3_moe_pipeline_units(model_->config()); }
  std::string describe_pipeline_units() const override {
    return language_model_units(model_->config().num_hidden_layers);
  }

  std::vector<ModelStage> split(const std::vector<int>& units_per_stage) override {
    std::vector<ModelStage> out;
    for (auto& stage : split_qwen3_moe(model_, units_per_stage)) out.push_back(detail::model_stage(stage));
    return out;
  }

  std::vector<std::string> block_classes() const override { return {"Qwen3MoeDecoderLayer"}; }

  tp::TensorParallel apply_tensor_parallel(const TensorParallelSpec& spec) override {
    return parallelize_qwen3_moe(*model_, spec.group,
                                 {.sequence_parallel = spec.sequence_parallel,
                                  .split_experts = spec.split_experts});
  }

  bool has_experts() const override { return model_->config().num_experts > 0; }
  double aux_loss_coef() const override { return model_->config().router_aux_loss_coef; }

  OuterLayoutOf apply_experts(const ExpertParallelSpec& spec) override {
    if (spec.ep && spec.ep->size() > 1) {
      ep_ = parallelize_qwen3_moe_experts(*model_, {.ep = spec.ep, .batch = spec.batch});
      return ep_->outer_layout();
    }
    load_ = use_global_load_balancing_loss(*model_, spec.batch);
    return {};
  }

  std::vector<torch::nn::Module*> expert_modules(torch::nn::Module& root) override {
    std::vector<torch::nn::Module*> out;
    for (const auto& m : root.modules(/*include_self=*/false)) {
      if (auto* e = dynamic_cast<Qwen3MoeExpertsImpl*>(m.get())) out.push_back(e);
    }
    return out;
  }

  std::vector<int64_t> expert_load() const override {
    if (ep_) return ep_->last_expert_load();
    return load_ ? *load_ : std::vector<int64_t>{};
  }

 private:
  Qwen3Moe model_;
  std::unique_ptr<CausalLM> lm_;
  std::optional<Qwen3MoeExpertParallel> ep_;
  std::shared_ptr<const std::vector<int64_t>> load_;
};

}  // namespace

std::shared_ptr<ModelPlan> plan_of(Qwen3Moe model) {
  return std::make_shared<Qwen3MoePlan>(std::move(model));
}

}  // namespace fsdpp::models
