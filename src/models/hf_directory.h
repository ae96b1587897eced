#pragma once
// Private to src/models: reading a Hugging Face save_pretrained directory, shared by every
// model's converter (hf_llama.cpp, hf_qwen3_moe.cpp): its JSON with typed fields, and its
// safetensors weights, in one file or in the shards an index lists.

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/models/hf_llama.h"  // NamedTensors
#include "fsdpp/state/safetensors.h"

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

// Hugging Face tensors by their names, whole or some rows at a time: what the converters read
// (hf_llama.cpp, hf_qwen3_moe.cpp), from a directory's files or from memory.
class HfSource {
 public:
  virtual ~HfSource() = default;
  virtual std::vector<std::string> names() const = 0;
  virtual bool contains(const std::string& name) const = 0;
  virtual std::vector<int64_t> shape(const std::string& name) const = 0;
  // Rows [first, first + count) along dim 0, as a fresh tensor.
  virtual at::Tensor rows(const std::string& name, int64_t first, int64_t count) const = 0;
  at::Tensor whole(const std::string& name) const;
};

// Tensors held in memory (the converters' NamedTensors entry points).
class HfMemory final : public HfSource {
 public:
  explicit HfMemory(const NamedTensors& tensors);
  std::vector<std::string> names() const override { return names_; }
  bool contains(const std::string& name) const override { return by_name_.count(name) > 0; }
  std::vector<int64_t> shape(const std::string& name) const override;
  at::Tensor rows(const std::string& name, int64_t first, int64_t count) const override;

 private:
  std::vector<std::string> names_;
  std::map<std::string, at::Tensor> by_name_;
};

// The tensors of model.safetensors, or of the files model.safetensors.index.json's weight_map
// names, read from the files when asked for (each file's header at construction): loading a
// rank's rows reads those rows only.
class HfFiles final : public HfSource {
 public:
  explicit HfFiles(const std::filesystem::path& dir);
  std::vector<std::string> names() const override { return names_; }
  bool contains(const std::string& name) const override { return file_of_.count(name) > 0; }
  std::vector<int64_t> shape(const std::string& name) const override;
  at::Tensor rows(const std::string& name, int64_t first, int64_t count) const override;

 private:
  const state::SafetensorsFile& file(const std::string& name) const;
  std::vector<state::SafetensorsFile> files_;
  std::map<std::string, size_t> file_of_;
  std::vector<std::string> names_;
};

// Every tensor of the directory's files, whole, under Hugging Face's names.
NamedTensors read_hf_tensors(const std::filesystem::path& dir);

}  // namespace fsdpp::models::detail
