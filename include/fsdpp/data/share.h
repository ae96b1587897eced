#pragma once
// This rank's share of a dataset: which data-parallel rank takes it, of how many, and the order
// of each epoch. One struct for every sampler and batch source: data::DistributedSampler's token
// windows (SamplerOptions::share), data::TensorSampler's examples, and the sources the trainer
// makes for train() (train::SourceOptions, train/batch_source.h).
//
//   fsdpp::data::TensorSampler sampler({x, y}, {.rank = r, .world_size = n, .seed = 42});

#include <cstdint>

namespace fsdpp::data {

struct ShareOptions {
  int rank = 0;         // data-parallel rank
  int world_size = 1;   // data-parallel ranks
  uint64_t seed = 0;    // each epoch's order is a permutation drawn from (seed, epoch)
  bool shuffle = true;  // false: in order (still split across the ranks)
};

}  // namespace fsdpp::data
