#include "fsdpp/fsdp/grad_scaler.h"

#include <ATen/ATen.h>

#include <map>

#include "fsdp_unit.h"
#include "fsdpp/common/error.h"

namespace fsdpp {

ShardedGradScaler::ShardedGradScaler(torch::nn::Module& root, GradScalerOptions options)
    : ShardedGradScaler(std::vector<torch::nn::Module*>{&root}, options) {}

ShardedGradScaler::ShardedGradScaler(std::vector<torch::nn::Module*> roots,
                                     GradScalerOptions options,
                                     std::vector<std::shared_ptr<dist::ProcessGroup>> agree_over)
    : roots_(std::move(roots)), options_(options), scale_(options.init_scale),
      agree_over_(std::move(agree_over)) {
  FSDPP_CHECK_AS(ConfigError,
                 options_.init_scale > 0 && options_.growth_factor > 1 &&
                     options_.backoff_factor > 0 && options_.backoff_factor < 1 &&
                     options_.growth_interval >= 1,
                 "[fsdp] GradScalerOptions: init_scale={} must be > 0, growth_factor={} > 1, "
                 "backoff_factor={} in (0, 1) and growth_interval={} >= 1",
                 options_.init_scale, options_.growth_factor, options_.backoff_factor,
                 options_.growth_interval);
  FSDPP_CHECK(!roots_.empty(), "[fsdp] ShardedGradScaler needs at least one root module");
  for (auto* root : roots_) {
    FSDPUnit* unit = find_unit(*root);
    FSDPP_CHECK(unit && unit->is_root(),
                "[fsdp] ShardedGradScaler needs the root module given to fully_shard; '{}' is not "
                "a root unit",
                root->name());
  }
  if (agree_over_.empty()) {
    // The first root's mesh, along each dim in turn, covers every rank FSDP spans.
    const auto& mesh = *find_unit(*roots_.front())->options().mesh;
    for (int d = 0; d < mesh.ndim(); ++d) agree_over_.push_back(mesh.group(d));
  }
}

at::Tensor ShardedGradScaler::scale(const at::Tensor& loss) const {
  if (!options_.enabled) return loss;
  return loss * scale_;
}

bool ShardedGradScaler::unscale_() {
  if (!options_.enabled) return true;
  FSDPP_CHECK(!found_inf_, "[fsdp] ShardedGradScaler::unscale_() was already called this step; "
              "call update() after step() to begin the next one");
  at::NoGradGuard no_grad;
  // One fused check-and-divide per device over this rank's gradient shards.
  std::map<std::string, std::vector<at::Tensor>> by_device;
  for (auto* r : roots_) {
    for (auto* u : find_unit(*r)->all_units()) {
      for (const auto& p : u->params()) {
        auto g = p->param.grad();
        if (g.defined()) by_device[g.device().str()].push_back(g);
      }
    }
  }
  auto found = at::zeros({1}, at::TensorOptions().dtype(at::kFloat));
  for (auto& [dev, grads] : by_device) {
    const auto opts = grads.front().options().dtype(at::kFloat);
    auto found_dev = at::zeros({1}, opts);
    auto inv_scale = at::full({1}, 1.0 / scale_, opts);
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_dev, inv_scale);
    found.add_(found_dev.cpu());
  }
  // Every rank's verdict: along each group in turn (a mesh's dims cover the whole mesh).
  for (const auto& group : agree_over_) {
    if (group && group->size() > 1) group->all_reduce(found, dist::ReduceOp::MAX, {"grad_scaler"});
  }
  found_inf_ = found.item<float>() > 0;
  return !*found_inf_;
}

bool ShardedGradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  if (!found_inf_) unscale_();
  if (*found_inf_) return false;
  optimizer.step();
  return true;
}

void ShardedGradScaler::update() {
  if (!options_.enabled) return;
  FSDPP_CHECK(found_inf_, "[fsdp] ShardedGradScaler::update() before unscale_() or step() in "
              "this step");
  if (*found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    ++skipped_;
  } else if (++growth_tracker_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  found_inf_.reset();
}

void ShardedGradScaler::load_state(const GradScalerState& s) {
  FSDPP_CHECK_AS(CheckpointError, s.scale > 0 && s.growth_tracker >= 0,
                 "[fsdp] grad scaler state scale={} growth_tracker={}: expected scale > 0 and "
                 "growth_tracker >= 0",
                 s.scale, s.growth_tracker);
  scale_ = s.scale;
  growth_tracker_ = s.growth_tracker;
  found_inf_.reset();
}

}  // namespace fsdpp
