#pragma once
// fsdpp-train's data when data.path (or data.mixture) holds records rather than text: JSON
// Lines, Parquet, Arrow, a datasets directory, or a directory fsdpp-data prepare wrote. The
// records become documents once (data/prepare.h, on rank 0, every core, into
// <data.cache_dir>/documents-<spec digest> and reused while sources, tokenizer and options stay
// the same), the last data.val_fraction of the documents is the validation split, and the
// training split's rows (data.packing, data.padding_free, data.long_documents) are sampled by
// epoch as token windows are. Private to src/train.

#include <filesystem>
#include <string>

#include "fsdpp/data/prepare.h"
#include "fsdpp/train/config.h"

namespace fsdpp::train::detail {

struct TrainSession;

// Whether `data` is read as records (this file) rather than as text (the token-file route).
bool is_record_data(const DataSection& data);

// The prepared directory of the run's records: data.path itself when fsdpp-data prepare wrote it
// (its tokenizer must be the run's), else the run's cache, prepared by rank 0 when missing or
// stale. Collective. Sets s.store and friends through prepare_record_batches.
void prepare_record_batches(TrainSession& s);

}  // namespace fsdpp::train::detail
