#pragma once
// Private to src/models: what the decoders' plans (llama_plan.cpp, qwen3_moe_plan.cpp) answer
// alike: the model and its CausalLM, its pipeline units (the embedding, the layers, the head) and
// their cut into stages, the class of its blocks. Each plan adds its tensor-parallel plan and,
// for Qwen3-MoE, its experts.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fsdpp/models/llama_stages.h"
#include "fsdpp/models/model_plan.h"
#include "model_stage.h"

namespace fsdpp::models::detail {

// `Traits` says what differs: kName, kBlock (the block's class), layers(config),
// pipeline_units(config) and split(model, units_per_stage).
template <typename Model, typename Traits>
class DecoderPlan : public ModelPlan {
 public:
  explicit DecoderPlan(Model model) : model_(model), lm_(models::causal_lm(std::move(model))) {}

  torch::nn::Module& module() override { return *model_; }
  std::string name() const override { return Traits::kName; }
  CausalLM* causal_lm() override { return lm_.get(); }
  int64_t pipeline_units() const override { return Traits::pipeline_units(model_->config()); }
  std::string describe_pipeline_units() const override {
    return language_model_units(Traits::layers(model_->config()));
  }

  std::vector<ModelStage> split(const std::vector<int>& units_per_stage) override {
    std::vector<ModelStage> out;
    for (auto& stage : Traits::split(model_, units_per_stage)) out.push_back(model_stage(stage));
    return out;
  }

  std::vector<std::string> block_classes() const override { return {Traits::kBlock}; }

 protected:
  Model model_;
  std::unique_ptr<CausalLM> lm_;
};

}  // namespace fsdpp::models::detail
