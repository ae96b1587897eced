// Preparing a dataset once into document shards. See include/fsdpp/data/prepare.h.
#include "fsdpp/data/prepare.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fsdpp/common/atomic_file.h"
#include "fsdpp/common/error.h"

namespace fs = std::filesystem;

namespace fsdpp::data {
namespace {

constexpr const char* kFormat = "fsdpp-documents";
constexpr int kVersion = 1;

std::string hex(uint64_t v) { return fmt::format("{:016x}", v); }

uint64_t unhex(const nlohmann::json& j) { return std::stoull(j.get<std::string>(), nullptr, 16); }

nlohmann::json to_json(const PreparedManifest& m) {
  nlohmann::json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["tokenizer"] = m.spec.tokenizer;
  j["vocab_size"] = m.spec.vocab_size;
  j["sources"] = nlohmann::json::array();
  for (const auto& s : m.spec.sources) {
    j["sources"].push_back({{"path", s.path}, {"bytes", s.bytes}, {"xxh3", hex(s.xxh3)}});
  }
  j["options"] = m.spec.options;
  j["records_per_shard"] = m.spec.records_per_shard;
  j["shards"] = nlohmann::json::array();
  for (size_t k = 0; k < m.shards.size(); ++k) {
    const auto& s = m.shards[k];
    j["shards"].push_back({{"file", s.file},
                           {"documents", s.documents},
                           {"tokens", s.tokens},
                           {"loss_tokens", s.loss_tokens},
                           {"bytes", s.bytes},
                           {"xxh3", hex(s.xxh3)},
                           {"skipped", m.shard_skipped.at(k)}});
  }
  j["complete"] = m.complete;
  j["records"] = m.records;
  j["skipped"] = m.skipped();
  j["documents"] = m.documents();
  j["tokens"] = m.tokens();
  j["loss_tokens"] = m.loss_tokens();
  return j;
}

PreparedManifest from_json(const nlohmann::json& j) {
  PreparedManifest m;
  m.spec.tokenizer = j.at("tokenizer").get<std::string>();
  m.spec.vocab_size = j.at("vocab_size").get<int64_t>();
  for (const auto& s : j.at("sources")) {
    m.spec.sources.push_back({s.at("path").get<std::string>(), s.at("bytes").get<uint64_t>(),
                              unhex(s.at("xxh3"))});
  }
  m.spec.options = j.at("options").get<std::string>();
  m.spec.records_per_shard = j.at("records_per_shard").get<int64_t>();
  for (const auto& s : j.at("shards")) {
    m.shards.push_back({s.at("file").get<std::string>(), s.at("documents").get<int64_t>(),
                        s.at("tokens").get<int64_t>(), s.at("loss_tokens").get<int64_t>(),
                        s.at("bytes").get<uint64_t>(), unhex(s.at("xxh3"))});
    m.shard_skipped.push_back(s.at("skipped").get<std::map<std::string, int64_t>>());
  }
  m.complete = j.at("complete").get<bool>();
  m.records = j.at("records").get<int64_t>();
  return m;
}

void write_manifest(const fs::path& dir, const PreparedManifest& m) {
  AtomicFile out(dir / kPreparedManifest, "data");
  out.write(to_json(m).dump(1) + "\n");
  out.commit();
}

std::string shard_name(size_t k) { return fmt::format("shard-{:05d}.docs", k); }

// An earlier preparation of the same spec cut to its shards that are still whole: what a
// resume keeps. Empty when there is none.
PreparedManifest reusable(const fs::path& dir, const PrepareSpec& spec) {
  PreparedManifest keep;
  keep.spec = spec;
  std::optional<PreparedManifest> old;
  try {
    old = read_manifest(dir);
  } catch (const ConfigError&) {
    return keep;  // not one of ours after all: prepared again from the start
  }
  if (!old || !(old->spec == spec)) return keep;
  for (size_t k = 0; k < old->shards.size(); ++k) {
    const auto& s = old->shards[k];
    std::error_code ec;
    if (s.file != shard_name(k) || fs::file_size(dir / s.file, ec) != s.bytes || ec ||
        file_xxh3(dir / s.file) != s.xxh3) {
      break;
    }
    keep.shards.push_back(s);
    keep.shard_skipped.push_back(old->shard_skipped[k]);
  }
  keep.complete = old->complete && keep.shards.size() == old->shards.size();
  keep.records = keep.complete ? old->records
                               : static_cast<int64_t>(keep.shards.size()) * spec.records_per_shard;
  return keep;
}

}  // namespace

std::vector<SourceFile> identify_sources(const std::vector<fs::path>& files) {
  std::vector<SourceFile> out;
  for (const auto& f : files) {
    std::error_code ec;
    const auto bytes = fs::file_size(f, ec);
    FSDPP_CHECK_AS(ConfigError, !ec, "[data] cannot read '{}': {}", f.string(), ec.message());
    out.push_back({fs::absolute(f).lexically_normal().string(), bytes, file_xxh3(f)});
  }
  return out;
}

std::map<std::string, int64_t> PreparedManifest::skipped() const {
  std::map<std::string, int64_t> out;
  for (const auto& per : shard_skipped) {
    for (const auto& [why, n] : per) out[why] += n;
  }
  return out;
}

int64_t PreparedManifest::documents() const {
  int64_t n = 0;
  for (const auto& s : shards) n += s.documents;
  return n;
}
int64_t PreparedManifest::tokens() const {
  int64_t n = 0;
  for (const auto& s : shards) n += s.tokens;
  return n;
}
int64_t PreparedManifest::loss_tokens() const {
  int64_t n = 0;
  for (const auto& s : shards) n += s.loss_tokens;
  return n;
}

std::optional<PreparedManifest> read_manifest(const fs::path& dir) {
  const fs::path path = dir / kPreparedManifest;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  try {
    const auto j = nlohmann::json::parse(text.str());
    FSDPP_CHECK_AS(ConfigError, j.value("format", "") == kFormat,
                   "[data] '{}' is not a prepared dataset's manifest (its \"format\" is not {})",
                   path.string(), kFormat);
    FSDPP_CHECK_AS(ConfigError, j.value("version", 0) == kVersion,
                   "[data] '{}' was written by another version of fsdpp (version {}, this one "
                   "reads {}); prepare the data again",
                   path.string(), j.value("version", 0), kVersion);
    return from_json(j);
  } catch (const nlohmann::json::exception& e) {
    FSDPP_THROW(ConfigError, "[data] '{}' is not a valid prepared dataset's manifest: {}",
                path.string(), e.what());
  }
}

DocumentStore open_prepared(const fs::path& dir, const PreparedManifest& manifest) {
  FSDPP_CHECK_AS(ConfigError, manifest.complete,
                 "[data] '{}' is a preparation that did not finish ({} shards, {} records so far); "
                 "run fsdpp-data prepare again to complete it (it resumes where it stopped)",
                 dir.string(), manifest.shards.size(), manifest.records);
  return DocumentStore::open(dir, manifest.shards);
}

namespace detail {

std::vector<PreparedDocument> make_in_parallel(int64_t n, int threads,
                                               const std::function<PreparedDocument(int64_t)>& make) {
  std::vector<PreparedDocument> out(static_cast<size_t>(n));
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(n, 1)));
  // Contiguous ranges, one per thread; the first exception (in record order) is rethrown.
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  std::vector<int64_t> failed_at(static_cast<size_t>(threads), n);
  auto run = [&](int t) {
    const int64_t b = n * t / threads, e = n * (t + 1) / threads;
    for (int64_t i = b; i < e; ++i) {
      try {
        out[static_cast<size_t>(i)] = make(i);
      } catch (...) {
        errors[t] = std::current_exception();
        failed_at[t] = i;
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(run, t);
  run(0);
  for (auto& th : pool) th.join();
  const auto first = std::min_element(failed_at.begin(), failed_at.end()) - failed_at.begin();
  if (errors[first]) std::rethrow_exception(errors[first]);
  return out;
}

PreparedManifest prepare_shards(
    const fs::path& dir, const PrepareSpec& spec, const PrepareOptions& options,
    const std::function<int64_t(int64_t n, std::vector<PreparedDocument>& out)>& read_shard,
    const std::function<void(int64_t n)>& skip_records) {
  FSDPP_CHECK_AS(ConfigError, spec.records_per_shard >= 1,
                 "[data] records_per_shard={} is not positive", spec.records_per_shard);
  std::error_code ec;
  fs::create_directories(dir, ec);
  FSDPP_CHECK_AS(ConfigError, !ec, "[data] cannot create '{}': {}", dir.string(), ec.message());
  PreparedManifest m = reusable(dir, spec);
  if (m.complete) return m;  // every shard of a finished preparation is whole: nothing to do
  // Resuming: the records of the shards kept are read past, not made again.
  if (m.records > 0) skip_records(m.records);
  for (;;) {
    std::vector<PreparedDocument> docs;
    const int64_t n = read_shard(spec.records_per_shard, docs);
    if (n == 0 && !m.shards.empty()) break;
    DocumentShardWriter w(dir / shard_name(m.shards.size()), spec.vocab_size);
    std::map<std::string, int64_t> skipped;
    for (const auto& d : docs) {
      if (!d.skipped.empty()) {
        ++skipped[d.skipped];
        continue;
      }
      w.add(d.ids, d.mask);
    }
    m.shards.push_back(w.commit());
    m.shard_skipped.push_back(std::move(skipped));
    m.records += n;
    write_manifest(dir, m);
    if (options.progress) options.progress(m.records, m.documents(), m.tokens());
    if (n < spec.records_per_shard) break;
  }
  FSDPP_CHECK_AS(ConfigError, m.documents() > 0,
                 "[data] no documents in {} records of {}: every record was skipped ({}); "
                 "expected at least one with text to train on",
                 m.records, spec.sources.empty() ? dir.string() : spec.sources.front().path,
                 [&] {
                   std::string s;
                   for (const auto& [why, count] : m.skipped()) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", count, why);
                   return s.empty() ? std::string("none read") : s;
                 }());
  m.complete = true;
  write_manifest(dir, m);
  return m;
}

}  // namespace detail
}  // namespace fsdpp::data
