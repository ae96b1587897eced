// LibTorch's per-parameter optimizer state by name. See include/fsdpp/optim/optimizer_state.h.
#include "fsdpp/optim/optimizer_state.h"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <algorithm>

#include "fsdpp/common/error.h"

namespace fsdpp::optim {
namespace {

using torch::optim::OptimizerParamState;

template <typename S>
S* as(OptimizerParamState& state, OptimizerKind kind) {
  auto* s = dynamic_cast<S*>(&state);
  FSDPP_CHECK(s, "[optim] an optimizer state entry is not {}'s own state type; expected the state "
              "its step() creates", to_string(kind));
  return s;
}

// The kind's tensors in state_names() order.
std::vector<at::Tensor*> tensors_of(OptimizerParamState& state, OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::ADAMW: {
      auto* s = as<torch::optim::AdamWParamState>(state, kind);
      return {&s->exp_avg(), &s->exp_avg_sq(), &s->max_exp_avg_sq()};
    }
    case OptimizerKind::ADAM: {
      auto* s = as<torch::optim::AdamParamState>(state, kind);
      return {&s->exp_avg(), &s->exp_avg_sq(), &s->max_exp_avg_sq()};
    }
    case OptimizerKind::SGD:
      return {&as<torch::optim::SGDParamState>(state, kind)->momentum_buffer()};
    case OptimizerKind::RMSPROP: {
      auto* s = as<torch::optim::RMSpropParamState>(state, kind);
      return {&s->square_avg(), &s->momentum_buffer(), &s->grad_avg()};
    }
    case OptimizerKind::ADAGRAD:
      return {&as<torch::optim::AdagradParamState>(state, kind)->sum()};
  }
  return {};
}

int64_t step_of(OptimizerParamState& state, OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::ADAMW: return as<torch::optim::AdamWParamState>(state, kind)->step();
    case OptimizerKind::ADAM: return as<torch::optim::AdamParamState>(state, kind)->step();
    case OptimizerKind::SGD: return 0;
    case OptimizerKind::RMSPROP: return as<torch::optim::RMSpropParamState>(state, kind)->step();
    case OptimizerKind::ADAGRAD: return as<torch::optim::AdagradParamState>(state, kind)->step();
  }
  return 0;
}

void set_step(OptimizerParamState& state, OptimizerKind kind, int64_t step) {
  switch (kind) {
    case OptimizerKind::ADAMW: as<torch::optim::AdamWParamState>(state, kind)->step(step); break;
    case OptimizerKind::ADAM: as<torch::optim::AdamParamState>(state, kind)->step(step); break;
    case OptimizerKind::SGD: break;
    case OptimizerKind::RMSPROP: as<torch::optim::RMSpropParamState>(state, kind)->step(step); break;
    case OptimizerKind::ADAGRAD: as<torch::optim::AdagradParamState>(state, kind)->step(step); break;
  }
}

}  // namespace

const char* to_string(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::ADAMW: return "AdamW";
    case OptimizerKind::ADAM: return "Adam";
    case OptimizerKind::SGD: return "SGD";
    case OptimizerKind::RMSPROP: return "RMSprop";
    case OptimizerKind::ADAGRAD: return "Adagrad";
  }
  return "?";
}

std::optional<OptimizerKind> optimizer_kind(const torch::optim::Optimizer& optimizer) {
  const auto* o = &optimizer;
  // AdamW first: a subclass of either would be taken for it, never the reverse.
  if (dynamic_cast<const torch::optim::AdamW*>(o)) return OptimizerKind::ADAMW;
  if (dynamic_cast<const torch::optim::Adam*>(o)) return OptimizerKind::ADAM;
  if (dynamic_cast<const torch::optim::SGD*>(o)) return OptimizerKind::SGD;
  if (dynamic_cast<const torch::optim::RMSprop*>(o)) return OptimizerKind::RMSPROP;
  if (dynamic_cast<const torch::optim::Adagrad*>(o)) return OptimizerKind::ADAGRAD;
  return std::nullopt;
}

const char* supported_optimizers() { return "torch::optim::AdamW, Adam, SGD, RMSprop and Adagrad"; }

const std::vector<std::string>& state_names(OptimizerKind kind) {
  static const std::vector<std::string> adam = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  static const std::vector<std::string> sgd = {"momentum_buffer"};
  static const std::vector<std::string> rmsprop = {"square_avg", "momentum_buffer", "grad_avg"};
  static const std::vector<std::string> adagrad = {"sum"};
  switch (kind) {
    case OptimizerKind::ADAMW:
    case OptimizerKind::ADAM: return adam;
    case OptimizerKind::SGD: return sgd;
    case OptimizerKind::RMSPROP: return rmsprop;
    case OptimizerKind::ADAGRAD: return adagrad;
  }
  return adagrad;
}

