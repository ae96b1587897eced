#pragma once
// Which tokenizer a model speaks, so that two can be compared: a distillation teacher against its
// student, a checkpoint against the run that resumes it. The vocabulary size says nothing: a
// SentencePiece model of 256 pieces and the byte tokenizer both have ids 0..255, for different
// strings, and a KD loss over them compares unrelated tokens without a word.
//
//   auto student = data::identity_of(*tokenizer);                  // byte / sentencepiece:<hash>
//   auto teacher = data::read_tokenizer_identity("runs/teacher/checkpoint-400");
//   if (teacher && !data::same_tokenizer(*teacher, *tokenizer)) ... teacher->describe() ...
//
// Identity is kind + digest (XXH3-64 of what decides the ids):
//   byte           no digest: there is one byte tokenizer
//   sentencepiece  the model file's bytes (what SentencePieceTokenizer::name() carries)
//   tokenizer.json a Hugging Face tokenizer.json (a TokenizerJson in memory, or the file): the
//                  digest of its model's kind, vocabulary, merges, byte_fallback and unk_token
//                  and of its added tokens' ids and texts, keys sorted, both spellings of merges
//                  alike (src/data/tokenizer_json_digest.h): what decides which id is which string, not
//                  the fields a re-save by another tokenizers version adds. fsdpp's own
//                  tokenizers compare to one through the tokenizer.json fsdpp exports for them
//                  (hf_tokenizer.h), so a model exported by `fsdpp-ckpt export-hf` is recognised
//                  as the student's.

#include <filesystem>
#include <optional>
#include <string>

#include "fsdpp/data/tokenizer.h"

namespace fsdpp::data {

struct TokenizerIdentity {
  std::string kind;    // "byte", "sentencepiece" or "tokenizer.json"
  std::string digest;  // 16 hex digits; empty for byte
  std::string where;   // the file it was read from; empty for a tokenizer in memory

  // "byte", "sentencepiece (model 9f2c...e1)", "tokenizer.json (1a2b..., DIR/tokenizer.json)".
  std::string describe() const;
};

TokenizerIdentity identity_of(const Tokenizer& tok);

// The tokenizer stored in `dir` (an fsdpp checkpoint: fsdpp_tokenizer.json and its files; a
// Hugging Face directory: tokenizer.json, else tokenizer.model); nothing when it holds none.
// identity_of(*make_tokenizer(dir)) equals it.
// ConfigError naming the file when one is there but unreadable.
std::optional<TokenizerIdentity> read_tokenizer_identity(const std::filesystem::path& dir);

// Whether `tok` is the tokenizer `id` describes.
bool same_tokenizer(const TokenizerIdentity& id, const Tokenizer& tok);

}  // namespace fsdpp::data
