#pragma once
// tokenizer.json's "normalizer": what the text goes through before the pre-tokenizer, per piece
// between added tokens (so a Prepend("▁") puts "▁" before each such piece, as the library does).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "json_section.h"

namespace fsdpp::data {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` normalized into `out` (cleared first). `at_start` (TextPiece::at_start) follows the
  // leading bytes that stand for the input's first character.
  virtual void normalize(std::string_view text, std::string& out, uint32_t& at_start) const = 0;
};

// The normalizer `section` describes (not null). ConfigError naming an unsupported type and
// listing the supported ones.
std::unique_ptr<Normalizer> make_normalizer(const JsonSection& section);

}  // namespace fsdpp::data
