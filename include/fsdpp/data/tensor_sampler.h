#pragma once
// Batches of in-memory examples, split across data-parallel ranks like PyTorch's
// DistributedSampler over a TensorDataset: the trainer's data for a model that is not a language
// model (train/batch_source.h).
//
//   fsdpp::data::TensorSampler sampler({x, y}, {.rank = r, .world_size = n, .seed = 42});
//   std::vector<at::Tensor> batch = sampler.next_batch(16);   // {x[idx], y[idx]}: 16 rows each
//
// Every tensor holds one example per row of its first dimension (all the same count). Each
// epoch orders the examples as rank_order (sampler.h) does the token windows: a permutation drawn
// from (seed, epoch) alone, the tail that does not divide by world_size dropped, every
// world_size-th example from rank. A batch that runs past the end of an epoch continues into the
// next one; state() and load_state() are the same SamplerState a checkpoint saves for tokens.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "fsdpp/data/sampler.h"

namespace fsdpp::data {

struct TensorSamplerOptions {
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;
  bool shuffle = true;
};

class TensorSampler {
 public:
  // Throws ConfigError when there is no tensor, a tensor has no rows or a different number of
  // rows than the first, or there are fewer examples than world_size.
  TensorSampler(std::vector<at::Tensor> tensors, TensorSamplerOptions options);

  // Each tensor's rows of the next batch_size examples, in the tensors' order.
  std::vector<at::Tensor> next_batch(int64_t batch_size);

  int64_t num_examples() const { return num_examples_; }
  int64_t examples_per_rank() const { return examples_per_rank_; }  // per epoch
  // The examples this rank gets in `epoch`, in the order it gets them.
  std::vector<int64_t> examples(int64_t epoch) const;

  SamplerState state() const { return state_; }
  // Throws ConfigError when the position is beyond an epoch.
  void load_state(const SamplerState& state);

 private:
  std::vector<at::Tensor> tensors_;
  TensorSamplerOptions options_;
  int64_t num_examples_ = 0;
  int64_t examples_per_rank_ = 0;
  SamplerState state_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> cached_order_;  // examples(cached_epoch_)
};

}  // namespace fsdpp::data
