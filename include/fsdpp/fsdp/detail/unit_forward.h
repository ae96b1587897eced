#pragma once
// fsdpp::forward's machinery (fully_shard.h): the unit's hooks around a module's call, the visit
// of a result's tensors that lets FSDP hook their backward, and activation checkpointing of one
// call. Not an API: fully_shard.h's templates and the layers above (pipeline stages, models)
// call it.

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace fsdpp {

class FSDPUnit;
namespace detail {
FSDPUnit* unit_of(torch::nn::Module& module);
void pre_forward(FSDPUnit& unit);
std::vector<at::Tensor> post_forward(FSDPUnit& unit, std::vector<at::Tensor> outputs);
void forward_failed(FSDPUnit& unit);
// Inside a catch: rethrows the exception a unit's forward threw. A LibTorch error (c10::Error)
// becomes an fsdpp::Error naming the unit, with its first line only and, for mixed dtypes, the
// units whose output_dtype handed this one another dtype than its parameters'; fsdpp's own
// errors and others pass unchanged.
[[noreturn]] void rethrow_forward_error(FSDPUnit& unit);

// Visits the tensors of a forward's result so that FSDP can hook its backward. Tensors,
// tuples, pairs and vectors of them are known; for a struct, define
// `template <class F> void fsdpp_visit_tensors(MyOutput& out, F&& f)` calling f on each tensor
// member (found by argument-dependent lookup).
template <typename F>
void visit_tensors(at::Tensor& t, F&& f) { f(t); }
template <typename F>
void visit_tensors(std::vector<at::Tensor>& v, F&& f) { for (auto& t : v) f(t); }
template <typename F, typename... Ts>
void visit_tensors(std::tuple<Ts...>& t, F&& f);
template <typename F, typename A, typename B>
void visit_tensors(std::pair<A, B>& p, F&& f);
template <typename T, typename F>
auto visit_tensors(T& value, F&& f) -> decltype(fsdpp_visit_tensors(value, f), void()) {
  fsdpp_visit_tensors(value, f);
}
template <typename T, typename F>
void visit_tensors_or_skip(T& value, F&& f) {
  if constexpr (requires { visit_tensors(value, f); }) visit_tensors(value, f);
}
template <typename F, typename... Ts>
void visit_tensors(std::tuple<Ts...>& t, F&& f) {
  std::apply([&](auto&... e) { (visit_tensors_or_skip(e, f), ...); }, t);
}
template <typename F, typename A, typename B>
void visit_tensors(std::pair<A, B>& p, F&& f) {
  visit_tensors_or_skip(p.first, f);
  visit_tensors_or_skip(p.second, f);
}

template <typename M>
torch::nn::Module& as_module(M& m) {
  if constexpr (std::is_base_of_v<torch::nn::Module, std::remove_cv_t<M>>) {
    return m;
  } else {
    return *m;  // ModuleHolder or std::shared_ptr
  }
}
template <typename M>
auto& impl_of(M& m) {
  if constexpr (std::is_base_of_v<torch::nn::Module, std::remove_cv_t<M>>) {
    return m;
  } else {
    return *m;
  }
}
}  // namespace detail

namespace detail {
class CheckpointMarker;
CheckpointMarker* checkpoint_marker_of(torch::nn::Module& module);
at::Tensor cast_forward_input(FSDPUnit& unit, const at::Tensor& t);
using RecomputeFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
// Runs fn(inputs) without keeping its activations; backward runs it again (see checkpoint.h).
std::vector<at::Tensor> run_checkpointed(CheckpointMarker& marker, RecomputeFn fn,
                                         const std::vector<at::Tensor>& inputs);
bool grad_mode_enabled();

template <typename A>
decltype(auto) cast_arg(FSDPUnit& unit, A&& a) {
  if constexpr (std::is_same_v<std::decay_t<A>, at::Tensor>) {
    return at::Tensor(cast_forward_input(unit, a));
  } else {
    return std::forward<A>(a);
  }
}

template <typename Impl, typename... Args>
auto forward_unit(FSDPUnit* unit, Impl& impl, Args&&... args) {
  if (!unit) return impl.forward(std::forward<Args>(args)...);
  pre_forward(*unit);
  try {
    auto out = impl.forward(cast_arg(*unit, std::forward<Args>(args))...);
    std::vector<at::Tensor> flat;
    visit_tensors(out, [&](at::Tensor& t) { flat.push_back(t); });
    flat = post_forward(*unit, std::move(flat));
    size_t i = 0;
    visit_tensors(out, [&](at::Tensor& t) { t = flat[i++]; });
    return out;
  } catch (...) {
    forward_failed(*unit);
    rethrow_forward_error(*unit);
  }
}

// Activation checkpointing of one call: the tensor arguments become the checkpoint's inputs,
// the other arguments are kept by value for the recomputation, and the result keeps its type.
template <typename Impl, typename... Args>
auto forward_checkpointed(CheckpointMarker& marker, FSDPUnit* unit, Impl& impl, Args&&... args) {
  using Out = decltype(impl.forward(std::forward<Args>(args)...));
  auto saved = std::make_shared<std::tuple<std::decay_t<Args>...>>(args...);
  std::vector<at::Tensor> inputs;
  std::apply([&](auto&... a) {
    ((void)[&](auto& x) {
      if constexpr (std::is_same_v<std::decay_t<decltype(x)>, at::Tensor>) inputs.push_back(x);
    }(a), ...);
  }, *saved);
  auto first = std::make_shared<std::optional<Out>>();  // the first run's result, for its shape
  auto calls = std::make_shared<int>(0);
  Impl* self = &impl;
  RecomputeFn fn = [saved, first, calls, unit, self](const std::vector<at::Tensor>& in) {
    auto args_copy = *saved;
    size_t i = 0;
    std::apply([&](auto&... a) {
      ((void)[&](auto& x) {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, at::Tensor>) x = in[i++];
      }(a), ...);
    }, args_copy);
    Out out = std::apply([&](auto&... a) { return forward_unit(unit, *self, a...); }, args_copy);
    std::vector<at::Tensor> flat;
    visit_tensors(out, [&](at::Tensor& t) { flat.push_back(t); });
    if ((*calls)++ == 0) first->emplace(std::move(out));
    return flat;
  };
  auto flat = run_checkpointed(marker, std::move(fn), inputs);
  Out out = std::move(**first);
  first->reset();  // the recomputation must not keep the first result alive
  size_t i = 0;
  visit_tensors(out, [&](at::Tensor& t) { t = flat[i++]; });
  return out;
}

// fsdpp::forward for a module whose forward is called through `impl` (an object with
// forward(args...) that lives as long as the module: the Impl itself, or for a type-erased
// torch::nn::AnyModule a caller of its own, as pipeline::BlockStage has).
template <typename Impl, typename... Args>
auto forward_as(torch::nn::Module& mod, Impl& impl, Args&&... args) {
  FSDPUnit* unit = unit_of(mod);
  if (auto* marker = checkpoint_marker_of(mod); marker && grad_mode_enabled()) {
    return forward_checkpointed(*marker, unit, impl, std::forward<Args>(args)...);
  }
  return forward_unit(unit, impl, std::forward<Args>(args)...);
}
}  // namespace detail

}  // namespace fsdpp
