#pragma once
// tokenizer.json's "decoder": the tokens of some ids back to text, as the tokenizers library's
// decoders do it (each step maps the list of token strings to another list; the result is their
// concatenation).

#include <memory>
#include <string>
#include <vector>

#include "json_section.h"

namespace fsdpp::data {

class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// The decoder `section` describes (not null). ConfigError naming an unsupported type and listing
// the supported ones.
std::unique_ptr<TokenDecoder> make_decoder(const JsonSection& section);

}  // namespace fsdpp::data
