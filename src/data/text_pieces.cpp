// Cutting a piece at a pattern's matches, as NormalizedString::split does. See text_pieces.h.
#include "text_pieces.h"

#include <algorithm>

namespace fsdpp::data {
namespace {

struct Span {
  uint32_t begin, end;
  bool flag;  // a match (before the behavior), or "remove" (after it)
};

void emit(const TextPiece& piece, uint32_t begin, uint32_t end, std::vector<TextPiece>& out) {
  if (begin == end) return;
  out.push_back({piece.text.substr(begin, end - begin),
                 piece.at_start > begin ? piece.at_start - begin : 0});
}

}  // namespace

void split_at_matches(const TextPiece& piece, const std::vector<std::pair<uint32_t, uint32_t>>& matches,
                      SplitBehavior behavior, bool invert, std::vector<TextPiece>& out) {
  const auto n = static_cast<uint32_t>(piece.text.size());
  if (n == 0) return;
  if (behavior == SplitBehavior::kIsolated) {  // every match and every gap is a piece
    uint32_t prev = 0;
    for (const auto& [s, e] : matches) {
      emit(piece, prev, s, out);
      emit(piece, s, e, out);
      prev = e;
    }
    emit(piece, prev, n, out);
    return;
  }
  // Pattern::find_matches: the text as gaps and matches (an empty match is a span too: it cuts a
  // gap in two).
  std::vector<Span> spans;
  spans.reserve(2 * matches.size() + 1);
  uint32_t prev = 0;
  for (const auto& [s, e] : matches) {
    if (prev != s) spans.push_back({prev, s, invert});
    spans.push_back({s, e, !invert});
    prev = e;
  }
  if (prev != n) spans.push_back({prev, n, invert});

  std::vector<Span> cut;  // flag: removed
  cut.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      cut = spans;
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.flag == previous_match && !cut.empty()) {
          cut.back().end = s.end;
        } else {
          cut.push_back({s.begin, s.end, false});
        }
        previous_match = s.flag;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.flag && !previous_match && !cut.empty()) {
          cut.back().end = s.end;
        } else {
          cut.push_back({s.begin, s.end, false});
        }
        previous_match = s.flag;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->flag && !previous_match && !cut.empty()) {
          cut.back().begin = it->begin;
        } else {
          cut.push_back({it->begin, it->end, false});
        }
        previous_match = it->flag;
      }
      std::reverse(cut.begin(), cut.end());
      break;
    case SplitBehavior::kIsolated:
      break;
  }
  for (const Span& s : cut) {
    if (!s.flag) emit(piece, s.begin, s.end, out);
  }
}

}  // namespace fsdpp::data
