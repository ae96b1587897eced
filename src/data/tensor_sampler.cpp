#include "fsdpp/data/tensor_sampler.h"

#include <ATen/ops/from_blob.h>
#include <ATen/ops/index_select.h>

#include "fsdpp/common/error.h"

namespace fsdpp::data {

TensorSampler::TensorSampler(std::vector<at::Tensor> tensors, TensorSamplerOptions options)
    : tensors_(std::move(tensors)), options_(options) {
  FSDPP_CHECK_AS(ConfigError, !tensors_.empty(),
                 "[data] a tensor dataset needs at least one tensor; got none");
  FSDPP_CHECK_AS(ConfigError, options_.world_size >= 1 && options_.rank >= 0 &&
                                  options_.rank < options_.world_size,
                 "[data] tensor sampler rank={} of world_size={} is out of range; expected "
                 "0 <= rank < world_size",
                 options_.rank, options_.world_size);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    FSDPP_CHECK_AS(ConfigError, t.defined() && t.dim() >= 1,
                   "[data] tensor {} of the dataset has no first dimension; expected one "
                   "example per row of dimension 0",
                   i);
    FSDPP_CHECK_AS(ConfigError, t.size(0) == tensors_[0].size(0),
                   "[data] tensor {} of the dataset has {} rows, tensor 0 has {}; expected one "
                   "row per example in every tensor",
                   i, t.size(0), tensors_[0].size(0));
  }
  num_examples_ = tensors_[0].size(0);
  examples_per_rank_ = num_examples_ / options_.world_size;
  FSDPP_CHECK_AS(ConfigError, examples_per_rank_ >= 1,
                 "[data] the tensor dataset has {} examples, fewer than world_size={}; expected "
                 "at least one example per rank",
                 num_examples_, options_.world_size);
}

std::vector<int64_t> TensorSampler::examples(int64_t epoch) const {
  return rank_order(num_examples_, epoch, options_.rank, options_.world_size, options_.seed,
                    options_.shuffle);
}

std::vector<at::Tensor> TensorSampler::next_batch(int64_t batch_size) {
  FSDPP_CHECK_AS(ConfigError, batch_size >= 1,
                 "[data] batch_size={} is not positive; expected >= 1", batch_size);
  std::vector<int64_t> picked(static_cast<size_t>(batch_size));
  for (auto& i : picked) {
    if (state_.position == examples_per_rank_) {
      ++state_.epoch;
      state_.position = 0;
    }
    if (state_.epoch != cached_epoch_) {
      cached_order_ = examples(state_.epoch);
      cached_epoch_ = state_.epoch;
    }
    i = cached_order_[state_.position++];
  }
  const auto index =
      at::from_blob(picked.data(), {batch_size}, at::TensorOptions().dtype(at::kLong)).clone();
  std::vector<at::Tensor> batch;
  batch.reserve(tensors_.size());
  for (const auto& t : tensors_) batch.push_back(t.index_select(0, index.to(t.device())));
  return batch;
}

void TensorSampler::load_state(const SamplerState& state) {
  FSDPP_CHECK_AS(ConfigError,
                 state.epoch >= 0 && state.position >= 0 && state.position <= examples_per_rank_,
                 "[data] tensor sampler state (epoch={}, position={}) is out of range; expected "
                 "epoch >= 0 and 0 <= position <= {} examples per rank",
                 state.epoch, state.position, examples_per_rank_);
  state_ = state;
}

}  // namespace fsdpp::data
