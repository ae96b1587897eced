#pragma once
// Private to src/models: reading a Hugging Face save_pretrained directory, shared by every
// model's converter (hf_llama.cpp, hf_qwen3_moe.cpp): its JSON with typed fields, and its
// safetensors weights, in one file or in the shards an index lists.

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/models/hf_llama.h"  // NamedTensors

namespace fsdpp::models::detail {

using json = nlohmann::ordered_json;

// A file's bytes; ConfigError naming it when it cannot be read.
std::string read_text(const std::filesystem::path& path);
// ConfigError naming `source` when `text` is not JSON.
json parse_json(const std::string& text, const std::string& source);

// A required (no fallback) or defaulted field of an HF config, with its type checked.
template <typename T>
T field(const json& j, const std::string& key, const std::string& source,
        std::optional<T> fallback = std::nullopt) {
  if (!j.contains(key) || j.at(key).is_null()) {
    FSDPP_CHECK_AS(ConfigError, fallback.has_value(),
                   "[models] '{}': config field '{}' is missing", source, key);
    return *fallback;
  }
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    FSDPP_THROW(ConfigError, "[models] '{}': config field '{}' is {}, of the wrong type", source,
                key, j.at(key).dump());
  }
}

// config.json's text; ConfigError when the directory has none.
std::string read_hf_config(const std::filesystem::path& dir);
// Every tensor of model.safetensors, or of the files model.safetensors.index.json's weight_map
// names, under Hugging Face's names.
NamedTensors read_hf_tensors(const std::filesystem::path& dir);

}  // namespace fsdpp::models::detail
