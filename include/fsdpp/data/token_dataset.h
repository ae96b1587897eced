#pragma once
// A text file tokenised once into a binary token file, read with pread(2) as batches need it.
//
//   auto tok = fsdpp::data::make_tokenizer("byte");
//   auto data = fsdpp::data::TokenDataset::open("corpus.txt", *tok);  // encodes or reuses cache
//   auto [train, val] = data.split(0.1);                                // val = the last 10%
//
// The token file lives in a cache directory (by default ".fsdpp-cache" beside the text) as
// <text name>.<hash of tokenizer name>.tokens: a header (magic "FSDPPTOK", version, token width
// 2 or 4 bytes, token count, the text's size, mtime and xxh3 hash, the tokenizer's name) and
// then the tokens, uint16 when the vocabulary fits, else uint32. It is rebuilt whenever any of
// those differ, and written to a temporary file then renamed, so a reader (or another rank
// encoding the same text at the same time) never sees a half-written cache. It is read through
// a descriptor, not a mapping: a cache truncated while a job reads it is an fsdpp::Error naming
// it and both sizes, where a mapping would have died of SIGBUS.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "fsdpp/data/tokenizer.h"

namespace fsdpp::data {

struct TokenDatasetOptions {
  // Where token files go; empty = "<directory of the text>/.fsdpp-cache".
  std::filesystem::path cache_dir;
};

// A contiguous range of a token file's tokens; copies share the mapping.
class TokenDataset {
 public:
  // Throws ConfigError naming the path for a missing or empty text, a text with NUL bytes (not
  // text), or a tokenizer whose vocabulary does not fit 32 bits.
  static TokenDataset open(const std::filesystem::path& text_path, const Tokenizer& tokenizer,
                           const TokenDatasetOptions& options = {});

  int64_t size() const { return end_ - begin_; }
  int64_t token(int64_t i) const;  // 0 <= i < size()
  // Tokens [begin, end) as an int64 tensor (read from the token file). token() and slice()
  // throw fsdpp::Error naming the file when it has been truncated since open().
  at::Tensor slice(int64_t begin, int64_t end) const;
  TokenDataset subrange(int64_t begin, int64_t end) const;
  // (train, validation): validation is the last round(size * val_fraction) tokens.
  // val_fraction in [0, 1).
  std::pair<TokenDataset, TokenDataset> split(double val_fraction) const;

  int64_t vocab_size() const;
  const std::filesystem::path& cache_path() const;
  // True when open() found a matching token file and encoded nothing.
  bool reused_cache() const;

  class Mapping;  // the open token file (token_dataset.cpp)

 private:
  TokenDataset(std::shared_ptr<const Mapping> mapping, int64_t begin, int64_t end)
      : mapping_(std::move(mapping)), begin_(begin), end_(end) {}

  std::shared_ptr<const Mapping> mapping_;
  int64_t begin_ = 0, end_ = 0;
};

}  // namespace fsdpp::data
