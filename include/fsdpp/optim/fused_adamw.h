#pragma once
// AdamW whose step is one fused kernel per (device, dtype) over all of a group's parameters
// (at::_fused_adamw_, what PyTorch's AdamW(fused=True) runs), instead of LibTorch's loop of
// about ten kernels per parameter: Hugging Face's optim "adamw_torch_fused". The update is
// AdamW's (decoupled weight decay, bias correction, amsgrad); it keeps its state in LibTorch's
// AdamWParamState (exp_avg, exp_avg_sq, max_exp_avg_sq, step), so that checkpoints, disk
// offload and the estimator see a torch::optim::AdamW, and a checkpoint moves between the two.
//
//   fsdpp::optim::FusedAdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-4));
//   opt.step();
//
// ATen has the kernel for CUDA and for the CPU; fsdpp-train uses it on a GPU by default.

#include <torch/optim/adamw.h>

#include <unordered_map>
#include <vector>

namespace fsdpp::optim {

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;

 private:
  // Each parameter's step count as the float scalar tensor the kernel reads, on its device,
  // mirroring AdamWParamState::step (which a checkpoint may have changed).
  struct StepTensor {
    at::Tensor value;
    int64_t mirrors = -1;  // the state's step it holds
  };
  std::unordered_map<const void*, StepTensor> steps_;
};

}  // namespace fsdpp::optim
