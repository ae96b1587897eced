#pragma once
// Documents tokenized once: shard files that keep where each document starts and which of its
// tokens the loss counts, read back by document.
//
//   data::DocumentShardWriter w(dir / "shard-00000.docs", vocab_size);
//   w.add(ids, mask);                       // one document; mask empty: every token counts
//   const data::ShardInfo info = w.commit();
//   auto store = data::DocumentStore::open(dir, shards);   // shards: the ShardInfos, in order
//   store.read(doc, 0, store.length(doc), tokens, mask);
//
// A shard is one file, written under a temporary name and renamed when complete (AtomicFile), so
// a reader sees a whole shard or none; after a crash a preparation resumes at the first shard
// missing. Layout (host byte order):
//   header   64 bytes: magic "FSDPPDOC", version, token width (2: uint16 when the vocabulary
//            fits, else 4), documents, tokens, whether a mask follows
//   offsets  int64 x (documents + 1): document d is tokens [offsets[d], offsets[d+1])
//   tokens   token width x tokens
//   mask     one bit per token, least significant bit first (1: the token is one the loss
//            counts when it is a target); absent when every token counts
// Its XXH3-64 is recorded by whoever lists the shards (prepare.h's manifest) and checked when a
// preparation resumes. Reads go through pread(2) on a descriptor kept open, as TokenDataset's:
// a shard truncated under a running job is an error naming it, not a SIGBUS.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fsdpp/common/atomic_file.h"

namespace fsdpp::data {

// One shard as its manifest lists it.
struct ShardInfo {
  std::string file;       // name inside the store's directory
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t loss_tokens = 0;  // tokens the mask marks (== tokens without a mask)
  uint64_t bytes = 0;       // the file's size
  uint64_t xxh3 = 0;        // XXH3-64 of the whole file
};

class DocumentShardWriter {
 public:
  // Throws ConfigError for a vocabulary outside 1 .. 2^32.
  DocumentShardWriter(std::filesystem::path path, int64_t vocab_size);
  // Appends one document. `mask` is empty (every token counts) or one value per token (non-zero:
  // counts). Throws for an id outside [0, vocab_size).
  void add(std::span<const int32_t> ids, std::span<const uint8_t> mask = {});
  int64_t documents() const { return static_cast<int64_t>(offsets_.size()) - 1; }
  int64_t tokens() const { return offsets_.back(); }
  // Writes the file atomically and returns what its manifest entry says.
  ShardInfo commit();

 private:
  std::filesystem::path path_;
  int64_t vocab_size_;
  uint32_t token_bytes_;
  std::vector<int64_t> offsets_{0};
  std::vector<uint32_t> ids_;
  std::vector<uint8_t> mask_bits_;  // one bit per token
  bool any_masked_ = false;
};

// XXH3-64 of a file's bytes, streamed.
uint64_t file_xxh3(const std::filesystem::path& path);

// The documents of several shards, numbered across them in order.
class DocumentStore {
 public:
  // Opens each shard of `dir` (its header checked against the manifest's entry: documents,
  // tokens, size; not its hash, which prepare checks). Throws ConfigError naming the file when
  // one is missing or does not match.
  static DocumentStore open(const std::filesystem::path& dir, const std::vector<ShardInfo>& shards);

  int64_t num_documents() const { return first_doc_.back(); }
  int64_t num_tokens() const { return total_tokens_; }
  int64_t length(int64_t doc) const;  // tokens of document `doc`
  // All documents' lengths, in order.
  std::vector<int64_t> lengths() const;
  // Tokens [begin, end) of document `doc` into tokens[0 .. end-begin), and whether each counts
  // into mask (1/0) when mask is not null.
  void read(int64_t doc, int64_t begin, int64_t end, int64_t* tokens, uint8_t* mask) const;

  class Shard;  // an open shard file (document_store.cpp)

 private:
  std::vector<std::shared_ptr<const Shard>> shards_;
  std::vector<int64_t> first_doc_{0};  // shards_[i]'s first document; the total at the end
  int64_t total_tokens_ = 0;
  // The shard holding document `doc`, and the document's index inside it.
  std::pair<const Shard*, int64_t> locate(int64_t doc) const;
};

}  // namespace fsdpp::data
