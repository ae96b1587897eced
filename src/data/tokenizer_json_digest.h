#pragma once
// The identity digest of a Hugging Face tokenizer.json (tokenizer_identity.h): what decides the
// ids, less what a re-save by another version of the tokenizers library may add or reorder.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace fsdpp::data {

// XXH3-64 of `bytes` as 16 hex digits.
std::string hex_digest(std::string_view bytes);

// The digest of the model's kind, vocabulary, merges (both spellings as "a b"), byte_fallback and
// unk_token, and the added tokens' ids and contents. `where` names the file in errors.
std::string hf_json_digest(const nlohmann::json& tokenizer_json, const std::string& where);
std::string hf_json_digest(const std::string& text, const std::string& where);

}  // namespace fsdpp::data
