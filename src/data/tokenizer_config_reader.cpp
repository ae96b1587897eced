// tokenizer_config.json. See tokenizer_config_reader.h.
#include "tokenizer_config_reader.h"

#include <limits>

#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"

namespace fsdpp::data {
namespace {

// A special token: a string, an AddedToken dict ({"content": "<s>", ...}) or null.
std::optional<std::string> token_of(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const auto& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  FSDPP_THROW(ConfigError, "[data] {}: \"{}\" is {}; expected a string or {{\"content\": ...}}",
              where, key, v.dump());
}

// Present (even as null, which transformers reads as false) or absent.
std::optional<bool> flag_of(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) return std::nullopt;
  const auto& v = j[key];
  if (v.is_null()) return false;
  FSDPP_CHECK_AS(ConfigError, v.is_boolean(), "[data] {}: \"{}\" is {}; expected true or false",
                 where, key, v.dump());
  return v.get<bool>();
}

std::optional<std::string> chat_template_of(const nlohmann::json& j, const std::string& where) {
  if (!j.contains("chat_template") || j["chat_template"].is_null()) return std::nullopt;
  const auto& v = j["chat_template"];
  if (v.is_string()) return v.get<std::string>();
  // Several named templates: transformers uses "default" unless told another name.
  if (v.is_array()) {
    for (const auto& t : v) {
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") &&
          t["template"].is_string()) {
        return t["template"].get<std::string>();
      }
    }
    return std::nullopt;
  }
  FSDPP_THROW(ConfigError,
              "[data] {}: \"chat_template\" is {}; expected a string or a list of "
              "{{\"name\", \"template\"}}",
              where, v.type_name());
}

}  // namespace

TokenizerConfig read_tokenizer_config(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    FSDPP_THROW(ConfigError, "[data] '{}' is not valid JSON: {}", where, e.what());
  }
  FSDPP_CHECK_AS(ConfigError, j.is_object(), "[data] '{}' is {}; expected a JSON object", where,
                 j.type_name());
  TokenizerConfig c;
  c.bos_token = token_of(j, "bos_token", where);
  c.eos_token = token_of(j, "eos_token", where);
  c.pad_token = token_of(j, "pad_token", where);
  c.unk_token = token_of(j, "unk_token", where);
  c.add_bos_token = flag_of(j, "add_bos_token", where);
  c.add_eos_token = flag_of(j, "add_eos_token", where);
  c.chat_template = chat_template_of(j, where);
  // transformers writes 1e30 (VERY_LARGE_INTEGER) for "no limit": no length then.
  if (j.contains("model_max_length") && j["model_max_length"].is_number_integer() &&
      !(j["model_max_length"].is_number_unsigned() &&
        j["model_max_length"].get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()})) {
    c.model_max_length = j["model_max_length"].get<int64_t>();
  }
  return c;
}

}  // namespace fsdpp::data
