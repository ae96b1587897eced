#pragma once
// Private to src/models: a Hugging Face save_pretrained directory, shared by every model's
// converter (hf_llama.cpp, hf_qwen3_moe.cpp): its JSON with typed fields, the config keys every
// decoder reads and writes alike, its safetensors weights (in one file or in the shards an index
// lists), and writing one.

#include <ATen/core/Tensor.h>

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

// model_type must be `expected` and hidden_act "silu" (the decoders' SwiGLU); ConfigError
// naming the source otherwise.
void check_model_type(const json& j, const std::string& source, const std::string& expected);
// rope_theta as transformers 4 (rope_theta) or 5 (rope_parameters) writes it; RoPE scaling of
// either is a ConfigError.
double read_rope_theta(const json& j, const std::string& source);
// The keys every decoder's config.json has alike: RoPE for transformers 4 and 5 without
// scaling, silu, no attention bias or dropout.
void write_decoder_keys(json& j, double rope_theta);
// ConfigError "'what' has shape ... but the config gives ..." unless `got` is `want`.
void check_shape(const std::string& what, const std::vector<int64_t>& got,
                 const std::vector<int64_t>& want);

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
// A save_pretrained directory, committed whole or not at all (state::AtomicDir): `hf` as
// model.safetensors, or with max_shard_bytes > 0 as save_pretrained's numbered shards and their
// index, and `files` (name -> contents: config.json, a tokenizer's) beside it. Returns the
// number of safetensors files.
int64_t write_hf_directory(const std::filesystem::path& dir, const NamedTensors& hf,
                           const std::map<std::string, std::string>& files,
                           int64_t max_shard_bytes = 0);

}  // namespace fsdpp::models::detail
