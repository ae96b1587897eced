#pragma once
// fsdpp-train teacher-logits (docs/distillation.md#offline-teacher): the distillation.teacher of
// a config run over the training windows that config's student trains on, written as an
// offline teacher cache (fsdpp/distill/teacher_cache_writer.h) for distillation.teacher_cache.
//
//   auto summary = fsdpp::train::write_teacher_cache(cfg, world, {.out = "runs/cache"});

#include <memory>

#include "fsdpp/dist/world.h"
#include "fsdpp/distill/teacher_cache_writer.h"
#include "fsdpp/train/config.h"

namespace fsdpp::train {

// Runs the distillation.teacher of `cfg` (sharded over the world as in training) over every
// window of cfg's training split (the data, tokenizer, seq_len, val_fraction and train_fraction
// the student trains with; model.init_from's tokenizer when it has one) in
// training.per_device_train_batch_size windows per rank and forward, and writes the cache to
// options.out atomically (shards by several ranks at once, cache.json by rank 0). Collective.
distill::TeacherCacheSummary write_teacher_cache(TrainConfig cfg, std::shared_ptr<dist::World> world,
                                                 const distill::TeacherCacheOptions& options);

}  // namespace fsdpp::train
