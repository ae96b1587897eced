// write_teacher_cache (teacher_cache_writer.h): the teacher run once over the training windows,
// its top-K log-probabilities written as checksummed shards by every rank, cache.json by rank 0.
#include "fsdpp/distill/teacher_cache_writer.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <algorithm>

#include "fsdpp/common/atomic_file.h"
#include "fsdpp/common/error.h"
#include "fsdpp/dist/agree.h"
#include "fsdpp/dist/string_collectives.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/safetensors.h"

namespace fs = std::filesystem;

namespace fsdpp::distill {
namespace {

// One shard's records, filled batch by batch.
struct ShardRecords {
  int64_t first = 0, windows = 0;
  at::Tensor logprobs, ids, tokens, checksum;
};

std::string shard_name(int64_t j) { return fmt::format("shard-{:05d}.safetensors", j); }

// This rank's shards (j = rank, rank + W, ...), their records allocated.
std::vector<ShardRecords> shards_of(const TeacherCacheInfo& info, const TeacherCacheOptions& o,
                                    int64_t n_shards, int rank, int W) {
  const int64_t T = info.seq_len, K = info.top_k;
  const auto dtype = o.dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
  const int64_t id_bytes = (T * K * info.index_bits + 7) / 8;
  std::vector<ShardRecords> mine;
  for (int64_t j = rank; j < n_shards; j += W) {
    ShardRecords r;
    r.first = j * o.windows_per_shard;
    r.windows = std::min(o.windows_per_shard, info.windows - r.first);
    r.logprobs = at::empty({r.windows, T, K}, at::TensorOptions().dtype(dtype));
    r.ids = at::empty({r.windows, id_bytes}, at::TensorOptions().dtype(at::kByte));
    r.tokens = at::empty({r.windows}, at::TensorOptions().dtype(at::kLong));
    r.checksum = at::empty({r.windows, 2}, at::TensorOptions().dtype(at::kLong));
    mine.push_back(std::move(r));
  }
  return mine;
}

// The forwards of the busiest rank: what every rank runs.
int64_t most_batches(const TeacherCacheInfo& info, const TeacherCacheOptions& o, int64_t n_shards,
                     int W, int64_t B) {
  const auto batches_of = [&](int r) {
    int64_t n = 0;
    for (int64_t j = r; j < n_shards; j += W) {
      const int64_t windows = std::min(o.windows_per_shard, info.windows - j * o.windows_per_shard);
      n += (windows + B - 1) / B;
    }
    return n;
  };
  int64_t most = 0;
  for (int r = 0; r < W; ++r) most = std::max(most, batches_of(r));
  return most;
}

// The teacher over this rank's shards, `most` forwards of up to B windows each; the spare ones
// (once its shards are full) on window 0, their results dropped. Collective.
void score_windows(Teacher& teacher, const CacheWindows& windows, const TeacherCacheInfo& info,
                   std::vector<ShardRecords>& mine, int64_t most, int64_t B) {
  const int64_t T = info.seq_len, K = info.top_k;
  at::NoGradGuard no_grad;
  size_t shard = 0;
  int64_t at_window = 0;  // within mine[shard]
  for (int64_t batch = 0; batch < most; ++batch) {
    const bool real = shard < mine.size();
    const int64_t n = real ? std::min(B, mine[shard].windows - at_window) : 1;
    std::vector<int64_t> starts;
    for (int64_t i = 0; i < n; ++i) starts.push_back(real ? (mine[shard].first + at_window + i) * T : 0);
    auto x = windows.inputs(starts).to(teacher.module().parameters().front().device());
    const auto logits = teacher.forward(x).logits;
    if (!real) continue;
    const auto [values, ids] = logits.to(at::kFloat).log_softmax(-1).topk(K, -1);  // (n, T, K)
    auto& r = mine[shard];
    const auto packed = pack_ids(ids.reshape({n, T * K}), info.index_bits);
    const auto stored = values.to(r.logprobs.scalar_type());
    const auto hashes = window_token_hashes(x);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = at_window + i;
      r.logprobs[row].copy_(stored[i]);
      r.ids[row].copy_(packed[i]);
      r.tokens[row] = static_cast<int64_t>(hashes[i]);
      r.checksum[row][0] = static_cast<int64_t>(state::checksum(r.logprobs[row]));
      r.checksum[row][1] = static_cast<int64_t>(state::checksum(r.ids[row]));
    }
    at_window += n;
    if (at_window == r.windows) ++shard, at_window = 0;
  }
}

// The shards into a temporary directory beside `out`, cache.json, then one rename. Collective.
TeacherCacheSummary write_shards(TeacherCacheInfo info, std::vector<ShardRecords> mine,
                                 int64_t n_shards, dist::World& world,
                                 const TeacherCacheOptions& o) {
  const bool lead = world.rank() == 0;
  std::unique_ptr<state::AtomicDir> dir;
  std::string tmp;
  dist::agree_on_failure(*world.group(), "creating the cache's directory", [&] {
    if (!lead) return;
    dir = std::make_unique<state::AtomicDir>(o.out);
    tmp = dir->path().string();
  });
  dist::broadcast_string(*world.group(), tmp, 0, {"teacher_cache"});
  dist::agree_on_failure(*world.group(), "writing the cache's shards", [&] {
    for (const auto& r : mine) {
      state::save_safetensors(fs::path(tmp) / shard_name(r.first / o.windows_per_shard),
                              {{"logprobs", r.logprobs}, {"ids", r.ids}, {"tokens", r.tokens},
                               {"checksum", r.checksum}},
                              {{"format", "fsdpp-teacher-cache"},
                               {"first_window", std::to_string(r.first)}});
    }
  });
  mine.clear();
  TeacherCacheSummary out;
  dist::agree_on_failure(*world.group(), "writing cache.json", [&] {
    if (!lead) return;
    for (int64_t j = 0; j < n_shards; ++j) {
      TeacherCacheInfo::Shard sh;
      sh.file = shard_name(j);
      sh.first_window = j * o.windows_per_shard;
      sh.windows = std::min(o.windows_per_shard, info.windows - sh.first_window);
      sh.bytes = fs::file_size(fs::path(tmp) / sh.file);
      sh.xxh3 = file_checksum(fs::path(tmp) / sh.file);
      out.bytes += sh.bytes;
      info.shards.push_back(sh);
    }
    write_file_atomically(fs::path(tmp) / "cache.json", info.to_json(), "teacher-logits");
    TeacherCache::open(tmp).verify();  // what a reader will see
    dir->commit();
  });
  world.group()->barrier({"teacher_cache"});
  out.info = std::move(info);
  return out;
}

}  // namespace

