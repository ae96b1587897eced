#pragma once
// fsdpp-train's token windows as the trainer's BatchSource (batch_source.h): the training
// batches through a BatchLoader (training.dataloader_*), started at the first batch so that a
// resume positions the sampler first; and the validation split's windows, in order.
// Private to src/train.

#include <optional>

#include "fsdpp/data/batch_loader.h"
#include "fsdpp/data/sampler.h"
#include "fsdpp/data/token_dataset.h"
#include "fsdpp/train/batch_source.h"

namespace fsdpp::train::detail {

class TokenBatches : public train::BatchSource {
 public:
  // `sampler` must outlive it; batches of options.batch_size only.
  TokenBatches(data::DistributedSampler& sampler, data::BatchLoaderOptions options);
  Batch next(int64_t batch_size) override;
  data::SamplerState state() const override;
  void load_state(const data::SamplerState& state) override;
  int64_t per_rank() const override { return sampler_.windows_per_rank(); }

 private:
  data::DistributedSampler& sampler_;
  const data::BatchLoaderOptions options_;
  std::optional<data::BatchLoader> loader_;  // from the first next()
};

// The windows of `dataset` (which must outlive it) for one rank, on the caller's thread.
class TokenWindows : public train::BatchSource {
 public:
  TokenWindows(const data::TokenDataset& dataset, const data::SamplerOptions& options)
      : sampler_(dataset, options) {}
  Batch next(int64_t batch_size) override;
  data::SamplerState state() const override { return sampler_.state(); }
  void load_state(const data::SamplerState& state) override { sampler_.load_state(state); }
  int64_t per_rank() const override { return sampler_.windows_per_rank(); }

 private:
  data::DistributedSampler sampler_;
};

}  // namespace fsdpp::train::detail
