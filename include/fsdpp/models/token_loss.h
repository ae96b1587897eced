#pragma once
// A model's loss over its tokens, as a caller may give it in place of the cross entropy: of one
// batch's logits (B,T,V) (this rank's vocabulary columns under tensor parallelism) and its
// targets (B,T). A model adds its own terms to it (Qwen3-MoE: router_aux_loss_coef times the
// load-balancing loss), as it adds them to the cross entropy. E.g. a distillation objective
// (fsdpp/distill/chunked_distill_loss.h) for a pipeline's last stage (models::ModelStage).

#include <ATen/core/Tensor.h>

#include <functional>

namespace fsdpp::models {

using TokenLoss = std::function<at::Tensor(const at::Tensor& logits, const at::Tensor& targets)>;

}  // namespace fsdpp::models
