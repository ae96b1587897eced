// The offline teacher's files (teacher_cache.h): cache.json, the packed token ids and the
// reader. The writer, which runs the teacher, is teacher_cache_writer.cpp.
#include "fsdpp/distill/teacher_cache.h"

#include <ATen/ATen.h>

#include <fstream>
#include <iterator>
#include <map>

#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/state/safetensors.h"

namespace fs = std::filesystem;

namespace fsdpp::distill {
namespace {

constexpr const char* kFormat = "fsdpp-teacher-cache";
constexpr int kVersion = 1;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  FSDPP_CHECK_AS(ConfigError, in.good(),
                 "[distill] distillation.teacher_cache: cannot read '{}'; expected a directory "
                 "written by fsdpp-train teacher-logits",
                 path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

uint64_t file_checksum(const fs::path& path) {
  const std::string bytes = read_text(path);
  auto t = at::from_blob(const_cast<char*>(bytes.data()), {static_cast<int64_t>(bytes.size())},
                         at::kByte);
  return state::checksum(t);
}

// ---- cache.json ----

std::string TeacherCacheInfo::to_json() const {
  nlohmann::json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["teacher"] = teacher;
  j["vocab_size"] = vocab_size;
  j["seq_len"] = seq_len;
  j["top_k"] = top_k;
  j["index_bits"] = index_bits;
  j["dtype"] = dtype;
  j["windows"] = windows;
  j["shards"] = nlohmann::json::array();
  for (const auto& s : shards) {
    j["shards"].push_back({{"file", s.file},
                           {"first_window", s.first_window},
                           {"windows", s.windows},
                           {"bytes", s.bytes},
                           {"xxh3", fmt::format("{:016x}", s.xxh3)}});
  }
  return j.dump(2) + "\n";
}

TeacherCacheInfo TeacherCacheInfo::from_json(const std::string& text, const std::string& source) {
  TeacherCacheInfo info;
  try {
    const auto j = nlohmann::json::parse(text);
    FSDPP_CHECK_AS(CheckpointError, j.value("format", "") == kFormat && j.value("version", 0) == kVersion,
                   "[distill] '{}' is not an fsdpp teacher cache of version {} (format '{}', "
                   "version {})",
                   source, kVersion, j.value("format", ""), j.value("version", 0));
    info.teacher = j.at("teacher").get<std::string>();
    info.vocab_size = j.at("vocab_size").get<int64_t>();
    info.seq_len = j.at("seq_len").get<int64_t>();
    info.top_k = j.at("top_k").get<int64_t>();
    info.index_bits = j.at("index_bits").get<int64_t>();
    info.dtype = j.at("dtype").get<std::string>();
    info.windows = j.at("windows").get<int64_t>();
    for (const auto& s : j.at("shards")) {
      Shard shard;
      shard.file = s.at("file").get<std::string>();
      shard.first_window = s.at("first_window").get<int64_t>();
      shard.windows = s.at("windows").get<int64_t>();
      shard.bytes = s.at("bytes").get<uint64_t>();
      shard.xxh3 = std::stoull(s.at("xxh3").get<std::string>(), nullptr, 16);
      info.shards.push_back(shard);
    }
  } catch (const nlohmann::json::exception& e) {
    FSDPP_THROW(CheckpointError, "[distill] '{}' is not a valid teacher cache index: {}", source,
                e.what());
  }
  FSDPP_CHECK_AS(CheckpointError,
                 info.vocab_size > 0 && info.seq_len > 0 && info.top_k > 0 &&
                     info.top_k <= info.vocab_size && info.index_bits == index_bits_for(info.vocab_size) &&
                     (info.dtype == "bfloat16" || info.dtype == "float32"),
                 "[distill] '{}': vocab_size {}, seq_len {}, top_k {}, index_bits {}, dtype '{}' "
                 "do not describe a teacher cache",
                 source, info.vocab_size, info.seq_len, info.top_k, info.index_bits, info.dtype);
  int64_t next = 0;
  for (const auto& s : info.shards) {
    FSDPP_CHECK_AS(CheckpointError, s.first_window == next && s.windows > 0,
                   "[distill] '{}': shard {} starts at window {} with {} windows; expected the "
                   "shards to cover windows 0 .. {} in order",
                   source, s.file, s.first_window, s.windows, info.windows - 1);
    next += s.windows;
  }
  FSDPP_CHECK_AS(CheckpointError, next == info.windows,
                 "[distill] '{}': the shards hold {} windows, the index says {}", source, next,
                 info.windows);
  return info;
}

// ---- packed ids ----

int64_t index_bits_for(int64_t vocab) {
  int64_t bits = 1;
  while ((int64_t{1} << bits) < vocab) ++bits;
  return bits;
}

at::Tensor pack_ids(const at::Tensor& ids, int64_t bits) {
  FSDPP_CHECK(ids.dim() == 2 && bits >= 1 && bits <= 32, "[distill] pack_ids: ids {} at {} bits",
              ids.sizes(), bits);
  const int64_t n = ids.size(0), m = ids.size(1);
  const int64_t nbits = m * bits, nbytes = (nbits + 7) / 8;
  const auto shifts = at::arange(bits, ids.options().dtype(at::kLong));
  // (n, m, bits) of 0/1, bit b of id j at stream position j*bits + b.
  auto stream = at::bitwise_right_shift(ids.to(at::kLong).unsqueeze(-1), shifts).bitwise_and(1)
                    .to(at::kByte).reshape({n, nbits});
  stream = at::constant_pad_nd(stream, {0, nbytes * 8 - nbits});
  const auto weights = at::bitwise_left_shift(at::ones({8}, stream.options().dtype(at::kInt)),
                                              at::arange(8, stream.options().dtype(at::kInt)));
  return (stream.view({n, nbytes, 8}).to(at::kInt) * weights).sum(-1).to(at::kByte);
}

at::Tensor unpack_ids(const at::Tensor& packed, int64_t m, int64_t bits) {
  FSDPP_CHECK(packed.dim() == 2 && packed.size(1) * 8 >= m * bits,
              "[distill] unpack_ids: {} bytes per row hold fewer than {} ids of {} bits",
              packed.size(1), m, bits);
  const int64_t n = packed.size(0);
  const auto opts = packed.options().dtype(at::kInt);
  auto stream = at::bitwise_right_shift(packed.to(at::kInt).unsqueeze(-1), at::arange(8, opts))
                    .bitwise_and(1);  // (n, bytes, 8)
  stream = stream.reshape({n, -1}).narrow(1, 0, m * bits).view({n, m, bits}).to(at::kLong);
  return at::bitwise_left_shift(stream, at::arange(bits, opts.dtype(at::kLong))).sum(-1);
}

std::vector<uint64_t> window_token_hashes(const at::Tensor& inputs) {
  std::vector<uint64_t> out;
  const auto rows = inputs.to(at::kLong).cpu().contiguous();
  for (int64_t b = 0; b < rows.size(0); ++b) out.push_back(state::checksum(rows[b]));
  return out;
}

// ---- the reader ----

struct TeacherCache::Impl {
  fs::path dir;
  TeacherCacheInfo info;
  std::vector<state::SafetensorsFile> shards;
  std::vector<at::Tensor> logprobs, ids, tokens, checksums;  // views over the mappings
};

TeacherCache TeacherCache::open(const fs::path& dir) {
  FSDPP_CHECK_AS(ConfigError, fs::is_directory(dir),
                 "[distill] distillation.teacher_cache='{}' is not a directory; expected one "
                 "written by fsdpp-train teacher-logits",
                 dir.string());
  auto impl = std::make_shared<Impl>();
  impl->dir = dir;
  const auto index = dir / "cache.json";
  FSDPP_CHECK_AS(ConfigError, fs::exists(index),
                 "[distill] distillation.teacher_cache='{}' has no cache.json; expected a "
                 "directory written by fsdpp-train teacher-logits",
                 dir.string());
  impl->info = TeacherCacheInfo::from_json(read_text(index), index.string());
  for (const auto& s : impl->info.shards) {
    const auto path = dir / s.file;
    FSDPP_CHECK_AS(ConfigError, fs::exists(path),
                   "[distill] distillation.teacher_cache='{}': shard {} (windows {} .. {}) is "
                   "missing",
                   dir.string(), s.file, s.first_window, s.first_window + s.windows - 1);
    auto file = state::SafetensorsFile::open(path);
    FSDPP_CHECK_AS(CheckpointError, fs::file_size(path) == s.bytes,
                   "[distill] '{}' has {} bytes; cache.json says {} (a partial copy?)",
                   path.string(), fs::file_size(path), s.bytes);
    impl->logprobs.push_back(file.view("logprobs"));
    impl->ids.push_back(file.view("ids"));
    impl->tokens.push_back(file.view("tokens"));
    impl->checksums.push_back(file.view("checksum"));
    FSDPP_CHECK_AS(CheckpointError,
                   impl->logprobs.back().sizes() ==
                       at::IntArrayRef({s.windows, impl->info.seq_len, impl->info.top_k}),
                   "[distill] '{}': logprobs {}; expected ({}, {}, {})", path.string(),
                   impl->logprobs.back().sizes(), s.windows, impl->info.seq_len, impl->info.top_k);
    impl->shards.push_back(std::move(file));
  }
  return TeacherCache(std::move(impl));
}

const TeacherCacheInfo& TeacherCache::info() const { return impl_->info; }
const fs::path& TeacherCache::dir() const { return impl_->dir; }

uint64_t TeacherCache::disk_bytes() const {
  uint64_t bytes = 0;
  for (const auto& s : impl_->info.shards) bytes += s.bytes;
  return bytes;
}

TeacherTargets TeacherCache::lookup(const std::vector<int64_t>& windows,
                                    const at::Tensor& inputs) const {
  const auto& info = impl_->info;
  FSDPP_CHECK_AS(ConfigError, inputs.dim() == 2 && inputs.size(1) == info.seq_len,
                 "[distill] distillation.teacher_cache='{}' was written for data.seq_len={}; "
                 "the batch has {} tokens per row",
                 impl_->dir.string(), info.seq_len, inputs.dim() == 2 ? inputs.size(1) : -1);
  const auto hashes = window_token_hashes(inputs);
  std::vector<at::Tensor> values, packed;
  for (size_t b = 0; b < windows.size(); ++b) {
    const int64_t w = windows[b];
    FSDPP_CHECK(w >= 0 && w < info.windows,
                "[distill] window {} of the training split is not in distillation.teacher_cache="
                "'{}' (windows 0 .. {}): the cache was written for a shorter training split; "
                "write it again for this data (fsdpp-train teacher-logits)",
                w, impl_->dir.string(), info.windows - 1);
    size_t s = 0;
    while (info.shards[s].first_window + info.shards[s].windows <= w) ++s;
    const int64_t r = w - info.shards[s].first_window;
    const auto lp = impl_->logprobs[s][r];
    const auto id = impl_->ids[s][r];
    const auto sums = impl_->checksums[s][r];
    const std::string where = fmt::format("'{}' window {}", (impl_->dir / info.shards[s].file).string(), w);
    FSDPP_CHECK(static_cast<int64_t>(state::checksum(lp)) == sums[0].item<int64_t>() &&
                    static_cast<int64_t>(state::checksum(id)) == sums[1].item<int64_t>(),
                "[distill] {}: the record fails its checksum (the file is damaged); write the "
                "cache again",
                where);
    FSDPP_CHECK(static_cast<int64_t>(hashes[b]) == impl_->tokens[s][r].item<int64_t>(),
                "[distill] {}: the batch's tokens are not the ones the teacher scored; the cache "
                "belongs to another data.path, tokenizer, data.seq_len, data.val_fraction or "
                "data.train_fraction",
                where);
    values.push_back(lp);
    packed.push_back(id);
  }
  const int64_t B = inputs.size(0), T = info.seq_len, K = info.top_k;
  TeacherTargets out;
  out.values = at::stack(values).to(at::kFloat).to(inputs.device());
  out.ids = unpack_ids(at::stack(packed), T * K, info.index_bits).view({B, T, K}).to(inputs.device());
  return out;
}

void TeacherCache::verify() const {
  for (const auto& s : impl_->info.shards) {
    const auto path = impl_->dir / s.file;
    const uint64_t got = file_checksum(path);
    FSDPP_CHECK_AS(CheckpointError, got == s.xxh3,
                   "[distill] '{}': XXH3 {:016x}, cache.json says {:016x} (the file is damaged)",
                   path.string(), got, s.xxh3);
  }
}

}  // namespace fsdpp::distill
