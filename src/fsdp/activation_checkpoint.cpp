#include "fsdpp/fsdp/activation_checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/ivalue.h>
#include <torch/autograd.h>

#include <algorithm>
#include <mutex>

#include "activation_checkpoint_region.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/wrap_policy.h"

namespace fsdpp {
namespace detail {

namespace {
thread_local CheckpointPhase tl_phase = CheckpointPhase::NONE;
thread_local const void* tl_owner = nullptr;
thread_local KeptProducts* tl_kept = nullptr;
}  // namespace

KeptProducts* kept_products() { return tl_kept; }
KeptProductsGuard::KeptProductsGuard(KeptProducts* products) : previous_(tl_kept) {
  tl_kept = products;
}
KeptProductsGuard::~KeptProductsGuard() { tl_kept = previous_; }

CheckpointPhase checkpoint_phase() { return tl_phase; }
const void* recomputing() { return tl_phase == CheckpointPhase::RECOMPUTE ? tl_owner : nullptr; }
CheckpointPhaseGuard::CheckpointPhaseGuard(CheckpointPhase phase, const void* owner)
    : previous_(tl_phase), previous_owner_(tl_owner) {
  tl_phase = phase;
  tl_owner = owner;
}
CheckpointPhaseGuard::~CheckpointPhaseGuard() {
  tl_phase = previous_;
  tl_owner = previous_owner_;
}

// A child module that marks its parent for checkpointing (LibTorch modules have no attributes
// of ours; a child goes where the module goes).
class CheckpointMarker : public torch::nn::Module {
 public:
  static constexpr const char* kChildName = "_fsdp_checkpoint";
  explicit CheckpointMarker(CheckpointOptions o)
      : torch::nn::Module("CheckpointMarker"), options(o) {}
  CheckpointOptions options;
};

CheckpointMarker* checkpoint_marker_of(torch::nn::Module& module) {
  for (const auto& child : module.named_children()) {
    if (child.key() == CheckpointMarker::kChildName) {
      return dynamic_cast<CheckpointMarker*>(child.value().get());
    }
  }
  return nullptr;
}

bool grad_mode_enabled() { return at::GradMode::is_enabled(); }

}  // namespace detail

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct RngState {
  at::Tensor cpu;
  std::vector<std::pair<at::Device, at::Tensor>> devices;
};

RngState capture_rng(const std::vector<at::Tensor>& inputs) {
  RngState s;
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    s.cpu = gen.get_state();
  }
  for (const auto& t : inputs) {
    if (!t.defined() || t.is_cpu()) continue;
    const auto dev = t.device();
    if (std::any_of(s.devices.begin(), s.devices.end(), [&](const auto& d) { return d.first == dev; })) continue;
    auto gen = at::globalContext().defaultGenerator(dev);
    std::lock_guard<std::mutex> lock(gen.mutex());
    s.devices.emplace_back(dev, gen.get_state());
  }
  return s;
}

void restore_rng(const RngState& s) {
  if (!s.cpu.defined()) return;
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(s.cpu);
  }
  for (const auto& [dev, state] : s.devices) {
    auto gen = at::globalContext().defaultGenerator(dev);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
  }
}

struct RecomputeState : torch::CustomClassHolder {
  detail::RecomputeFn fn;
  const void* owner = nullptr;  // the marker of the module recomputed (detail::recomputing())
  CheckpointOptions options;
  RngState rng;
  std::vector<bool> needs_grad;
  detail::KeptProducts kept;  // options.keep_products: the first forward's products
};

