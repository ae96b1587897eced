#include "fsdpp/optim/fused_adamw.h"

#include <ATen/ATen.h>

#include <map>
#include <tuple>

#include "fsdpp/common/error.h"

namespace fsdpp::optim {

torch::Tensor FusedAdamW::step(LossClosure closure) {
  at::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode grad(true);
    loss = closure();
  }
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    struct Lists {
      std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
      std::vector<StepTensor*> to_advance;
    };
    // One kernel per device and dtype, as the kernel needs.
    std::map<std::tuple<int, int, int>, Lists> by_place;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      FSDPP_CHECK(!p.grad().is_sparse(), "[optim] FusedAdamW does not take sparse gradients");
      auto& slot = state_[p.unsafeGetTensorImpl()];
      if (!slot) {
        auto st = std::make_unique<torch::optim::AdamWParamState>();
        st->step(0);
        st->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        st->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        if (o.amsgrad()) st->max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(st);
      }
      auto& st = static_cast<torch::optim::AdamWParamState&>(*slot);
      st.step(st.step() + 1);
      auto& step = steps_[p.unsafeGetTensorImpl()];
      auto& lists = by_place[{static_cast<int>(p.device().type()), p.device().index(),
                              static_cast<int>(p.scalar_type())}];
      if (!step.value.defined() || step.value.device() != p.device()) {
        step.value = at::zeros({}, p.options().dtype(at::kFloat));
        step.mirrors = 0;
      }
      if (step.mirrors + 1 == st.step()) {
        lists.to_advance.push_back(&step);  // one add over all of them below
      } else {
        step.value.fill_(static_cast<double>(st.step()));  // new, or the state was loaded
        step.mirrors = st.step();
      }
      lists.params.push_back(p);
      lists.grads.push_back(p.grad());
      lists.exp_avgs.push_back(st.exp_avg());
      lists.exp_avg_sqs.push_back(st.exp_avg_sq());
      if (o.amsgrad()) lists.max_exp_avg_sqs.push_back(st.max_exp_avg_sq());
      lists.steps.push_back(step.value);
    }
    for (auto& [place, l] : by_place) {
      if (!l.to_advance.empty()) {
        std::vector<at::Tensor> advance;
        for (auto* s : l.to_advance) {
          advance.push_back(s->value);
          ++s->mirrors;
        }
        at::_foreach_add_(advance, 1.0);
      }
      const auto [beta1, beta2] = o.betas();
      at::_fused_adamw_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, l.max_exp_avg_sqs, l.steps,
                        o.lr(), beta1, beta2, o.weight_decay(), o.eps(), o.amsgrad(),
                        /*maximize=*/false);
    }
  }
  return loss;
}

}  // namespace fsdpp::optim
