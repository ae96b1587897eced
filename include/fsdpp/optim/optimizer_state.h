#pragma once
// What LibTorch's optimizers keep per parameter, by name: the one adapter that state dicts
// (checkpoints), disk offload and the memory estimator read, so that they agree on which
// optimizers exist and which tensors each one keeps.
//
//   auto kind = fsdpp::optim::optimizer_kind(opt);            // nullopt: LBFGS or a user's own
//   if (auto st = fsdpp::optim::get_param_state(opt, *kind, param)) {
//     st->step;                          // 0 for SGD, which counts no steps
//     st->tensors.at("exp_avg");         // AdamW: exp_avg, exp_avg_sq (+ max_exp_avg_sq)
//   }
//
// The state tensors each kind may keep per parameter (each shaped like the parameter), in the
// order state_names() gives and checkpoints write them:
//   AdamW, Adam   exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad only); step
//   SGD           momentum_buffer (momentum != 0 only); no step
//   RMSprop       square_avg, momentum_buffer (momentum != 0), grad_avg (centered); step
//   Adagrad       sum; step
// LBFGS keeps state across parameters (no per-parameter state) and is not supported.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
class OptimizerOptions;
class OptimizerParamState;
}  // namespace torch::optim

namespace fsdpp::optim {

enum class OptimizerKind { ADAMW, ADAM, SGD, RMSPROP, ADAGRAD };

// "AdamW", "Adam", "SGD", "RMSprop", "Adagrad": the names checkpoints record.
const char* to_string(OptimizerKind kind);
// The kind of a LibTorch optimizer (AdamW is told from Adam); nullopt for any other.
std::optional<OptimizerKind> optimizer_kind(const torch::optim::Optimizer& optimizer);
// "torch::optim::AdamW, Adam, SGD, RMSprop and Adagrad", for error messages.
const char* supported_optimizers();

// Every state tensor the kind may keep per parameter, in a fixed order (see above).
const std::vector<std::string>& state_names(OptimizerKind kind);

// What decides which of those a step creates.
struct StateConfig {
  bool amsgrad = false;   // AdamW, Adam: max_exp_avg_sq
  bool momentum = false;  // SGD, RMSprop: momentum_buffer
  bool centered = false;  // RMSprop: grad_avg
};
// From a param group's options (which must be the options of `kind`).
StateConfig state_config(const torch::optim::OptimizerOptions& options, OptimizerKind kind);
// The state tensors a parameter holds after its first step, in state_names() order.
std::vector<std::string> created_state_names(OptimizerKind kind, const StateConfig& config);

// One parameter's state entry, tensor by tensor. Throws fsdpp::Error when `state` is not the
// kind's own state type (is_state_of tells first).
bool is_state_of(const torch::optim::OptimizerParamState& state, OptimizerKind kind);
struct StateTensorRef {
  const std::string& name;
  at::Tensor& tensor;  // undefined (or empty) when the kind does not keep it for this parameter
};
std::vector<StateTensorRef> state_tensors(torch::optim::OptimizerParamState& state,
                                          OptimizerKind kind);
// A new, empty state entry of the kind's type (no tensors, step 0).
std::unique_ptr<torch::optim::OptimizerParamState> new_param_state(OptimizerKind kind);

// One parameter's state as values: its step (0 for SGD) and the tensors that hold data.
struct ParamState {
  int64_t step = 0;
  std::map<std::string, at::Tensor> tensors;  // by state_names() entry; defined, non-empty
};
// The state `optimizer` keeps for `param` (the registered parameter tensor); nullopt when it
// has none yet (before the parameter's first step).
std::optional<ParamState> get_param_state(torch::optim::Optimizer& optimizer, OptimizerKind kind,
                                          const at::Tensor& param);
// Replaces that state (nullopt: removes it). The tensors are used as they are, not copied;
// names must be state_names() entries.
void set_param_state(torch::optim::Optimizer& optimizer, OptimizerKind kind,
                     const at::Tensor& param, const std::optional<ParamState>& state);

}  // namespace fsdpp::optim
