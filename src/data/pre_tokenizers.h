#pragma once
// tokenizer.json's "pre_tokenizer": how a normalized piece is cut into the words the model sees.
//
// A Sequence is flattened into its steps (each cuts every piece the previous one made, which is
// what the library's Sequence does). ByteLevel is the one step that also re-spells the text
// (every byte as GPT-2's printable character): fsdpp does that inside the BPE model instead, on
// the vocabulary once rather than on every piece, so ByteLevel must be the last step.

#include <memory>
#include <vector>

#include "json_section.h"
#include "text_pieces.h"

namespace fsdpp::data {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Appends the non-empty pieces `piece` is cut into to `out`; new strings go into `arena`.
  virtual void split(const TextPiece& piece, std::vector<TextPiece>& out, PieceArena& arena) const = 0;
};

struct PreTokenizerSteps {
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  bool byte_level = false;  // the last step is ByteLevel: the model reads bytes
};

// The steps `section` describes (not null). ConfigError naming an unsupported type and listing
// the supported ones, or a ByteLevel that is not last.
PreTokenizerSteps make_pre_tokenizer(const JsonSection& section);

}  // namespace fsdpp::data