// Reentrant checkpointing: forward runs fn without grad and saves only the inputs; backward
// runs fn again with grad on detached copies of them and back-propagates through that graph,
// which accumulates the parameters' gradients (firing FSDP's hooks) and the inputs' ones.
struct CheckpointFn : public torch::autograd::Function<CheckpointFn> {
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<RecomputeState> state,
                               at::TensorList inputs) {
    auto in = inputs.vec();
    state->needs_grad.clear();
    for (const auto& t : in) state->needs_grad.push_back(t.defined() && t.requires_grad());
    if (state->options.preserve_rng_state) state->rng = capture_rng(in);
    ctx->save_for_backward(in);
    std::vector<at::Tensor> outs;
    {
      detail::CheckpointPhaseGuard phase(detail::CheckpointPhase::FORWARD);
      detail::KeptProductsGuard keep(state->options.keep_products ? &state->kept : nullptr);
      outs = state->fn(in);
    }
    for (const auto& o : outs) {
      FSDPP_CHECK(o.defined(), "[checkpoint] the checkpointed function returned an undefined "
                  "tensor; return defined tensors only");
      if (!o.is_floating_point() && !o.is_complex()) ctx->mark_non_differentiable({o});
    }
    ctx->saved_data["state"] = at::IValue::make_capsule(std::move(state));
    return outs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto state =
        c10::static_intrusive_pointer_cast<RecomputeState>(ctx->saved_data["state"].toCapsule());
    auto saved = ctx->get_saved_variables();
    std::vector<at::Tensor> inputs;
    inputs.reserve(saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      if (!saved[i].defined()) {
        inputs.emplace_back();
        continue;
      }
      auto d = saved[i].detach();
      if (state->needs_grad[i]) d.requires_grad_(true);
      inputs.push_back(std::move(d));
    }
    std::vector<at::Tensor> outs;
    {
      RngState now;
      if (state->options.preserve_rng_state) {
        now = capture_rng(inputs);
        restore_rng(state->rng);
      }
      at::AutoGradMode grad(true);
      detail::CheckpointPhaseGuard phase(detail::CheckpointPhase::RECOMPUTE, state->owner);
      state->kept.next = 0;
      detail::KeptProductsGuard keep(state->options.keep_products ? &state->kept : nullptr);
      try {
        outs = state->fn(inputs);
      } catch (...) {
        restore_rng(now);
        throw;
      }
      restore_rng(now);
    }
    FSDPP_CHECK(state->kept.next == state->kept.tensors.size(),
                "[checkpoint] selective checkpointing: the recomputation took {} of the {} "
                "products its first forward kept; a checkpointed forward must run the same "
                "projections in the same order",
                state->kept.next, state->kept.tensors.size());
    state->kept.tensors.clear();  // the recomputed graph holds what it still needs
    FSDPP_CHECK(outs.size() == grad_outputs.size(),
                "[checkpoint] the recomputed forward returned {} tensors where the first forward "
                "returned {}; a checkpointed forward must be deterministic in its structure",
                outs.size(), grad_outputs.size());
    variable_list roots, grads;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (outs[i].requires_grad() && grad_outputs[i].defined()) {
        roots.push_back(outs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, grads);
    variable_list result;
    result.reserve(inputs.size() + 1);
    result.emplace_back();  // the state argument
    for (size_t i = 0; i < inputs.size(); ++i) {
      result.push_back(state->needs_grad[i] ? inputs[i].grad() : at::Tensor());
    }
    return result;
  }
};

}  // namespace

namespace detail {
std::vector<at::Tensor> checkpoint_of(const void* owner, const RecomputeFn& fn,
                                      const std::vector<at::Tensor>& inputs, const CheckpointOptions& options) {
  if (!at::GradMode::is_enabled()) return fn(inputs);
  auto state = c10::make_intrusive<RecomputeState>();
  state->fn = fn;
  state->owner = owner;
  state->options = options;
  return CheckpointFn::apply(std::move(state), at::TensorList(inputs));
}

std::vector<at::Tensor> run_checkpointed(CheckpointMarker& marker, RecomputeFn fn,
                                         const std::vector<at::Tensor>& inputs) {
  return checkpoint_of(&marker, fn, inputs, marker.options);
}
}  // namespace detail

std::vector<at::Tensor> checkpoint(
    const std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>& fn,
    const std::vector<at::Tensor>& inputs, const CheckpointOptions& options) {
  return detail::checkpoint_of(nullptr, fn, inputs, options);
}

bool checkpoint_module(torch::nn::Module& module, const CheckpointOptions& options) {
  if (detail::checkpoint_marker_of(module)) return false;
  module.register_module(detail::CheckpointMarker::kChildName,
                         std::make_shared<detail::CheckpointMarker>(options));
  return true;
}

std::vector<std::string> apply_activation_checkpointing(
    torch::nn::Module& root,
    const std::function<bool(const std::string&, torch::nn::Module&)>& check_fn,
    const CheckpointOptions& options) {
  std::vector<std::string> marked;
  // Collected first: marking adds children, which must not disturb the walk.
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> candidates;
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    if (dynamic_cast<detail::CheckpointMarker*>(item.value().get())) continue;
    candidates.emplace_back(item.key(), item.value());
  }
  for (auto& [name, m] : candidates) {
    if (check_fn(name, *m) && checkpoint_module(*m, options)) marked.push_back(name);
  }
  return marked;
}

std::vector<std::string> apply_activation_checkpointing(
    torch::nn::Module& root, const std::vector<std::string>& class_names, int every_k,
    const CheckpointOptions& options) {
  FSDPP_CHECK_AS(ConfigError, every_k >= 1,
                 "[checkpoint] every_k={} must be >= 1 (1 checkpoints every matching module)",
                 every_k);
  FSDPP_CHECK_AS(ConfigError, !class_names.empty(),
                 "[checkpoint] apply_activation_checkpointing needs at least one class name");
  int seen = 0;
  auto marked = apply_activation_checkpointing(
      root,
      [&](const std::string&, torch::nn::Module& m) {
        const bool match = std::any_of(class_names.begin(), class_names.end(),
                                       [&](const std::string& n) { return module_class_is(m, n); });
        return match && seen++ % every_k == 0;
      },
      options);
  FSDPP_CHECK_AS(ConfigError, seen > 0,
                 "[checkpoint] no module under '{}' has class {}; nothing to checkpoint. The "
                 "classes there: {} (with or without \"Impl\", with or without the namespace)",
                 module_class_name(root), fmt::format("{}", fmt::join(class_names, ", ")),
                 fmt::format("{}", fmt::join(module_classes(root), ", ")));
  return marked;
}

}  // namespace fsdpp
