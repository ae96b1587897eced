#pragma once
// Batches of in-memory examples, split across data-parallel ranks like PyTorch's
// DistributedSampler over a TensorDataset: the trainer's data for a model that is not a language
// model (train/batch_source.h).
//
//   fsdpp::data::TensorSampler sampler({x, y}, {.rank = r, .world_size = n, .seed = 42});
//   std::vector<at::Tensor> batch = sampler.next_batch(16);   // {x[idx], y[idx]}: 16 rows each
//
// `share` is this rank's share (share.h). Every tensor holds one example per row of its first dimension (all the same count). Each
// epoch orders the examples as the token sampler orders its windows (SamplerStream, sampler.h):
// a permutation drawn from (seed, epoch) alone, the tail that does not divide by world_size
// dropped, every world_size-th example from rank. A batch that runs past the end of an epoch continues into the
// next one; state() and load_state() are the same SamplerState a checkpoint saves for tokens.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "fsdpp/data/sampler.h"
#include "fsdpp/data/share.h"

namespace fsdpp::data {

class TensorSampler {
 public:
  // Throws ConfigError when there is no tensor, a tensor has no rows or a different number of
  // rows than the first, or there are fewer examples than world_size.
  TensorSampler(std::vector<at::Tensor> tensors, const ShareOptions& share);

  // Each tensor's rows of the next batch_size examples, in the tensors' order.
  std::vector<at::Tensor> next_batch(int64_t batch_size);

  int64_t num_examples() const { return tensors_[0].size(0); }
  int64_t examples_per_rank() const { return stream_.per_rank(); }  // per epoch
  // The examples this rank gets in `epoch`, in the order it gets them.
  std::vector<int64_t> examples(int64_t epoch) const { return stream_.order(epoch); }

  SamplerState state() const { return stream_.state(); }
  // Throws ConfigError when the position is beyond an epoch.
  void load_state(const SamplerState& state) { stream_.load_state(state); }

 private:
  std::vector<at::Tensor> tensors_;
  SamplerStream stream_;
};

}  // namespace fsdpp::data
