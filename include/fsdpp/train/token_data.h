#pragma once
// A tokenized file's windows as train()'s data (batch_source.h), for a language model of your
// own: inputs and targets of seq_len tokens each (targets one token ahead), each epoch's windows
// shuffled from training.seed and split over the data-parallel ranks exactly as fsdpp-train
// reads them (data::DistributedSampler), resumable from the same position.
//
//   auto ds = fsdpp::data::TokenDataset::open("corpus.txt", tokenizer);
//   auto [train, val] = ds.split(0.05);
//   auto data = fsdpp::train::token_data(train, 256, val);

#include <cstdint>
#include <optional>

#include "fsdpp/data/token_dataset.h"
#include "fsdpp/train/batch_source.h"

namespace fsdpp::train {

// Throws ConfigError for seq_len < 1 or a split with no window of seq_len + 1 tokens. Rows are
// int64 token ids; Batch::starts holds where each window starts in the file.
TrainData token_data(data::TokenDataset train, int64_t seq_len,
                     std::optional<data::TokenDataset> eval = std::nullopt);

}  // namespace fsdpp::train
