// The BatchSources the trainer comes with (batch_source.h): token windows (token_batches.h,
// token_data) and in-memory tensors (tensor_data).
#include <utility>

#include <fmt/ranges.h>

#include "fsdpp/common/error.h"
#include "fsdpp/data/tensor_sampler.h"
#include "fsdpp/train/token_data.h"
#include "token_batches.h"

namespace fsdpp::train {
namespace detail {

TokenBatches::TokenBatches(data::PlannedSampler& sampler, data::BatchLoaderOptions options)
    : sampler_(sampler), options_(std::move(options)) {}

Batch TokenBatches::next(int64_t batch_size) {
  FSDPP_CHECK(batch_size == options_.batch_size,
              "[train] token batches of {} rows asked of a loader made for {}", batch_size,
              options_.batch_size);
  if (!loader_) loader_.emplace(sampler_, options_);
  auto b = loader_->next_batch();
  return {std::move(b.inputs), std::move(b.targets), std::move(b.starts), std::move(b.positions)};
}

data::SamplerState TokenBatches::state() const {
  return loader_ ? loader_->state() : sampler_.state();
}

void TokenBatches::load_state(const data::SamplerState& state) {
  FSDPP_CHECK(!loader_, "[train] the token batches' position is set before the first batch");
  sampler_.load_state(state);
}

SourceFactory token_windows(data::TokenDataset tokens, int64_t seq_len) {
  return [tokens = std::move(tokens), seq_len](const SourceOptions& o) {
    const data::SamplerOptions so{.seq_len = seq_len, .share = o};
    return std::unique_ptr<train::BatchSource>(
        std::make_unique<SamplerBatches>(std::make_unique<data::DistributedSampler>(tokens, so)));
  };
}

Batch SamplerBatches::next(int64_t batch_size) {
  auto starts = sampler_->plan_batch(batch_size);
  auto b = sampler_->load_batch(starts);
  return {std::move(b.inputs), std::move(b.targets), std::move(starts), std::move(b.positions)};
}

namespace {

// tensor_data's source: (inputs, targets) rows split over the ranks by a TensorSampler.
class TensorBatches : public train::BatchSource {
 public:
  TensorBatches(const at::Tensor& inputs, const at::Tensor& targets, const SourceOptions& o)
      : sampler_({inputs, targets}, o) {}
  Batch next(int64_t batch_size) override {
    auto b = sampler_.next_batch(batch_size);
    return {std::move(b[0]), std::move(b[1]), {}};
  }
  data::SamplerState state() const override { return sampler_.state(); }
  void load_state(const data::SamplerState& state) override { sampler_.load_state(state); }
  int64_t per_rank() const override { return sampler_.examples_per_rank(); }

 private:
  data::TensorSampler sampler_;
};

SourceFactory token_source(data::TokenDataset tokens, int64_t seq_len, const char* which) {
  FSDPP_CHECK_AS(ConfigError, seq_len >= 1 && tokens.size() > seq_len,
                 "[train] token_data: the {} split has {} tokens, no window of seq_len+1={} "
                 "tokens; expected seq_len >= 1 and more tokens",
                 which, tokens.size(), seq_len + 1);
  return token_windows(std::move(tokens), seq_len);
}

SourceFactory tensor_source(at::Tensor inputs, at::Tensor targets, const char* which) {
  FSDPP_CHECK_AS(ConfigError, inputs.defined() && targets.defined() && inputs.dim() >= 1 &&
                                  targets.dim() >= 1 && inputs.size(0) == targets.size(0) &&
                                  inputs.size(0) > 0,
                 "[train] tensor_data: the {} inputs and targets must be tensors with one example "
                 "per row and the same number of rows (> 0); got {} and {}",
                 which, inputs.defined() ? fmt::format("{}", inputs.sizes().vec()) : "undefined",
                 targets.defined() ? fmt::format("{}", targets.sizes().vec()) : "undefined");
  return [inputs = std::move(inputs), targets = std::move(targets)](const SourceOptions& o) {
    return std::make_unique<TensorBatches>(inputs, targets, o);
  };
}

}  // namespace
}  // namespace detail

TrainData tensor_data(at::Tensor inputs, at::Tensor targets, at::Tensor eval_inputs,
                      at::Tensor eval_targets) {
  TrainData d;
  d.description = fmt::format("tensors: {} training examples (inputs {}, targets {})",
                              inputs.defined() ? inputs.size(0) : 0,
                              inputs.defined() ? fmt::format("{}", inputs.sizes().vec()) : "undefined",
                              targets.defined() ? fmt::format("{}", targets.sizes().vec()) : "undefined");
  d.train = detail::tensor_source(std::move(inputs), std::move(targets), "training");
  if (eval_inputs.defined() || eval_targets.defined()) {
    d.description += fmt::format(", {} evaluation examples", eval_inputs.defined() ? eval_inputs.size(0) : 0);
    d.eval = detail::tensor_source(std::move(eval_inputs), std::move(eval_targets), "evaluation");
  }
  return d;
}

TrainData token_data(data::TokenDataset train, int64_t seq_len, std::optional<data::TokenDataset> eval) {
  TrainData d;
  d.description = fmt::format("token windows of {} tokens: {} training tokens", seq_len, train.size());
  d.train = detail::token_source(std::move(train), seq_len, "training");
  if (eval) {
    d.description += fmt::format(", {} evaluation tokens", eval->size());
    d.eval = detail::token_source(std::move(*eval), seq_len, "evaluation");
  }
  return d;
}

}  // namespace fsdpp::train
