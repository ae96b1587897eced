#pragma once
// A model's weights from a directory: model.init_from (a new run that starts from trained
// weights, as opposed to a resume) and distillation.teacher. The source is an fsdpp checkpoint
// of any layout or a Hugging Face model directory, of a Llama or a Qwen3-MoE; the model's shape
// comes from the source (model_config.json of a checkpoint, config.json of a Hugging Face
// directory), and its tokenizer when it holds one.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fsdpp/data/tokenizer.h"
#include "fsdpp/dist/process_group.h"
#include "fsdpp/models/causal_lm.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/qwen3_moe.h"
#include "fsdpp/train/config.h"

namespace fsdpp::train::detail {

class ModelSource {
 public:
  // Reads the source's model config and tokenizer (not its weights yet). `key` names the config
  // key that gave the directory in messages ("model.init_from", "distillation.teacher"). Throws
  // ConfigError naming the key and the path when it is neither kind of directory.
  ModelSource(const std::filesystem::path& dir, std::string key);

  const std::filesystem::path& dir() const { return dir_; }
  const std::string& key() const { return key_; }
  ModelArchitecture architecture() const {
    return qwen3_moe_ ? ModelArchitecture::QWEN3_MOE : ModelArchitecture::LLAMA;
  }
  int64_t vocab_size() const;
  int64_t hidden_size() const;  // the width of its hidden states
  int64_t num_layers() const;   // decoder layers
  // The tokenizer stored with the weights; nullptr when the source holds none.
  std::unique_ptr<data::Tokenizer> take_tokenizer() { return std::move(tokenizer_); }

  // Puts the source's architecture and shape into `model` and returns, for each key the YAML
  // set otherwise, a note "model.dim: 128 in the config, 32 in DIR".
  std::vector<std::string> apply_shape(ModelSection& model) const;

  // A model of the source's shape, on `device` (weights from `seed` until loaded), or on the meta
  // device without storage (deferred initialisation: shard it, fsdpp::to_empty, then load).
  std::unique_ptr<models::CausalLM> build(uint64_t seed, at::Device device = at::kCPU) const;

  // Loads the weights. A model built whole (model.deferred_init=off): load_whole reads a Hugging
  // Face directory into it before fully_shard (every rank reads the whole file). After
  // fully_shard (and to_empty): an fsdpp checkpoint, or a Hugging Face directory that
  // load_whole did not read, each rank reading only its rows (resharding). Tensors take the
  // parameters' dtype. A tensor of another shape is a CheckpointError (fsdpp) or ConfigError
  // (Hugging Face) naming it and both shapes.
  void load_whole(models::CausalLM& model);
  void load_after_sharding(models::CausalLM& model,
                           const std::shared_ptr<dist::ProcessGroup>& group) const;
  // The same into a model held in parts (a pipelined run's stages, state_dict.h).
  void load_after_sharding(const std::vector<torch::nn::Module*>& parts,
                           const std::shared_ptr<dist::ProcessGroup>& group) const;

 private:
  std::filesystem::path dir_;
  std::string key_;
  bool hf_ = false;
  bool loaded_whole_ = false;  // load_whole read the Hugging Face weights
  models::LlamaConfig llama_;
  std::optional<models::Qwen3MoeConfig> qwen3_moe_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
};

using InitSource = ModelSource;

}  // namespace fsdpp::train::detail