StateConfig state_config(const torch::optim::OptimizerOptions& options, OptimizerKind kind) {
  auto& o = const_cast<torch::optim::OptimizerOptions&>(options);
  StateConfig c;
  switch (kind) {
    case OptimizerKind::ADAMW: c.amsgrad = static_cast<torch::optim::AdamWOptions&>(o).amsgrad(); break;
    case OptimizerKind::ADAM: c.amsgrad = static_cast<torch::optim::AdamOptions&>(o).amsgrad(); break;
    case OptimizerKind::SGD: c.momentum = static_cast<torch::optim::SGDOptions&>(o).momentum() != 0; break;
    case OptimizerKind::RMSPROP: {
      auto& r = static_cast<torch::optim::RMSpropOptions&>(o);
      c.momentum = r.momentum() != 0;
      c.centered = r.centered();
      break;
    }
    case OptimizerKind::ADAGRAD: break;
  }
  return c;
}

std::vector<std::string> created_state_names(OptimizerKind kind, const StateConfig& config) {
  std::vector<std::string> out;
  for (const auto& name : state_names(kind)) {
    if (name == "max_exp_avg_sq" && !config.amsgrad) continue;
    if (name == "momentum_buffer" && !config.momentum) continue;
    if (name == "grad_avg" && !config.centered) continue;
    out.push_back(name);
  }
  return out;
}

bool is_state_of(const OptimizerParamState& state, OptimizerKind kind) {
  const auto* s = &state;
  switch (kind) {
    case OptimizerKind::ADAMW: return dynamic_cast<const torch::optim::AdamWParamState*>(s);
    case OptimizerKind::ADAM: return dynamic_cast<const torch::optim::AdamParamState*>(s);
    case OptimizerKind::SGD: return dynamic_cast<const torch::optim::SGDParamState*>(s);
    case OptimizerKind::RMSPROP: return dynamic_cast<const torch::optim::RMSpropParamState*>(s);
    case OptimizerKind::ADAGRAD: return dynamic_cast<const torch::optim::AdagradParamState*>(s);
  }
  return false;
}

std::vector<StateTensorRef> state_tensors(OptimizerParamState& state, OptimizerKind kind) {
  const auto& names = state_names(kind);
  const auto tensors = tensors_of(state, kind);
  std::vector<StateTensorRef> out;
  out.reserve(names.size());
  for (size_t i = 0; i < names.size(); ++i) out.push_back({names[i], *tensors[i]});
  return out;
}

std::unique_ptr<OptimizerParamState> new_param_state(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::ADAMW: return std::make_unique<torch::optim::AdamWParamState>();
    case OptimizerKind::ADAM: return std::make_unique<torch::optim::AdamParamState>();
    case OptimizerKind::SGD: return std::make_unique<torch::optim::SGDParamState>();
    case OptimizerKind::RMSPROP: return std::make_unique<torch::optim::RMSpropParamState>();
    case OptimizerKind::ADAGRAD: return std::make_unique<torch::optim::AdagradParamState>();
  }
  return nullptr;
}

std::optional<ParamState> get_param_state(torch::optim::Optimizer& optimizer, OptimizerKind kind,
                                          const at::Tensor& param) {
  auto it = optimizer.state().find(param.unsafeGetTensorImpl());
  if (it == optimizer.state().end() || !it->second) return std::nullopt;
  ParamState out;
  out.step = step_of(*it->second, kind);
  for (const auto& ref : state_tensors(*it->second, kind)) {
    if (ref.tensor.defined() && ref.tensor.numel() > 0) out.tensors[ref.name] = ref.tensor;
  }
  return out;
}

void set_param_state(torch::optim::Optimizer& optimizer, OptimizerKind kind,
                     const at::Tensor& param, const std::optional<ParamState>& state) {
  void* key = param.unsafeGetTensorImpl();
  if (!state) {
    optimizer.state().erase(key);
    return;
  }
  auto s = new_param_state(kind);
  set_step(*s, kind, state->step);
  const auto& names = state_names(kind);
  for (const auto& [name, t] : state->tensors) {
    FSDPP_CHECK(std::find(names.begin(), names.end(), name) != names.end(),
                "[optim] {} keeps no state named '{}'", to_string(kind), name);
  }
  for (const auto& ref : state_tensors(*s, kind)) {
    auto it = state->tensors.find(ref.name);
    if (it != state->tensors.end()) ref.tensor = it->second;
  }
  optimizer.state()[key] = std::move(s);
}

}  // namespace fsdpp::optim
