// The learned projections of the intermediate-layer loss (layer_projection.h).
#include "fsdpp/distill/layer_projection.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cmath>
#include <sstream>

#include "fsdpp/common/error.h"
#include "fsdpp/optim/optimizer_state.h"

namespace fs = std::filesystem;

namespace fsdpp::distill {
namespace {

std::string key(const std::pair<int64_t, int64_t>& pair, const std::string& what) {
  return fmt::format("{}_{}_{}", pair.first, pair.second, what);
}

}  // namespace

LayerProjections::LayerProjections(config::Choice<LayerProjection> mode,
                                   std::vector<std::pair<int64_t, int64_t>> pairs,
                                   int64_t student_width, int64_t teacher_width, uint64_t seed,
                                   at::Device device)
    : pairs_(std::move(pairs)) {
  const bool differ = student_width != teacher_width;
  FSDPP_CHECK_AS(ConfigError, !(differ && mode == LayerProjection::NONE),
                 "[config] distillation.layer_map: the student's hidden states are {} wide and "
                 "the teacher's {}, and distillation.layer_projection=none compares them as they "
                 "are; set distillation.layer_projection=auto (a learned {} -> {} linear map per "
                 "pair) or map layers of the same width",
                 student_width, teacher_width, student_width, teacher_width);
  const bool project = mode == LayerProjection::LINEAR || (mode == LayerProjection::AUTO && differ);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double bound = 1.0 / std::sqrt(static_cast<double>(student_width));
  for (size_t i = 0; i < pairs_.size(); ++i) {
    if (!project) {
      weights_.emplace_back();
      continue;
    }
    auto w = at::empty({teacher_width, student_width}, at::kFloat).uniform_(-bound, bound, gen);
    weights_.push_back(w.to(device).requires_grad_(true));
  }
}

std::vector<at::Tensor> LayerProjections::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& w : weights_) {
    if (w.defined()) out.push_back(w);
  }
  return out;
}

std::string LayerProjections::describe() const {
  const auto params = parameters();
  if (params.empty()) return "";
  return fmt::format("{} x ({}, {})", params.size(), params.front().size(0), params.front().size(1));
}

void LayerProjections::average_gradients(dist::ProcessGroup& group) const {
  const auto params = parameters();
  if (params.empty() || group.size() == 1) return;
  // One all-reduce for all of them (a weight no backward reached counts as a zero gradient).
  std::vector<at::Tensor> pieces;
  for (const auto& w : params) {
    pieces.push_back(w.grad().defined() ? w.grad().reshape({-1}) : at::zeros({w.numel()}, w.options()));
  }
  auto flat = at::cat(pieces);
  group.all_reduce(flat, dist::ReduceOp::AVG, {"layer_projection_grads"});
  int64_t offset = 0;
  for (const auto& w : params) {
    const auto avg = flat.narrow(0, offset, w.numel()).view_as(w);
    if (w.grad().defined()) {
      w.grad().copy_(avg);
    } else {
      w.mutable_grad() = avg.clone();
    }
    offset += w.numel();
  }
}

std::string LayerProjections::serialize(torch::optim::Optimizer* opt) const {
  torch::serialize::OutputArchive archive;
  const auto kind = opt ? optim::optimizer_kind(*opt) : std::nullopt;
  for (size_t i = 0; i < pairs_.size(); ++i) {
    if (!weights_[i].defined()) continue;
    archive.write(key(pairs_[i], "weight"), weights_[i].detach().cpu());
    if (!kind) continue;
    const auto st = optim::get_param_state(*opt, *kind, weights_[i]);
    if (!st) continue;  // not stepped yet
    archive.write(key(pairs_[i], "step"), at::scalar_tensor(st->step, at::kLong));
    for (const auto& [name, t] : st->tensors) archive.write(key(pairs_[i], name), t.cpu());
  }
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

std::optional<std::string> LayerProjections::restore(const fs::path& dir,
                                                     torch::optim::Optimizer* opt) const {
  if (parameters().empty()) return std::nullopt;
  const auto path = dir / kProjectionFile;
  const auto fresh = [&](const std::string& why) {
    return fmt::format("[train] warning: {}: distillation.layer_projection's {} start from their "
                       "initial values (drawn from training.seed), with no AdamW state",
                       why, describe());
  };
  if (!fs::exists(path)) {
    return fresh(fmt::format("{} holds no {} (saved by a run without learned layer projections, "
                             "or by a version of fsdpp that did not save them)",
                             dir.string(), kProjectionFile));
  }
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path.string());
  } catch (const c10::Error& e) {
    FSDPP_THROW(CheckpointError, "[train] '{}' is not a layer projection file: {}", path.string(),
                e.what_without_backtrace());
  }
  const auto kind = opt ? optim::optimizer_kind(*opt) : std::nullopt;
  at::NoGradGuard no_grad;
  // Everything read and checked before anything changes.
  std::vector<at::Tensor> loaded(weights_.size());
  std::vector<std::optional<optim::ParamState>> states(weights_.size());
  for (size_t i = 0; i < pairs_.size(); ++i) {
    const auto& w = weights_[i];
    if (!w.defined()) continue;
    const auto [s, t] = pairs_[i];
    if (!archive.try_read(key(pairs_[i], "weight"), loaded[i])) {
      return fresh(fmt::format("'{}' holds no projection for distillation.layer_map's pair {}:{} "
                               "(the checkpoint was saved with another layer_map)",
                               path.string(), s, t));
    }
    if (loaded[i].sizes() != w.sizes()) {
      return fresh(fmt::format("'{}': the projection of pair {}:{} is {} (teacher width x student "
                               "width) and this run's is {} (the checkpoint was saved with "
                               "another teacher or student width)",
                               path.string(), s, t, loaded[i].sizes().vec(), w.sizes().vec()));
    }
    at::Tensor step;
    if (!kind || !archive.try_read(key(pairs_[i], "step"), step)) continue;  // save_only_model
    optim::ParamState st;
    st.step = step.item<int64_t>();
    for (const auto& name : optim::state_names(*kind)) {
      at::Tensor v;
      if (!archive.try_read(key(pairs_[i], name), v)) continue;
      FSDPP_CHECK_AS(CheckpointError, v.sizes() == w.sizes(),
                     "[train] '{}': optimizer state '{}' of pair {}:{} is {}; expected {}",
                     path.string(), name, s, t, v.sizes().vec(), w.sizes().vec());
      st.tensors[name] = v.to(w.device(), w.scalar_type());
    }
    states[i] = std::move(st);
  }
  for (size_t i = 0; i < weights_.size(); ++i) {
    if (!weights_[i].defined()) continue;
    weights_[i].copy_(loaded[i]);
    if (kind) optim::set_param_state(*opt, *kind, weights_[i], states[i]);
  }
  return std::nullopt;
}

}  // namespace fsdpp::distill
