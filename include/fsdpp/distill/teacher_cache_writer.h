#pragma once
// The offline teacher's writer (teacher_cache.h holds the format and the reader): the teacher
// run once over the training windows, its top-K log-probabilities written as checksummed
// shards by every rank and cache.json by rank 0. fsdpp-train teacher-logits drives it with the
// run's data (train/teacher_logits.h).
//
//   CacheWindows windows{.count = sampler.num_windows(), .seq_len = 128,
//                        .inputs = [&](const auto& starts) { return sampler.load_batch(starts).inputs; }};
//   auto summary = write_teacher_cache(teacher, windows, /*batch_size=*/8, world, options, say);

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "fsdpp/dist/world.h"
#include "fsdpp/distill/teacher.h"
#include "fsdpp/distill/teacher_cache.h"

namespace fsdpp::distill {

struct TeacherCacheOptions {
  std::filesystem::path out;      // DIR; refused if it exists, unless force
  int64_t top_k = 64;             // K, at most the vocabulary
  std::string dtype = "bfloat16";  // of the log-probabilities: bfloat16 | float32
  int64_t windows_per_shard = 1024;
  bool force = false;

  // ConfigErrors "[teacher-logits] ..." naming the flag: no output directory, top_k < 1,
  // another dtype, windows_per_shard < 1, an existing `out` without force.
  void validate() const;
};

struct TeacherCacheSummary {
  TeacherCacheInfo info;
  uint64_t bytes = 0;  // on disk, the shards together
  double seconds = 0;
};

// The windows a cache covers: windows 0 .. count - 1 of the training split, window w the tokens
// [w * seq_len, w * seq_len + seq_len], and the input tokens (n, seq_len) of the windows that
// start at the given token offsets (the sampler's load_batch).
struct CacheWindows {
  int64_t count = 0;
  int64_t seq_len = 0;
  std::function<at::Tensor(const std::vector<int64_t>& starts)> inputs;
};

// Runs `teacher` over every window in `batch_size` windows per rank and forward (every rank as
// many forwards as the busiest, the teacher's units gathering on all ranks together) and writes
// the cache to options.out atomically: shards by several ranks at once, cache.json by rank 0.
// `say` prints on rank 0. Collective. Its summary's seconds are the caller's to fill.
TeacherCacheSummary write_teacher_cache(Teacher& teacher, const CacheWindows& windows,
                                        int64_t batch_size, dist::World& world,
                                        const TeacherCacheOptions& options,
                                        const std::function<void(const std::string&)>& say);

}  // namespace fsdpp::distill
