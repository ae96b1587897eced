#pragma once
// A piece of text on its way through a tokenizer.json pipeline (normalizer, pre-tokenizers,
// model), and where the strings that pieces point into live during one encode call.

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fsdpp::data {

struct TextPiece {
  std::string_view text;
  // How many leading bytes of `text` stand for the first character of the whole input: the
  // tokenizers library's "offsets_original().0 == 0", which Metaspace's prepend_scheme "first"
  // asks. 0 for a piece that starts later in the input.
  uint32_t at_start = 0;
};

// Strings made by normalizers and pre-tokenizers (a prepended space, "▁" for " "); the views
// of pieces into them stay valid until the arena goes (a deque never moves its elements).
class PieceArena {
 public:
  std::string& make() { return strings_.emplace_back(); }
  std::string_view keep(std::string s) { return strings_.emplace_back(std::move(s)); }

 private:
  std::deque<std::string> strings_;
};

// How the tokenizers library cuts a string at a pattern's matches (SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Appends to `out` the pieces of `piece` cut at `matches` (sorted, non-overlapping byte ranges of
// piece.text) with `behavior`; `invert` swaps matches and the text between them. Empty pieces are
// dropped, as PreTokenizedString::split drops them.
void split_at_matches(const TextPiece& piece, const std::vector<std::pair<uint32_t, uint32_t>>& matches,
                      SplitBehavior behavior, bool invert, std::vector<TextPiece>& out);

}  // namespace fsdpp::data
