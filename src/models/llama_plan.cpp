// The Llama's plan for parallelize: its stages, its tensor-parallel plan, its blocks. See
// include/fsdpp/models/model_plan.h.
#include "fsdpp/models/llama_stages.h"
#include "fsdpp/models/llama_tp_plan.h"
#include "fsdpp/models/model_plan.h"
#include "model_stage.h"

namespace fsdpp::models {
namespace {

class LlamaPlan final : public ModelPlan {
 public:
  explicit LlamaPlan(Llama model) : model_(model), lm_(models::causal_lm(std::move(model))) {}

  torch::nn::Module& module() override { return *model_; }
  std::string name() const override { return "Llama"; }
  CausalLM* causal_lm() override { return lm_.get(); }
  int64_t pipeline_units() const override { return llama_pipeline_units(model_->config()); }
  std::string describe_pipeline_units() const override {
    return language_model_units(model_->config().n_layers);
  }

  std::vector<ModelStage> split(const std::vector<int>& units_per_stage) override {
    std::vector<ModelStage> out;
    for (auto& stage : split_llama(model_, units_per_stage)) out.push_back(detail::model_stage(stage));
    return out;
  }

  std::vector<std::string> block_classes() const override { return {"TransformerBlock"}; }

  tp::TensorParallel apply_tensor_parallel(const TensorParallelSpec& spec) override {
    return parallelize_llama(*model_, spec.group, {.sequence_parallel = spec.sequence_parallel});
  }

 private:
  Llama model_;
  std::unique_ptr<CausalLM> lm_;
};

}  // namespace

std::shared_ptr<ModelPlan> plan_of(Llama model) { return std::make_shared<LlamaPlan>(std::move(model)); }

}  // namespace fsdpp::models
