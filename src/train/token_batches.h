#pragma once
// fsdpp-train's token batches as the trainer's BatchSource (batch_source.h), from a planned
// sampler (data/sampler.h: the token windows of text, the rows of prepared documents): the
// training batches through a BatchLoader (training.dataloader_*), started at the first batch so
// that a resume positions the sampler first; and the validation split's, in order.
// Private to src/train.

#include <memory>
#include <optional>

#include "fsdpp/data/batch_loader.h"
#include "fsdpp/data/sampler.h"
#include "fsdpp/data/token_dataset.h"
#include "fsdpp/train/batch_source.h"

namespace fsdpp::train::detail {

struct TrainSession;

// The BatchLoader's options from training.dataloader_*: worker threads, pinned buffers when the
// ranks use CUDA (prepare_data.cpp).
data::BatchLoaderOptions loader_options(TrainSession& s);

class TokenBatches : public train::BatchSource {
 public:
  // `sampler` must outlive it; batches of options.batch_size only.
  TokenBatches(data::PlannedSampler& sampler, data::BatchLoaderOptions options);
  Batch next(int64_t batch_size) override;
  data::SamplerState state() const override;
  void load_state(const data::SamplerState& state) override;
  int64_t per_rank() const override { return sampler_.items_per_rank(); }

 private:
  data::PlannedSampler& sampler_;
  const data::BatchLoaderOptions options_;
  std::optional<data::BatchLoader> loader_;  // from the first next()
};

// The windows of seq_len + 1 tokens of `tokens` as a source for any rank's share, each batch
// made on the caller's thread (evaluation; train()'s token_data).
SourceFactory token_windows(data::TokenDataset tokens, int64_t seq_len);

// A sampler's batches for one rank, on the caller's thread (evaluation).
class SamplerBatches : public train::BatchSource {
 public:
  explicit SamplerBatches(std::unique_ptr<data::PlannedSampler> sampler)
      : sampler_(std::move(sampler)) {}
  Batch next(int64_t batch_size) override;
  data::SamplerState state() const override { return sampler_->state(); }
  void load_state(const data::SamplerState& state) override { sampler_->load_state(state); }
  int64_t per_rank() const override { return sampler_->items_per_rank(); }

 private:
  std::unique_ptr<data::PlannedSampler> sampler_;
};

}  // namespace fsdpp::train::detail
