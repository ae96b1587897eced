#pragma once
// Preparing a dataset once: records tokenized on every core into document shards
// (document_store.h) with a manifest, prepared.json, that says what they were made from, so a
// directory is reused only by a run with the same sources, tokenizer and options, and a
// preparation that was interrupted resumes at the first shard it had not finished.
//
//   data::PrepareSpec spec{.sources = files, .tokenizer = tok->name(), .vocab_size = ...,
//                          .options = "text_field=text ..."};
//   auto manifest = data::prepare_documents(out_dir, spec, next_record, make_document, {});
//   auto store = data::open_prepared(out_dir);
//
// Deterministic: shard k holds the documents of records [k * records_per_shard, (k+1) *
// records_per_shard) in record order whatever the number of threads, so two preparations of
// the same input write the same bytes (and the same XXH3 in the manifest).
//
// prepared.json:
//   {"format": "fsdpp-documents", "version": 1, "tokenizer": NAME, "vocab_size": V,
//    "sources": [{"path", "bytes", "xxh3"}], "options": "...", "records_per_shard": R,
//    "shards": [{"file", "documents", "tokens", "loss_tokens", "bytes", "xxh3",
//                "skipped": {"reason": count, ...}}, ...],
//    "complete": true, "records": N, "documents": D, "tokens": T, "loss_tokens": L}
// written atomically after every shard; "complete" once the last one is in.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fsdpp/data/document_store.h"

namespace fsdpp::data {

inline constexpr const char* kPreparedManifest = "prepared.json";

// One source file, identified by its content.
struct SourceFile {
  std::string path;
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
  bool operator==(const SourceFile&) const = default;
};
// Each file's size and XXH3-64 (read through once).
std::vector<SourceFile> identify_sources(const std::vector<std::filesystem::path>& files);

// What decides a prepared directory's content: equal specs, equal documents.
struct PrepareSpec {
  std::vector<SourceFile> sources;
  std::string tokenizer;  // Tokenizer::name()
  int64_t vocab_size = 0;
  std::string options;    // the record and loss options that decide the tokens, as one string
  int64_t records_per_shard = 65536;
  bool operator==(const PrepareSpec&) const = default;
};

struct PreparedManifest {
  PrepareSpec spec;
  std::vector<ShardInfo> shards;
  // Per shard: the records that made no document, by reason.
  std::vector<std::map<std::string, int64_t>> shard_skipped;
  bool complete = false;
  int64_t records = 0;  // records read (all shards)
  std::map<std::string, int64_t> skipped() const;  // over the shards
  int64_t documents() const;
  int64_t tokens() const;
  int64_t loss_tokens() const;
};

// prepared.json of `dir`; nothing when there is none. Throws ConfigError naming the file when
// it is not one fsdpp wrote.
std::optional<PreparedManifest> read_manifest(const std::filesystem::path& dir);

// One record as the reader yields it, and one document as the maker makes it.
struct PreparedDocument {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;  // empty: every token counts; else one value per id
  std::string skipped;        // non-empty (ids empty): why the record made no document
};

struct PrepareOptions {
  int threads = 0;  // 0: every core (std::thread::hardware_concurrency)
  // Called after each shard with (records so far, documents so far, tokens so far).
  std::function<void(int64_t, int64_t, int64_t)> progress;
};

// Prepares into `dir` (created if missing): `next` yields the records in order (false at the
// end; it may throw), `make` turns one into a document and is called from several threads at
// once. An existing prepared.json with the same spec keeps its shards whose files still hash
// to their XXH3 (a resume skips their records); one with another spec is replaced. Returns the
// complete manifest.
template <class Record>
PreparedManifest prepare_documents(const std::filesystem::path& dir, const PrepareSpec& spec,
                                   const std::function<bool(Record&)>& next,
                                   const std::function<PreparedDocument(const Record&)>& make,
                                   const PrepareOptions& options = {});

// The shards of a complete prepared directory. Throws ConfigError naming it when it is not
// complete (a preparation still running or interrupted).
DocumentStore open_prepared(const std::filesystem::path& dir, const PreparedManifest& manifest);

namespace detail {
// prepare_documents without the record type: `read_shard` appends up to n records' documents
// (made on `threads` threads) for shard k and returns how many records it read.
PreparedManifest prepare_shards(
    const std::filesystem::path& dir, const PrepareSpec& spec, const PrepareOptions& options,
    const std::function<int64_t(int64_t n, std::vector<PreparedDocument>& out)>& read_shard,
    const std::function<void(int64_t n)>& skip_records);
std::vector<PreparedDocument> make_in_parallel(int64_t n, int threads,
                                               const std::function<PreparedDocument(int64_t)>& make);
}  // namespace detail

template <class Record>
PreparedManifest prepare_documents(const std::filesystem::path& dir, const PrepareSpec& spec,
                                   const std::function<bool(Record&)>& next,
                                   const std::function<PreparedDocument(const Record&)>& make,
                                   const PrepareOptions& options) {
  auto read_shard = [&](int64_t n, std::vector<PreparedDocument>& out) {
    std::vector<Record> records;
    for (Record r; static_cast<int64_t>(records.size()) < n && next(r);) records.push_back(std::move(r));
    out = detail::make_in_parallel(static_cast<int64_t>(records.size()), options.threads,
                                   [&](int64_t i) { return make(records[static_cast<size_t>(i)]); });
    return static_cast<int64_t>(records.size());
  };
  auto skip = [&](int64_t n) {
    Record r;
    for (int64_t i = 0; i < n && next(r); ++i) {
    }
  };
  return detail::prepare_shards(dir, spec, options, read_shard, skip);
}

}  // namespace fsdpp::data
