// Clipping a pipelined model's gradients: the parts of fsdpp::clip_grad_norm_ (clip.h of fsdp).
#include "fsdpp/pipeline/clip.h"

#include "fsdpp/fsdp/clip.h"

namespace fsdpp::pipeline {

double clip_grad_norm_(const std::vector<at::Tensor>& params, double max_norm,
                       const std::vector<std::shared_ptr<dist::ProcessGroup>>& groups) {
  return fsdpp::clip_grad_norm_({{params, groups}}, max_norm);
}

double clip_grad_norm_(const TensorParallelParams& params, double max_norm,
                       const std::vector<std::shared_ptr<dist::ProcessGroup>>& groups) {
  auto split_over = groups;
  split_over.push_back(params.tp);
  return fsdpp::clip_grad_norm_({{params.split, split_over}, {params.replicated, groups}}, max_norm);
}

}  // namespace fsdpp::pipeline
