#pragma once
// The run's steps, planned once at make_optimizer (phases.h) from training:'s keys and the data:
// the examples of one optimizer step on this rank, how many steps the run and a pass over the
// data take, and what a step trains on over every data-parallel rank. The loop, the checkpoints
// and the logs read it. Private to src/train.

#include <cstdint>

#include "fsdpp/train/config.h"

namespace fsdpp::train::detail {

struct StepPlan {
  int64_t batch_size = 0;          // examples per accumulation batch on this rank (per_device_train_batch_size)
  int64_t accumulation_steps = 1;  // accumulation batches per optimizer step (gradient_accumulation_steps)
  int64_t total_steps = 0;         // training.max_steps, or num_train_epochs passes over the data
  int64_t steps_per_epoch = 1;     // one pass over this rank's share of the data (save_strategy epoch)
  int64_t tokens_per_step = 0;     // over every data-parallel rank; examples for train()'s data
};

// The plan of `training` over data that gives each rank `examples_per_rank` examples per epoch
// (BatchSource::per_rank) of `tokens_per_example` tokens (0: examples, not tokens), split over
// `dp` data-parallel ranks (the ranks of a tp group read the same examples) (make_optimizer.cpp).
StepPlan plan_steps(const TrainingSection& training, int64_t examples_per_rank,
                    int64_t tokens_per_example, int64_t dp);

}  // namespace fsdpp::train::detail
