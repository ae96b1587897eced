#pragma once
// The trainer's data, whatever the model: a stream of this rank's batches that a checkpoint can
// record and a resume can continue (custom_model.h). fsdpp-train's token windows are one
// implementation; tensor_data() is the other, in-memory examples split over the data-parallel
// ranks by data::TensorSampler.
//
//   auto data = fsdpp::train::tensor_data(x, y, x_val, y_val);   // one example per row
//   // or a source of your own:
//   data.train = [](const fsdpp::train::SourceOptions& o) { return std::make_unique<MySource>(o); };
//
// A source gives this rank's share of each global batch: the ranks together take
// batch_size x data-parallel ranks examples per accumulation batch, as PyTorch's DistributedSampler
// splits a dataset.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fsdpp/data/sampler.h"
#include "fsdpp/data/share.h"

namespace fsdpp::train {

// One accumulation batch of this rank: what the loss function reads. The trainer moves both tensors to
// the rank's device before the loss function sees them.
struct Batch {
  at::Tensor inputs;   // one example per row of the first dimension
  at::Tensor targets;  // the same number of rows
  std::vector<int64_t> starts;  // token windows: where each starts in the token file; else empty
  // Packed rows of a language model (data.padding_free): each token's position in its document,
  // (B,T) int64 restarting at 0 where a document starts; the model then masks attention to each
  // document and rotates by these positions (document masking). Undefined: none (0 .. T-1).
  at::Tensor positions;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // This rank's next `batch_size` examples; a batch that runs past the end of an epoch
  // continues into the next one.
  virtual Batch next(int64_t batch_size) = 0;
  // The position after the batches next() has returned: what a checkpoint saves.
  virtual data::SamplerState state() const = 0;
  // Continues from a saved position (before the first next()). Throws ConfigError when the
  // position is beyond an epoch.
  virtual void load_state(const data::SamplerState& state) = 0;
  // Examples this rank takes per epoch (save_strategy epoch and num_train_epochs count them).
  virtual int64_t per_rank() const = 0;
};

// What the trainer makes a source for: this rank's share of the data (data/share.h): its
// data-parallel rank of world_size, training.seed for each epoch's order, shuffle false for
// evaluation (in order).
using SourceOptions = data::ShareOptions;
using SourceFactory = std::function<std::unique_ptr<BatchSource>(const SourceOptions&)>;

// A run's data: the training source and, optionally, the evaluation one (evaluated every
// training.eval_steps and at the end, per_device_eval_batch_size examples per batch, at most
// eval_max_batches batches, in order).
struct TrainData {
  SourceFactory train;
  SourceFactory eval;        // empty: no validation
  std::string description;   // one line for the log
};

// In-memory examples: row i of `inputs` and of `targets` is example i (the same number of rows;
// any other dimensions). Each epoch every data-parallel rank takes its share of a permutation
// drawn from training.seed (data::TensorSampler). The eval tensors may be undefined: no
// validation. Throws ConfigError for tensors without rows or with different row counts.
TrainData tensor_data(at::Tensor inputs, at::Tensor targets, at::Tensor eval_inputs = {},
                      at::Tensor eval_targets = {});

}  // namespace fsdpp::train
