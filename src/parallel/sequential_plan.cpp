// The plan of a chain of units (torch::nn::Sequential). See include/fsdpp/parallel/sequential_plan.h.
#include "fsdpp/parallel/sequential_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/pipeline/blocks.h"
#include "fsdpp/tp/linear.h"
#include "fsdpp/tp/split_dims.h"

namespace fsdpp::parallel {
namespace {

std::string child_path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

class SequentialPlan;

// One unit of the chain, called as the plan's styles say; it lives as long as the plan, as
// fsdpp::forward's recomputation of a checkpointed unit needs.
struct Unit {
  SequentialPlan* plan;
  std::string path;
  torch::nn::AnyModule any;
  at::Tensor forward(const at::Tensor& x);
};

// Units [begin, end) of the Sequential at `path` ("" for the model), in order.
struct Run {
  SequentialPlan* plan;
  std::string path;
  int64_t begin, end;
  at::Tensor forward(const at::Tensor& x);
};

class SequentialPlan final : public models::ModelPlan {
 public:
  SequentialPlan(torch::nn::Sequential model, SequentialPlanOptions o)
      : model_(std::move(model)), o_(std::move(o)) {
    FSDPP_CHECK_AS(ConfigError, !model_.is_empty() && model_->size() > 0,
                   "[parallel] sequential_plan '{}': the model has no units; expected a "
                   "torch::nn::Sequential of at least one", o_.name);
    FSDPP_CHECK_AS(ConfigError, static_cast<bool>(o_.loss),
                   "[parallel] sequential_plan '{}': no loss; expected loss(output, targets)", o_.name);
    collect(*model_, "");
    check_tensor_parallel();
    whole_ = std::make_unique<Run>(Run{this, "", 0, static_cast<int64_t>(model_->size())});
  }

  torch::nn::Module& module() override { return *model_; }
  std::string name() const override { return o_.name; }

  models::StageLoss loss(const at::Tensor& inputs, const at::Tensor& targets) override {
    return {final_loss(fsdpp::detail::forward_as(*model_, *whole_, inputs), targets), {}};
  }

  int64_t pipeline_units() const override { return static_cast<int64_t>(model_->size()); }
  std::string describe_pipeline_units() const override {
    return fmt::format("the children of sequential_plan '{}'", o_.name);
  }

  std::vector<models::ModelStage> split(const std::vector<int>& units_per_stage) override {
    std::vector<pipeline::BlockRange> ranges;
    int64_t begin = 0;
    for (int n : units_per_stage) {
      ranges.push_back({begin, begin + n});
      begin += n;
    }
    std::vector<models::ModelStage> out;
    const auto stages = pipeline::split_blocks(model_, ranges);
    for (size_t i = 0; i < stages.size(); ++i) {
      models::ModelStage s;
      s.module = stages[i].ptr();
      auto run = std::make_shared<Run>(Run{this, "", ranges[i].begin, ranges[i].end});
      s.forward = [module = s.module, run](const at::Tensor& x) {
        return fsdpp::detail::forward_as(*module, *run, x);
      };
      if (i + 1 == stages.size()) {
        // The user's loss, or a step's objective in its place (Parallelized::forward_backward).
        s.loss = [this](const at::Tensor& y, const at::Tensor& t, const models::TokenLoss& objective) {
          return models::StageLoss{objective ? objective(y, t) : final_loss(y, t), {}};
        };
      }
      out.push_back(std::move(s));
    }
    return out;
  }

  std::vector<std::string> block_classes() const override { return o_.blocks; }

  tp::TensorParallel apply_tensor_parallel(const models::TensorParallelSpec& spec) override {
    FSDPP_CHECK_AS(ConfigError, !spec.sequence_parallel,
                   "[parallel] parallelism.enable_sequence_parallel=true: sequential_plan '{}' "
                   "has no sequence dimension to split; leave it false",
                   o_.name);
    FSDPP_CHECK_AS(ConfigError, !o_.tensor_parallel.empty(),
                   "[parallel] parallelism.tensor_parallel_degree={}: sequential_plan '{}' has no "
                   "tensor-parallel plan (SequentialPlanOptions::tensor_parallel: its Linear units "
                   "COLWISE / ROWWISE); its Linear units are [{}]",
                   spec.group->size(), o_.name, fmt::join(linears_, ", "));
    group_ = spec.group;
    return tp::parallelize_module(*model_, spec.group, o_.tensor_parallel);
  }

  std::optional<std::map<std::string, int64_t>> tensor_parallel_splits() const override {
    return tp::split_dims(*model_, o_.tensor_parallel);
  }

  // Units [begin, end) of the Sequential at `path`.
  at::Tensor run(const std::string& path, int64_t begin, int64_t end, at::Tensor x) {
    const auto& children = sequentials_.at(path);
    for (int64_t i = begin; i < end; ++i) {
      Unit& u = units_.at(children[static_cast<size_t>(i)]);
      x = fsdpp::detail::forward_as(*u.any.ptr(), u, x);
    }
    return x;
  }

