#pragma once
// tokenizer.json's BPE model: one pre-tokenized piece -> ids, as the tokenizers library's BPE
// does it (models/bpe/model.rs): each character is looked up (with continuing_subword_prefix /
// end_of_word_suffix where set), unknown ones become <0xXX> byte tokens (byte_fallback) or the
// unk token (fused into one when fuse_unk), then the lowest-ranked merge is applied, leftmost
// first, until none applies. ignore_merges takes a piece that is itself a token as one.
//
// Byte-level models (behind a ByteLevel pre-tokenizer) get raw bytes: their vocabulary is turned
// from GPT-2's printable alphabet back into bytes when it is read, so that no piece is re-spelled
// at encode time; each byte is then a unit, as each of its printable characters is for the library.
//
// Results of pieces shorter than 256 bytes are kept in a bounded cache (per model, shared by the
// threads that encode with it, behind sharded locks).

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "flat_maps.h"
#include "json_section.h"

namespace fsdpp::data {

class BpeModel {
 public:
  // `byte_level`: pieces come from a ByteLevel pre-tokenizer. ConfigError for a malformed model
  // (an id that is not a non-negative integer, a merge of tokens the vocabulary lacks, dropout).
  BpeModel(const JsonSection& model, bool byte_level);

  // Appends the ids of `piece` (not empty) to `out`.
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const;

  // The vocabulary as the file spells it.
  std::optional<int32_t> token_to_id(std::string_view token) const { return vocab_.find(token); }
  const std::string* id_to_token(int32_t id) const;
  // Entries in the vocabulary (the library's get_vocab_size) and the largest id (-1: none).
  size_t vocab_count() const { return vocab_.size(); }
  int32_t max_id() const { return static_cast<int32_t>(tokens_.size()) - 1; }
  const std::optional<std::string>& unk_token() const { return unk_token_; }

 private:
  // The bounded word cache: piece -> ids.
  class WordCache {
   public:
    bool find(std::string_view word, std::vector<int32_t>& out) const;
    void insert(std::string_view word, const std::vector<int32_t>& ids) const;

   private:
    struct Hash {
      using is_transparent = void;
      size_t operator()(std::string_view s) const;
    };
    struct Shard {
      std::mutex mutex;
      std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> words;
    };
    static constexpr size_t kShards = 16;
    static constexpr size_t kWordsPerShard = 4096;
    mutable std::array<Shard, kShards> shards_;
  };

  // The id of one unit (a byte or a character) at the start/end of its piece; -1 when the
  // vocabulary lacks it.
  int32_t unit_id(std::string_view unit, bool first, bool last) const;
  // The ids a unit the vocabulary lacks falls back to (<0xXX> per byte of the unit as spelled in
  // the vocabulary, with prefix/suffix); empty when one of them is missing.
  bool fallback_ids(std::string_view unit, bool first, bool last, std::vector<int32_t>& out) const;
  void initial_ids(std::string_view piece, std::vector<int32_t>& ids, std::vector<uint32_t>& lens) const;
  void merge(std::vector<int32_t>& ids, std::vector<uint32_t>& lens) const;
  void merge_with_heap(std::vector<int32_t>& ids, std::vector<uint32_t>& lens) const;

  bool byte_level_;
  StringIdMap vocab_;     // as the file spells it
  StringIdMap units_;     // what pieces are looked up in: raw bytes when byte_level_
  std::vector<std::string> tokens_;  // id -> token as the file spells it
  std::vector<bool> has_token_;
  PairMap merges_;
  std::optional<std::string> unk_token_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::string prefix_, suffix_;                  // as units_ spells them
  std::string prefix_spelled_, suffix_spelled_;  // as the file spells them
  std::array<int32_t, 256> single_byte_ids_{};   // unit_id of a one-byte unit, no prefix/suffix
  std::array<int32_t, 256> fallback_byte_ids_{};  // id of "<0xXX>", -1 if absent
  WordCache cache_;
};

}  // namespace fsdpp::data
