#pragma once
// The training batches of a PlannedSampler (a DistributedSampler's token windows, a
// DocumentSampler's rows), made on the caller's thread or ahead of time by
// background threads (Hugging Face's dataloader_num_workers / dataloader_prefetch_factor /
// dataloader_pin_memory, as threads rather than processes).
//
//   fsdpp::data::BatchLoader loader(sampler, {.batch_size = 8, .num_workers = 4});
//   auto [inputs, targets] = loader.next();    // exactly what sampler.next_batch(8) would give
//   checkpoint(loader.state());                 // the sampler's state after the batches taken
//
// With num_workers > 0 the loader plans batches in the sampler's order (plan_batch, under one
// lock) and the workers read them (load_batch) in parallel, up to num_workers * prefetch_factor
// batches ahead; next() hands them out by their place in that order, so the stream is the same,
// batch for batch, as with no workers. state() is the position after the batches next() has
// returned, not after those made ahead: a checkpoint resumes at the first batch not trained on.
//
// A worker's exception is rethrown by the next() that would have returned its batch. Every wait
// is bounded: next() throws fsdpp::Error after `timeout` without its batch; the destructor stops
// the workers (each notices within a poll interval) and joins them, also while an exception
// unwinds the trainer. The sampler must outlive the loader and not be used beside it.

#include <ATen/core/Tensor.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "fsdpp/data/sampler.h"

namespace fsdpp::data {

struct BatchLoaderOptions {
  int64_t batch_size = 8;
  int num_workers = 0;     // 0: each batch made by next() on the caller's thread
  int prefetch_factor = 2;  // batches made ahead per worker (num_workers > 0)
  // Batches in page-locked host memory (Tensor::pin_memory), for asynchronous copies to a GPU.
  // Needs CUDA; the caller asks only when its ranks use it.
  bool pin_memory = false;
  // The longest next() waits for a batch before it throws.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

class BatchLoader {
 public:
  // Starts the workers. Throws ConfigError for a batch_size < 1, num_workers < 0 or
  // prefetch_factor < 1.
  BatchLoader(PlannedSampler& sampler, BatchLoaderOptions options);
  ~BatchLoader();  // stops and joins the workers
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // (inputs, targets), each (batch_size, seq_len) int64: the sampler's next batch.
  std::pair<at::Tensor, at::Tensor> next();
  // The same batch with its rows' keys (the sampler's items: where token windows start in the
  // dataset, or rows of a document plan): what an offline teacher cache or a per-window seed is
  // keyed by. positions: document masking's (sampler.h's TokenBatch), else undefined.
  struct Batch {
    at::Tensor inputs, targets;
    std::vector<int64_t> starts;
    at::Tensor positions;
  };
  Batch next_batch();
  // The sampler's state after the last batch next() returned.
  SamplerState state() const;
  const BatchLoaderOptions& options() const { return options_; }

 private:
  struct Made {
    Batch batch;
    SamplerState after;  // the sampler's state once this batch was planned
    std::exception_ptr error;
  };
  void work();
  Batch load(std::vector<int64_t> starts) const;

  PlannedSampler& sampler_;
  const BatchLoaderOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t planned_ = 0;   // batches planned (tickets handed to workers)
  int64_t returned_ = 0;  // batches next() has returned
  std::map<int64_t, Made> ready_;  // ticket -> batch made, not yet returned
  SamplerState state_;             // after the batches returned
  std::vector<std::thread> workers_;
};

}  // namespace fsdpp::data
