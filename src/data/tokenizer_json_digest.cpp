// The identity digest of a tokenizer.json. See tokenizer_json_digest.h.
#include "tokenizer_json_digest.h"

#include <xxhash.h>

#include <fmt/format.h>

#include "fsdpp/common/error.h"

namespace fsdpp::data {

std::string hex_digest(std::string_view bytes) {
  return fmt::format("{:016x}", XXH3_64bits(bytes.data(), bytes.size()));
}

// What decides the ids of a tokenizer.json: its model's kind, vocabulary (sorted: a JSON object),
// merges (as "a b", the form both of the tokenizers library's spellings ["a", "b"] and "a b"
// mean) and byte fallback, and the added tokens' ids and contents. Not the fields a re-save by
// a newer tokenizers library may add or reorder.
std::string hf_json_digest(const nlohmann::json& j, const std::string& where) {
  FSDPP_CHECK_AS(ConfigError, j.is_object() && j.contains("model") && j["model"].is_object(),
                 "[data] '{}' has no \"model\" object; expected a Hugging Face tokenizer.json",
                 where);
  const auto& m = j["model"];
  nlohmann::json key;
  for (const char* field : {"type", "vocab", "byte_fallback", "unk_token"}) {
    if (m.contains(field)) key["model"][field] = m[field];
  }
  if (m.contains("merges") && m["merges"].is_array()) {
    auto& merges = key["model"]["merges"] = nlohmann::json::array();
    for (const auto& merge : m["merges"]) {
      if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
        merges.push_back(merge[0].get<std::string>() + " " + merge[1].get<std::string>());
      } else {
        merges.push_back(merge);
      }
    }
  }
  auto& added = key["added_tokens"] = nlohmann::json::array();
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& t : j["added_tokens"]) {
      if (t.is_object()) added.push_back({t.value("id", -1), t.value("content", std::string())});
    }
  }
  return hex_digest(key.dump());
}

std::string hf_json_digest(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    FSDPP_THROW(ConfigError, "[data] '{}' is not valid JSON: {}", where, e.what());
  }
  return hf_json_digest(j, where);
}

}  // namespace fsdpp::data
