#pragma once
// One rank's training step without pipeline parallelism, tensor by tensor, in the estimator's
// ledger (private to src/estimate/): the forward through the FSDP units (the embedding and the
// head in the root, each decoder layer and its experts' unit), the loss (or a distillation
// teacher's objective), the backward with its reduce-scatters, and the optimizer step.

#include <optional>
#include <vector>

#include "decoder_layers.h"
#include "fsdp_units.h"
#include "teacher_activations.h"

namespace fsdpp::estimate_detail {

class StepLedger {
 public:
  StepLedger(Ledger& l, const EstimateOptions& o, const DataParallelLayout& a, FsdpUnits& units,
             std::vector<UnitState>& us, const TeacherPlan* teacher);

  // One step; the first runs without prefetch (fully_shard learns the order in it) and creates
  // the optimizer state.
  void run(bool first);

  const MoeDims& moe() const { return md_; }

 private:
  void forward();
  void layers_forward();
  void head_forward();
  void loss_backward();
  Id loss_gradient();
  void layers_backward();
  void layer_backward(size_t b);
  void embeddings_backward();
  void optimizer_step(bool first);
  // The experts' unit of layer b gathered, reduced and freed around its MLP.
  ExpertUnitHooks forward_hooks(int experts) const;
  ExpertUnitHooks backward_hooks(size_t unit, int experts) const;

  Ledger& l_;
  const EstimateOptions& o_;
  const DataParallelLayout& a_;
  FsdpUnits& units_;
  std::vector<UnitState>& us_;
  const TeacherPlan* teacher_;
  const UnitOrder order_;
  const EstimatedOptimizer optimizer_;
  const std::vector<int64_t> param_shards_;
  const bool have_shape_, qwen3_;
  const MoeDims md_;
  const Dims d_;
  const std::optional<DecoderLayers> layers_;
  std::vector<Id> optim_state_;  // created by the first optimizer step

  // This step's.
  int fwd_prefetch_ = 0, bwd_prefetch_ = 0;
  bool pre_ = false, post_ = false;  // backward prefetch before or after a unit's backward
  std::vector<Id> inputs_;           // tokens, targets
  Id x_ = -1;                        // the residual stream, then the gradient flowing down
  std::vector<BlockSaved> saved_;
  std::vector<Id> router_logits_;  // kept by the model's output until the step's end
  Id rope_tables_ = -1;
  std::vector<Id> lb_saved_, head_, kd_saved_;
  Id logits_ = -1, lsm_ = -1;
};

}  // namespace fsdpp::estimate_detail
