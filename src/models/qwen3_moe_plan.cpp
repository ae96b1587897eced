// Qwen3-MoE's plan for parallelize: its stages, its tensor-parallel plan, its experts, its
// layers. See include/fsdpp/models/model_plan.h.
#include <optional>

#include "decoder_plan.h"
#include "fsdpp/models/qwen3_moe_ep.h"
#include "fsdpp/models/qwen3_moe_stages.h"
#include "fsdpp/models/qwen3_moe_tp_plan.h"

namespace fsdpp::models {
namespace {

struct Qwen3MoeTraits {
  static constexpr const char* kName = "Qwen3-MoE";
  static constexpr const char* kBlock = "Qwen3MoeDecoderLayer";
  static int64_t layers(const Qwen3MoeConfig& cfg) { return cfg.num_hidden_layers; }
  static int64_t pipeline_units(const Qwen3MoeConfig& cfg) { return qwen3_moe_pipeline_units(cfg); }
  static std::vector<Qwen3MoeStage> split(Qwen3Moe& model, const std::vector<int>& counts) {
    return split_qwen3_moe(model, counts);
  }
};

class Qwen3MoePlan final : public detail::DecoderPlan<Qwen3Moe, Qwen3MoeTraits> {
 public:
  using DecoderPlan::DecoderPlan;

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
  std::optional<Qwen3MoeExpertParallel> ep_;
  std::shared_ptr<const std::vector<int64_t>> load_;
};

}  // namespace

std::shared_ptr<ModelPlan> plan_of(Qwen3Moe model) {
  return std::make_shared<Qwen3MoePlan>(std::move(model));
}

}  // namespace fsdpp::models
