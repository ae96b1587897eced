#pragma once
// Batches of next-token windows, split across data-parallel ranks like PyTorch's
// DistributedSampler.
//
//   fsdpp::data::DistributedSampler sampler(train, {.seq_len = 256, .share = {.rank = r, .world_size = n}});
//   auto [inputs, targets] = sampler.next_batch(8);   // (8,256) int64 each; targets = inputs + 1
//
// The dataset is cut into non-overlapping windows of seq_len + 1 tokens at stride seq_len
// (window i starts at token i * seq_len; a window's last token is the next one's first). Each
// epoch shuffles the window order with a permutation drawn from (seed, epoch) alone, drops the
// tail that does not divide by world_size, and gives rank r the windows at positions
// r, r + world_size, r + 2 * world_size, ...: every kept window is seen by exactly one rank per
// epoch, and the same on every machine. A batch that runs past the end of an epoch continues
// into the next one.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fsdpp/data/share.h"
#include "fsdpp/data/token_dataset.h"

namespace fsdpp::data {

struct SamplerOptions {
  int64_t seq_len = 256;
  ShareOptions share;  // this rank's windows (share.h); without shuffle, in file order
};

// Where a sampler is in its stream: saved with a checkpoint, loaded to resume.
struct SamplerState {
  int64_t epoch = 0;
  int64_t position = 0;  // windows of this epoch already returned by this rank
  bool operator==(const SamplerState&) const = default;
};

// A sampler's stream of item indices 0 .. count-1 over its epochs, and where it is in it: both
// samplers hand out next() and save state() (DistributedSampler's windows, TensorSampler's
// examples, tensor_sampler.h). Each epoch is a permutation drawn from (seed, epoch) alone (none
// without shuffle), its tail that does not divide by world_size dropped, then the positions
// rank, rank + world_size, ...; next() continues into the next epoch at the end of one.
class SamplerStream {
 public:
  // `items` names what is counted, for messages ("windows", "examples").
  SamplerStream(int64_t count, const ShareOptions& share, std::string items);
  int64_t per_rank() const { return per_rank_; }  // items per epoch; may be 0
  std::vector<int64_t> order(int64_t epoch) const;  // this rank's items in `epoch`, in order
  int64_t next();
  SamplerState state() const { return state_; }
  // Throws ConfigError when the position is beyond an epoch.
  void load_state(const SamplerState& state);

 private:
  int64_t count_;
  ShareOptions share_;
  std::string items_;
  int64_t per_rank_;
  SamplerState state_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> cached_order_;  // order(cached_epoch_)
};

// One accumulation batch of a language model's rows: inputs (B,T) int64, targets (B,T) int64 (-100
// where no loss is counted: padding, prompts, a document's end), and positions (B,T) int64 when
// each row holds several documents attended to alone (document masking; undefined otherwise).
struct TokenBatch {
  at::Tensor inputs, targets, positions;
};

// A sampler whose batches are planned in order and read by any thread (a BatchLoader's
// workers): plan_batch takes the next batch_size items of this rank's stream and moves the state
// past them; load_batch only reads, so it may run on several threads at once and beside
// plan_batch. The items are what a batch row is keyed by (a window's token offset, a row's index
// in the document plan): an offline teacher cache keys its logits by them.
class PlannedSampler {
 public:
  virtual ~PlannedSampler() = default;
  virtual std::vector<int64_t> plan_batch(int64_t batch_size) = 0;
  virtual TokenBatch load_batch(const std::vector<int64_t>& items) const = 0;
  virtual SamplerState state() const = 0;
  // Throws ConfigError when the position is beyond an epoch.
  virtual void load_state(const SamplerState& state) = 0;
  virtual int64_t items_per_rank() const = 0;  // per epoch
};

class DistributedSampler final : public PlannedSampler {
 public:
  // Throws ConfigError when the options are invalid or the dataset has fewer windows than
  // world_size.
  DistributedSampler(TokenDataset data, SamplerOptions options);

  // (inputs, targets), each (batch_size, seq_len) int64; targets are inputs shifted by one.
  // The same as load_batch(plan_batch(batch_size)).
  std::pair<at::Tensor, at::Tensor> next_batch(int64_t batch_size);
  // The two halves of next_batch, so that a BatchLoader's threads can read batches in parallel
  // while their order stays the sampler's: plan_batch takes the next batch_size windows (their
  // token offsets) and moves the state past them; load_batch reads them. load_batch only reads
  // the dataset, so it may run on several threads at once and beside plan_batch.
  std::vector<int64_t> plan_batch(int64_t batch_size) override;
  TokenBatch load_batch(const std::vector<int64_t>& starts) const override;
  int64_t items_per_rank() const override { return windows_per_rank(); }

  int64_t num_windows() const { return num_windows_; }          // in the whole dataset
  int64_t windows_per_rank() const { return stream_.per_rank(); }  // per epoch
  // The token offsets of the windows this rank gets in `epoch`, in the order it gets them.
  std::vector<int64_t> window_starts(int64_t epoch) const;

  SamplerState state() const override { return stream_.state(); }
  void load_state(const SamplerState& state) override { stream_.load_state(state); }

 private:
  TokenDataset data_;
  SamplerOptions options_;
  int64_t num_windows_ = 0;
  SamplerStream stream_;
};

}  // namespace fsdpp::data
