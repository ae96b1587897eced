#pragma once
// model.init_from: a new run that starts from trained weights (fine-tuning), as opposed to a
// resume. The source is an fsdpp checkpoint of any layout or a Hugging Face model directory; the
// run takes its model shape and (when it holds one) its tokenizer, and starts at step 1 with a
// fresh optimizer, schedule and data position.

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fsdpp/data/tokenizer.h"
#include "fsdpp/dist/process_group.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/train/config.h"

namespace fsdpp::train::detail {

class InitSource {
 public:
  // Reads the source's model config and tokenizer (not its weights yet). Throws ConfigError
  // naming the path when it is neither kind of directory.
  explicit InitSource(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const models::LlamaConfig& config() const { return config_; }
  // The tokenizer stored with the weights; nullptr when the source holds none.
  std::unique_ptr<data::Tokenizer> take_tokenizer() { return std::move(tokenizer_); }

  // Puts the source's shape into `model` and returns, for each key the YAML set otherwise, a
  // note "model.dim: 128 in the config, 32 in DIR".
  std::vector<std::string> apply_shape(ModelSection& model) const;

  // Loads the weights: a Hugging Face directory into the model before fully_shard (every rank
  // reads the whole file), an fsdpp checkpoint after it (each rank reads its rows, resharding).
  // A tensor of another shape is a CheckpointError naming it and both shapes.
  void load_before_sharding(models::Llama& model) const;
  void load_after_sharding(models::Llama& model,
                           const std::shared_ptr<dist::ProcessGroup>& group) const;

 private:
  std::filesystem::path dir_;
  bool hf_ = false;
  models::LlamaConfig config_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
};

}  // namespace fsdpp::train::detail