void TeacherCacheOptions::validate() const {
  FSDPP_CHECK_AS(ConfigError, !out.empty(), "[teacher-logits] no output directory given");
  FSDPP_CHECK_AS(ConfigError, top_k >= 1, "[teacher-logits] --top-k {}: expected >= 1", top_k);
  FSDPP_CHECK_AS(ConfigError, dtype == "bfloat16" || dtype == "float32",
                 "[teacher-logits] --dtype {}: expected bfloat16 or float32", dtype);
  FSDPP_CHECK_AS(ConfigError, windows_per_shard >= 1,
                 "[teacher-logits] --windows-per-shard {}: expected >= 1", windows_per_shard);
  FSDPP_CHECK_AS(ConfigError, force || !fs::exists(out),
                 "[teacher-logits] '{}' exists; give a new directory, or --force to replace it",
                 out.string());
}

TeacherCacheSummary write_teacher_cache(Teacher& teacher, const CacheWindows& windows,
                                        int64_t batch_size, dist::World& world,
                                        const TeacherCacheOptions& o,
                                        const std::function<void(const std::string&)>& say) {
  const int64_t vocab = teacher.source().vocab_size();
  TeacherCacheInfo info;
  info.teacher = teacher.source().dir().string();  // distillation.teacher as the config gives it
  info.vocab_size = vocab;
  info.seq_len = windows.seq_len;
  info.top_k = o.top_k;
  info.index_bits = index_bits_for(vocab);
  info.dtype = o.dtype;
  info.windows = windows.count;
  const int64_t n_shards = (info.windows + o.windows_per_shard - 1) / o.windows_per_shard;
  const int W = world.size();
  const int64_t B = batch_size;
  // This rank's shards and its batches over them; every rank runs as many forwards as the
  // busiest one (the teacher's units gather on all ranks together), the spare ones on window 0.
  auto mine = shards_of(info, o, n_shards, world.rank(), W);
  const int64_t most = most_batches(info, o, n_shards, W, B);
  say(fmt::format("[teacher-logits] {} windows of {} tokens, top {} of {} tokens ({} bits an "
                  "id), {} shard(s) over {} rank{}; {} forwards of {} windows per rank",
                  info.windows, info.seq_len, info.top_k, vocab, info.index_bits, n_shards, W,
                  W == 1 ? "" : "s", most, B));
  score_windows(teacher, windows, info, mine, most, B);
  return write_shards(std::move(info), std::move(mine), n_shards, world, o);
}

}  // namespace fsdpp::distill
