#pragma once
// tokenizer_config.json as transformers reads what fsdpp needs of it (tokenizer_json.h).

#include <string>

#include "fsdpp/data/tokenizer_json.h"

namespace fsdpp::data {

// `where` names the file in errors. ConfigError for invalid JSON or a field of the wrong kind.
TokenizerConfig read_tokenizer_config(const std::string& text, const std::string& where);

}  // namespace fsdpp::data
