// The optimizer-state adapter against LibTorch itself: for every optimizer it knows, the state
// tensors it says a first step creates are the ones LibTorch's step() created, and state copied
// through get_param_state / set_param_state into a second optimizer makes that one step exactly
// as the first does.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>

#include "fsdpp/common/error.h"
#include "fsdpp/optim/optimizer_state.h"

using namespace fsdpp;
using optim::OptimizerKind;

namespace {

struct Case {
  std::string label;
  OptimizerKind kind;
  std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)> make;
};

std::vector<Case> cases() {
  namespace o = torch::optim;
  return {
      {"adamw", OptimizerKind::ADAMW,
       [](auto p) { return std::make_unique<o::AdamW>(p, o::AdamWOptions(1e-2)); }},
      {"adamw_amsgrad", OptimizerKind::ADAMW,
       [](auto p) { return std::make_unique<o::AdamW>(p, o::AdamWOptions(1e-2).amsgrad(true)); }},
      {"adam_amsgrad", OptimizerKind::ADAM,
       [](auto p) { return std::make_unique<o::Adam>(p, o::AdamOptions(1e-2).amsgrad(true)); }},
      {"sgd", OptimizerKind::SGD, [](auto p) { return std::make_unique<o::SGD>(p, o::SGDOptions(0.1)); }},
      {"sgd_nesterov", OptimizerKind::SGD,
       [](auto p) { return std::make_unique<o::SGD>(p, o::SGDOptions(0.1).momentum(0.9).nesterov(true)); }},
      {"rmsprop", OptimizerKind::RMSPROP,
       [](auto p) { return std::make_unique<o::RMSprop>(p, o::RMSpropOptions(1e-2)); }},
      {"rmsprop_centered_momentum", OptimizerKind::RMSPROP,
       [](auto p) {
         return std::make_unique<o::RMSprop>(p, o::RMSpropOptions(1e-2).momentum(0.5).centered(true));
       }},
      {"adagrad", OptimizerKind::ADAGRAD,
       [](auto p) { return std::make_unique<o::Adagrad>(p, o::AdagradOptions(0.1)); }},
  };
}

std::vector<torch::Tensor> make_params() {
  torch::manual_seed(3);
  return {torch::randn({4, 3}).requires_grad_(), torch::randn({5}).requires_grad_()};
}

void step_with_grads(torch::optim::Optimizer& opt, std::vector<torch::Tensor>& params, int seed) {
  torch::manual_seed(seed);
  for (auto& p : params) p.mutable_grad() = torch::randn_like(p);
  opt.step();
}

}  // namespace

TEST(OptimizerState, EveryKindAgreesWithLibTorchsOwnState) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.label);
    auto params = make_params();
    auto opt = c.make(params);
    ASSERT_EQ(optim::optimizer_kind(*opt), c.kind);
    step_with_grads(*opt, params, 1);
    step_with_grads(*opt, params, 2);
    const auto config = optim::state_config(opt->param_groups()[0].options(), c.kind);
    const auto created = optim::created_state_names(c.kind, config);
    for (const auto& p : params) {
      auto st = optim::get_param_state(*opt, c.kind, p);
      if (!st) {  // plain SGD keeps no state at all
        EXPECT_TRUE(created.empty());
        continue;
      }
      std::vector<std::string> held;
      for (const auto& name : optim::state_names(c.kind)) {
        if (!st->tensors.count(name)) continue;
        held.push_back(name);
        EXPECT_EQ(st->tensors.at(name).sizes(), p.sizes()) << name;
      }
      EXPECT_EQ(held, created);
      EXPECT_EQ(st->step, c.kind == OptimizerKind::SGD ? 0 : 2);
    }

    // The state copied into a second optimizer on equal parameters: the next step is the same.
    auto params2 = make_params();
    for (size_t i = 0; i < params.size(); ++i) params2[i].detach().copy_(params[i].detach());
    auto opt2 = c.make(params2);
    for (size_t i = 0; i < params.size(); ++i) {
      auto st = optim::get_param_state(*opt, c.kind, params[i]);
      if (st) {
        for (auto& [name, t] : st->tensors) t = t.clone();
      }
      optim::set_param_state(*opt2, c.kind, params2[i], st);
    }
    step_with_grads(*opt, params, 3);
    step_with_grads(*opt2, params2, 3);
    for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], params2[i])) << i;

    // nullopt removes the state.
    optim::set_param_state(*opt2, c.kind, params2[0], std::nullopt);
    EXPECT_FALSE(optim::get_param_state(*opt2, c.kind, params2[0]).has_value());
  }
}

TEST(OptimizerState, UnknownOptimizersAndStatesAreRefused) {
  auto params = make_params();
  torch::optim::LBFGS lbfgs(params, torch::optim::LBFGSOptions(1));
  EXPECT_FALSE(optim::optimizer_kind(lbfgs).has_value());
  EXPECT_EQ(std::string(optim::supported_optimizers()),
            "torch::optim::AdamW, Adam, SGD, RMSprop and Adagrad");

  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
  optim::ParamState st;
  st.tensors["exp_avg"] = torch::zeros_like(params[0]);
  try {
    optim::set_param_state(sgd, OptimizerKind::SGD, params[0], st);
    ADD_FAILURE() << "no error for Adam state in SGD";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[optim] SGD keeps no state named 'exp_avg'"), std::string::npos)
        << e.what();
  }
  // An entry of another optimizer's type is named, not misread.
  auto entry = optim::new_param_state(OptimizerKind::ADAM);
  EXPECT_FALSE(optim::is_state_of(*entry, OptimizerKind::ADAMW));
  EXPECT_TRUE(optim::is_state_of(*entry, OptimizerKind::ADAM));
  EXPECT_THROW(optim::state_tensors(*entry, OptimizerKind::SGD), Error);
  EXPECT_EQ(std::string(optim::to_string(OptimizerKind::RMSPROP)), "RMSprop");
}
