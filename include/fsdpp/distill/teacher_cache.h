#pragma once
// An offline teacher (docs/distillation.md#offline-teacher): the teacher's K most likely tokens
// and their log-probabilities at every position of every training window, computed once
// (`fsdpp-train teacher-logits`, Megatron's offline distillation) and read back by
// `distillation.teacher_cache: DIR`, so that training never runs the teacher.
//
//   fsdpp-run --nproc-per-node 2 fsdpp-train teacher-logits configs/distill-moe.yaml runs/cache
//   fsdpp-run --nproc-per-node 4 fsdpp-train configs/distill-moe.yaml distillation.teacher_cache=runs/cache
//
// DIR holds cache.json and shard-NNNNN.safetensors files. Window w of the training split (the
// sampler's window: tokens [w * seq_len, w * seq_len + seq_len]) is record w - first of the
// shard whose range holds it; each shard has, per window,
//   logprobs (seq_len, K)      BF16 (or F32): log p_teacher(token) over the whole vocabulary,
//                              temperature 1, largest first
//   ids      (packed bytes)    the K tokens of each position, index_bits = ceil(log2 vocab) bits
//                              each, little-endian bit order, seq_len * K of them per window
//   tokens   ()                XXH3 of the window's input tokens (int64): which text it scored
//   checksum (2)               XXH3 of the window's logprobs row and of its ids row
// Records are found by window id alone, so any number of ranks reads a cache that any number
// wrote; every record read is checked against its checksums and its tokens against the batch.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fsdpp/distill/chunked_distill_loss.h"

namespace fsdpp::distill {

// cache.json.
struct TeacherCacheInfo {
  struct Shard {
    std::string file;  // relative to DIR
    int64_t first_window = 0, windows = 0;
    uint64_t bytes = 0;
    uint64_t xxh3 = 0;  // of the whole file
  };
  std::string teacher;  // the directory it was computed from
  int64_t vocab_size = 0, seq_len = 0, top_k = 0, index_bits = 0, windows = 0;
  std::string dtype = "bfloat16";  // of logprobs: bfloat16 | float32
  std::vector<Shard> shards;

  std::string to_json() const;
  // Throws CheckpointError naming `source` and the field for a malformed or unknown file.
  static TeacherCacheInfo from_json(const std::string& text, const std::string& source);
};

// ceil(log2(vocab)) bits, at least 1: what one token id takes in `ids`.
int64_t index_bits_for(int64_t vocab);
// ids (n, m) int64 in [0, 2^bits) -> (n, ceil(m * bits / 8)) uint8, id j at bits [j*bits,
// (j+1)*bits) of its row, little-endian.
at::Tensor pack_ids(const at::Tensor& ids, int64_t bits);
// The inverse: (n, bytes) uint8 -> (n, m) int64.
at::Tensor unpack_ids(const at::Tensor& packed, int64_t m, int64_t bits);
// XXH3 of a file's bytes (cache.json's xxh3 of each shard).
uint64_t file_checksum(const std::filesystem::path& file);
// XXH3 of each row of `inputs` (B, T) as int64: the `tokens` a window's record holds.
std::vector<uint64_t> window_token_hashes(const at::Tensor& inputs);

class TeacherCache {
 public:
  // Reads DIR/cache.json and maps its shards. ConfigError naming distillation.teacher_cache
  // when DIR or a shard is missing, CheckpointError for a malformed file.
  static TeacherCache open(const std::filesystem::path& dir);

  const TeacherCacheInfo& info() const;
  const std::filesystem::path& dir() const;
  uint64_t disk_bytes() const;  // the shards' sizes

  // The teacher of windows `windows` (ids) whose inputs are `inputs` (B, seq_len): values
  // (B, seq_len, K) float32 log-probabilities and ids (B, seq_len, K) int64. Throws Error naming
  // the shard and the window when a window is outside the cache, a record fails its checksum,
  // or the batch's tokens are not those the teacher scored (another text, tokenizer, seq_len
  // or data.train_fraction).
  TeacherTargets lookup(const std::vector<int64_t>& windows, const at::Tensor& inputs) const;

  // Checks every shard's XXH3 and size against cache.json (fsdpp-train teacher-logits --verify).
  void verify() const;

  struct Impl;

 private:
  explicit TeacherCache(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace fsdpp::distill
