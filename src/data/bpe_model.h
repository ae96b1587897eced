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
//
// SentencePiece-style pieces (Metaspace without split, Llama 2's Replace normalizer) are a whole
// text each. When no token of the vocabulary has "▁" right after another character, no merge can
// join across such a point, so the piece is cut before each "▁" that follows another character
// and the words are merged (and cached) one by one: the same ids, in a fraction of the time. Not
// with ignore_merges, a subword prefix or suffix, which look at the whole piece.

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
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
  // Whether pieces are cut before "▁" (the header's last paragraph).
  bool splits_at_metaspace() const { return split_at_metaspace_; }

  // The vocabulary as the file spells it.
  std::optional<int32_t> token_to_id(std::string_view token) const { return vocab_.find(token); }
  const std::string* id_to_token(int32_t id) const;
  // Entries in the vocabulary (the library's get_vocab_size) and the largest id (-1: none).
  size_t vocab_count() const { return vocab_.size(); }
  int32_t max_id() const { return static_cast<int32_t>(tokens_.size()) - 1; }
  const std::optional<std::string>& unk_token() const { return unk_token_; }

 private:
  // The bounded word cache: piece -> ids, in sharded open-addressing tables whose keys and ids
  // live in one buffer each (no allocation per word); a full shard starts over.
  class WordCache {
   public:
    WordCache();
    bool find(std::string_view word, std::vector<int32_t>& out) const;
    void insert(std::string_view word, const std::vector<int32_t>& ids) const;

   private:
    struct Slot {
      uint64_t hash = 0;
      uint32_t key_at = 0, key_size = 0;  // key_size 0: empty (words are never empty)
      uint32_t ids_at = 0, ids_size = 0;
    };
    struct Shard {
      std::mutex mutex;
      std::vector<Slot> slots;
      std::string keys;
      std::vector<int32_t> ids;
      size_t used = 0;
    };
    static constexpr size_t kShards = 16;
    static constexpr size_t kSlotsPerShard = 8192;  // half of them used at most
    // The slot of `word` in `shard`, or the empty one where it would go.
    static size_t probe(const Shard& shard, std::string_view word, uint64_t hash);
    mutable std::array<Shard, kShards> shards_;
  };

  // tokenize() of one word (a piece, or a part of one that no merge crosses).
  void tokenize_word(std::string_view word, std::vector<int32_t>& out) const;
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
  bool split_at_metaspace_ = false;
  std::string prefix_, suffix_;                  // as units_ spells them
  std::string prefix_spelled_, suffix_spelled_;  // as the file spells them
  std::array<int32_t, 256> single_byte_ids_{};   // unit_id of a one-byte unit, no prefix/suffix
  std::array<int32_t, 256> fallback_byte_ids_{};  // id of "<0xXX>", -1 if absent
  WordCache cache_;
};

}  // namespace fsdpp::data
