#pragma once
// A pretrained model from a directory: model.init_from (a new run that starts from trained
// weights, as opposed to a resume) and distillation.teacher. The source is an fsdpp checkpoint
// of any layout or a Hugging Face model directory, of a Llama or a Qwen3-MoE; the model's shape
// comes from the source (model_config.json of a checkpoint, config.json of a Hugging Face
// directory), and its tokenizer when it holds one.
//
//   models::ModelSource source("runs/base/checkpoint-100", "model.init_from");
//   auto lm = source.build(/*seed=*/42, at::kMeta);    // its shape, without storage
//   ... parallelize, to_empty ...
//   source.load_after_sharding(roots, world->group());  // each rank its rows

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fsdpp/data/tokenizer.h"
#include "fsdpp/dist/process_group.h"
#include "fsdpp/models/causal_lm.h"
#include "fsdpp/models/hf_checkpoint.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/qwen3_moe.h"

namespace fsdpp::models {

class ModelSource {
 public:
  // Reads the source's model config and tokenizer (not its weights yet). `key` names the config
  // key that gave the directory in messages ("model.init_from", "distillation.teacher"). Throws
  // ConfigError naming the key and the path when it is neither kind of directory.
  ModelSource(const std::filesystem::path& dir, std::string key);

  const std::filesystem::path& dir() const { return dir_; }
  const std::string& key() const { return key_; }
  Architecture architecture() const {
    return qwen3_moe_ ? Architecture::kQwen3Moe : Architecture::kLlama;
  }
  // Its shape: the Llama's config, or the Qwen3-MoE's (architecture() says which is set).
  const LlamaConfig& llama_config() const { return llama_; }
  const std::optional<Qwen3MoeConfig>& qwen3_moe_config() const { return qwen3_moe_; }
  int64_t vocab_size() const;
  int64_t hidden_size() const;  // the width of its hidden states
  int64_t num_layers() const;   // decoder layers
  // The tokenizer stored with the weights; nullptr when the source holds none.
  std::unique_ptr<data::Tokenizer> take_tokenizer() { return std::move(tokenizer_); }

  // A model of the source's shape, on `device` (weights from `seed` until loaded), or on the meta
  // device without storage (deferred initialisation: shard it, fsdpp::to_empty, then load).
  std::unique_ptr<CausalLM> build(uint64_t seed, at::Device device = at::kCPU) const;

  // Loads the weights. A model built whole (model.deferred_init=off): load_whole reads a Hugging
  // Face directory into it before fully_shard (every rank reads the whole file). After
  // fully_shard (and to_empty): an fsdpp checkpoint, or a Hugging Face directory that
  // load_whole did not read, each rank reading only its rows (resharding). Tensors take the
  // parameters' dtype. A tensor of another shape is a CheckpointError (fsdpp) or ConfigError
  // (Hugging Face) naming it and both shapes.
  void load_whole(CausalLM& model);
  void load_after_sharding(CausalLM& model,
                           const std::shared_ptr<dist::ProcessGroup>& group) const;
  // The same into a model held in parts (a pipelined run's stages, state_dict.h).
  void load_after_sharding(const std::vector<torch::nn::Module*>& parts,
                           const std::shared_ptr<dist::ProcessGroup>& group) const;

 private:
  std::filesystem::path dir_;
  std::string key_;
  bool hf_ = false;
  bool loaded_whole_ = false;  // load_whole read the Hugging Face weights
  LlamaConfig llama_;
  std::optional<Qwen3MoeConfig> qwen3_moe_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
};

}  // namespace fsdpp::models