  at::Tensor call(Unit& u, const at::Tensor& x) {
    if (sequentials_.count(u.path)) return run(u.path, 0, static_cast<int64_t>(sequentials_.at(u.path).size()), x);
    const auto style = o_.tensor_parallel.find(u.path);
    if (!group_ || style == o_.tensor_parallel.end()) return u.any.forward(x);
    auto& linear = *u.any.ptr()->as<torch::nn::LinearImpl>();
    return style->second == tp::ParallelStyle::COLWISE
               ? tp::column_parallel_linear(x, linear.weight, linear.bias, group_, false, u.path)
               : tp::row_parallel_linear(x, linear.weight, linear.bias, group_, false, u.path);
  }

 private:
  // Every unit by its path, nested Sequentials' too, in the chain's order (leaves_).
  void collect(torch::nn::SequentialImpl& seq, const std::string& prefix) {
    auto& children = sequentials_[prefix];
    const auto names = seq.named_children();
    for (size_t i = 0; i < seq.size(); ++i) {
      const auto path = child_path(prefix, names[i].key());
      units_.emplace(path, Unit{this, path, *(seq.begin() + static_cast<std::ptrdiff_t>(i))});
      children.push_back(path);
      if (auto* nested = names[i].value()->as<torch::nn::SequentialImpl>()) {
        collect(*nested, path);
        continue;
      }
      leaves_.push_back(path);
      if (names[i].value()->as<torch::nn::LinearImpl>()) linears_.push_back(path);
    }
  }

  // Every style names a Linear unit; each COLWISE is closed by a ROWWISE with only parameterless
  // units between them (the activation is split over tp there).
  void check_tensor_parallel() const {
    for (const auto& [path, style] : o_.tensor_parallel) {
      FSDPP_CHECK_AS(ConfigError, std::find(linears_.begin(), linears_.end(), path) != linears_.end(),
                     "[parallel] sequential_plan '{}': tensor_parallel names '{}' ({}), which is "
                     "not a Linear unit of the chain; its Linear units are [{}]",
                     o_.name, path, tp::to_string(style), fmt::join(linears_, ", "));
    }
    std::string open;  // the COLWISE unit whose output is split, if any
    for (const auto& path : leaves_) {
      const auto it = o_.tensor_parallel.find(path);
      const auto& module = *units_.at(path).any.ptr();
      if (it == o_.tensor_parallel.end()) {
        FSDPP_CHECK_AS(ConfigError, open.empty() || module.parameters().empty(),
                       "[parallel] sequential_plan '{}': unit '{}' ({}) has parameters but takes "
                       "the output of COLWISE '{}', which is split over tp; only parameterless "
                       "units (activations) may sit between a COLWISE unit and its ROWWISE one",
                       o_.name, path, module_class_name(module), open);
      } else if (it->second == tp::ParallelStyle::COLWISE) {
        FSDPP_CHECK_AS(ConfigError, open.empty(),
                       "[parallel] sequential_plan '{}': COLWISE '{}' follows COLWISE '{}' without "
                       "a ROWWISE unit between them; pair each COLWISE with the next ROWWISE",
                       o_.name, path, open);
        open = path;
      } else {
        FSDPP_CHECK_AS(ConfigError, !open.empty(),
                       "[parallel] sequential_plan '{}': ROWWISE '{}' has no COLWISE unit before "
                       "it; its input must be the split output of one",
                       o_.name, path);
        open.clear();
      }
    }
    FSDPP_CHECK_AS(ConfigError, open.empty(),
                   "[parallel] sequential_plan '{}': COLWISE '{}' is not followed by a ROWWISE "
                   "unit; the chain's output would be split over tp",
                   o_.name, open);
  }

  // The loss of the chain's output, float32 under mixed precision.
  at::Tensor final_loss(const at::Tensor& y, const at::Tensor& targets) {
    const bool low = y.is_floating_point() && c10::elementSize(y.scalar_type()) < 4;
    return o_.loss(low ? y.to(at::kFloat) : y, targets);
  }

  torch::nn::Sequential model_;
  SequentialPlanOptions o_;
  std::map<std::string, Unit> units_;                            // stable addresses
  std::map<std::string, std::vector<std::string>> sequentials_;  // path -> its units' paths
  std::vector<std::string> leaves_, linears_;
  std::unique_ptr<Run> whole_;
  tp::GroupPtr group_;  // set by apply_tensor_parallel
};

at::Tensor Unit::forward(const at::Tensor& x) { return plan->call(*this, x); }
at::Tensor Run::forward(const at::Tensor& x) { return plan->run(path, begin, end, x); }

}  // namespace

std::shared_ptr<models::ModelPlan> sequential_plan(torch::nn::Sequential model, SequentialPlanOptions options) {
  return std::make_shared<SequentialPlan>(std::move(model), std::move(options));
}

}  // namespace fsdpp::parallel
