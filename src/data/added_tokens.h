#pragma once
// tokenizer.json's "added_tokens" as the tokenizers library's AddedVocabulary treats them: found
// in the text before the model ever sees it, each becoming its own id.
//
// Ids: as the library assigns them when it loads the file (add_tokens): a token whose text the
// model's vocabulary (or an earlier added token) has takes that id, any other the next id after
// the vocabulary's size. The "id" in the file is what it was saved with, the same in any file
// the library wrote.
//
// Matching: leftmost, then longest, left to right without overlaps (the library's
// Aho-Corasick, LeftmostLongest). A match of a single_word token inside a word is dropped (and
// the search goes on after it); lstrip/rstrip take the whitespace on that side into the token.
// Tokens with "normalized": false are matched in the raw text; those with true in each normalized
// piece, by their normalized text.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bpe_model.h"
#include "json_section.h"
#include "normalizers.h"

namespace fsdpp::data {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
  // What a normalized token is matched as and decoded from: the normalizer's output for its
  // content (the content itself for the others).
  std::string matched;
};

// A stretch of text: an added token's id, or text for the next stage (token < 0).
struct TextSegment {
  std::string_view text;
  int32_t token = -1;
};

class AddedTokens {
 public:
  // `list` is tokenizer.json's "added_tokens" (null: none). `normalizer` may be null.
  AddedTokens(const JsonSection& root, const nlohmann::json& list, const BpeModel& model,
              const Normalizer* normalizer);

  // Cuts `text` at the tokens matched in raw text (`normalized_pass` false) or in normalized text
  // (true), appending the segments (empty ones dropped) to `out`.
  void split(std::string_view text, bool normalized_pass, std::vector<TextSegment>& out) const;

  const AddedToken* find(int32_t id) const;
  std::optional<int32_t> id_of(std::string_view content) const;
  // Whether `text` is a special token's content (what decode(skip_special_tokens) tests).
  bool is_special_content(std::string_view text) const;
  bool empty() const { return by_id_.empty(); }
  // The largest id (-1: none).
  int32_t max_id() const;

 private:
  // A byte trie over the tokens' matched texts.
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> children;
      int32_t token = -1;  // the token ending here
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    void add(std::string_view text, int32_t token);
    // The longest token starting at text[at], and its length; token -1 when none.
    std::pair<int32_t, size_t> longest_at(std::string_view text, size_t at) const;
  };

  std::unordered_map<int32_t, AddedToken> by_id_;
  std::unordered_map<std::string, int32_t> by_content_;
  // Contents of tokens added as special (the library's special_tokens_set: by text).
  std::unordered_set<std::string> special_contents_;
  Trie raw_, normalized_;
  bool has_raw_ = false, has_normalized_ = false;
};

}  // namespace fsdpp::data
