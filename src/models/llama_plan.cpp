// The Llama's plan for parallelize: its stages, its tensor-parallel plan, its blocks. See
// include/fsdpp/models/model_plan.h.
#include "decoder_plan.h"
#include "fsdpp/models/llama_stages.h"
#include "fsdpp/models/llama_tp_plan.h"

namespace fsdpp::models {
namespace {

struct LlamaTraits {
  static constexpr const char* kName = "Llama";
  static constexpr const char* kBlock = "TransformerBlock";
  static int64_t layers(const LlamaConfig& cfg) { return cfg.n_layers; }
  static int64_t pipeline_units(const LlamaConfig& cfg) { return llama_pipeline_units(cfg); }
  static std::vector<LlamaStage> split(Llama& model, const std::vector<int>& counts) {
    return split_llama(model, counts);
  }
};

class LlamaPlan final : public detail::DecoderPlan<Llama, LlamaTraits> {
 public:
  using DecoderPlan::DecoderPlan;

  tp::TensorParallel apply_tensor_parallel(const TensorParallelSpec& spec) override {
    return parallelize_llama(*model_, spec.group, {.sequence_parallel = spec.sequence_parallel});
  }
};

}  // namespace

std::shared_ptr<ModelPlan> plan_of(Llama model) { return std::make_shared<LlamaPlan>(std::move(model)); }

}  // namespace fsdpp::models
