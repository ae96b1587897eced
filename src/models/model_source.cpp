// A pretrained model from a directory (model_source.h).
#include "fsdpp/models/model_source.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/data/tokenizer_files.h"
#include "fsdpp/dist/agree.h"
#include "fsdpp/models/hf_llama.h"
#include "fsdpp/models/hf_qwen3_moe.h"
#include "fsdpp/state/state_dict.h"

namespace fs = std::filesystem;

namespace fsdpp::models {
namespace {

std::string read_text(const fs::path& p, const std::string& key) {
  std::ifstream in(p, std::ios::binary);
  FSDPP_CHECK_AS(ConfigError, in.good(), "[train] {}: cannot read '{}'", key, p.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The "model_type" (Hugging Face) or "format" (fsdpp's Llama) of a config file; "" when absent.
std::string kind_of(const std::string& text, const fs::path& p, const std::string& key) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    FSDPP_THROW(ConfigError, "[train] {}: '{}' is not JSON ({})", key, p.string(), e.what());
  }
  FSDPP_CHECK_AS(ConfigError, j.is_object(), "[train] {}: '{}' is not a JSON object", key,
                 p.string());
  if (j.contains("format") && j["format"].is_string()) return j["format"].get<std::string>();
  if (j.contains("model_type") && j["model_type"].is_string()) {
    return j["model_type"].get<std::string>();
  }
  return "";
}

}  // namespace

ModelSource::ModelSource(const fs::path& dir, std::string key) : dir_(dir), key_(std::move(key)) {
  FSDPP_CHECK_AS(ConfigError, fs::is_directory(dir),
                 "[train] {}='{}' is not a directory; expected an fsdpp checkpoint "
                 "(checkpoint-<step>) or a Hugging Face model directory (config.json + "
                 "safetensors) of a Llama or a Qwen3-MoE",
                 key_, dir.string());
  fs::path config_file;
  if (fs::exists(dir / "index.json")) {
    config_file = dir / "model_config.json";
    FSDPP_CHECK_AS(ConfigError, fs::exists(config_file),
                   "[train] {}='{}' has no model_config.json; cannot tell the model's shape", key_,
                   dir.string());
  } else {
    config_file = dir / "config.json";
    FSDPP_CHECK_AS(ConfigError, fs::exists(config_file),
                   "[train] {}='{}' has neither index.json (an fsdpp checkpoint) nor config.json "
                   "(a Hugging Face model)",
                   key_, dir.string());
    hf_ = true;
  }
  const std::string text = read_text(config_file, key_);
  // fsdpp's checkpoints of a Qwen3-MoE record Hugging Face's config.json (causal_lm.h).
  if (kind_of(text, config_file, key_) == "qwen3_moe") {
    qwen3_moe_ = qwen3_moe_config_from_hf(text, config_file.string());
  } else if (hf_) {
    llama_ = llama_config_from_hf(text, config_file.string());
  } else {
    llama_ = llama_config_from_json(text, config_file.string());
  }
  // The model's own tokenizer: fsdpp's files (a checkpoint), else a Hugging Face model's
  // tokenizer.json (with its tokenizer_config.json), else a SentencePiece .model.
  tokenizer_ = data::model_tokenizer(dir);
}

int64_t ModelSource::vocab_size() const {
  return qwen3_moe_ ? qwen3_moe_->vocab_size : llama_.vocab_size;
}

int64_t ModelSource::hidden_size() const {
  return qwen3_moe_ ? qwen3_moe_->hidden_size : llama_.dim;
}

int64_t ModelSource::num_layers() const {
  return qwen3_moe_ ? qwen3_moe_->num_hidden_layers : llama_.n_layers;
}

std::unique_ptr<CausalLM> ModelSource::build(uint64_t seed, at::Device device) const {
  if (qwen3_moe_) {
    auto c = *qwen3_moe_;
    c.seed = seed;
    return causal_lm(Qwen3Moe(c, device));
  }
  auto c = llama_;
  c.seed = seed;
  return causal_lm(Llama(c, device));
}

void ModelSource::load_whole(CausalLM& model) {
  if (!hf_) return;
  if (qwen3_moe_) {
    load_named_tensors(model.module(), load_hf_qwen3_moe(dir_).tensors);
  } else {
    load_named_tensors(model.module(), load_hf_llama(dir_).tensors);
  }
  loaded_whole_ = true;
}

void ModelSource::load_after_sharding(CausalLM& model,
                                      const std::shared_ptr<dist::ProcessGroup>& group) const {
  load_after_sharding(std::vector<torch::nn::Module*>{&model.module()}, group);
}

void ModelSource::load_after_sharding(const std::vector<torch::nn::Module*>& parts,
                                      const std::shared_ptr<dist::ProcessGroup>& group) const {
  if (hf_) {
    if (loaded_whole_) return;  // into the whole model before it was sharded (or cut)
    // Each rank its rows, straight from the files; one rank's failure stops them all.
    auto load = [&] {
      if (qwen3_moe_) {
        load_hf_qwen3_moe_rows(dir_, *qwen3_moe_, parts);
      } else {
        load_hf_llama_rows(dir_, llama_, parts);
      }
    };
    if (group) {
      dist::agree_on_failure(*group, fmt::format("loading {}='{}'", key_, dir_.string()), load);
    } else {
      load();
    }
    return;
  }
  state::LoadOptions lo;
  lo.skip_buffer = [](const std::string& n) { return is_non_persistent_buffer(n); };
  state::load_state_dict(dir_, parts, /*optimizer=*/nullptr, group, lo);
}

}  // namespace fsdpp::models
