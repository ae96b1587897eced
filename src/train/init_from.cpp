#include "init_from.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/data/tokenizer_files.h"
#include "fsdpp/dist/agree.h"
#include "fsdpp/models/hf_llama.h"
#include "fsdpp/models/hf_qwen3_moe.h"
#include "fsdpp/state/state_dict.h"

namespace fs = std::filesystem;

namespace fsdpp::train::detail {
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
    qwen3_moe_ = models::qwen3_moe_config_from_hf(text, config_file.string());
  } else if (hf_) {
    llama_ = models::llama_config_from_hf(text, config_file.string());
  } else {
    llama_ = models::llama_config_from_json(text, config_file.string());
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

std::vector<std::string> ModelSource::apply_shape(ModelSection& m) const {
  std::vector<std::string> notes;
  auto take = [&](const char* k, auto& field, auto value) {
    if (field != value) {
      notes.push_back(fmt::format("model.{}: {} in the config, {} in {}", k, field, value,
                                  dir_.string()));
    }
    field = value;
  };
  const auto arch = architecture();
  if (m.architecture != arch) {
    notes.push_back(fmt::format("model.architecture: {} in the config, {} in {}",
                                m.architecture.name(), config::Choice<ModelArchitecture>(arch).name(),
                                dir_.string()));
    m.architecture = arch;
  }
  // 0 means "derived" for some keys (n_heads, Llama's rule, the tokenizer's): not a change.
  std::vector<std::string> derived = {"model.ffn_hidden: 0 ", "model.vocab_size: 0 ",
                                      "model.moe_intermediate_size: 0 ", "model.head_dim: 0 "};
  if (qwen3_moe_) {
    const auto& c = *qwen3_moe_;
    take("vocab_size", m.vocab_size, c.vocab_size);
    take("dim", m.dim, c.hidden_size);
    take("n_layers", m.n_layers, c.num_hidden_layers);
    take("n_heads", m.n_heads, c.num_attention_heads);
    take("n_kv_heads", m.n_kv_heads, c.num_key_value_heads);
    take("ffn_hidden", m.ffn_hidden, c.intermediate_size);
    take("head_dim", m.head_dim, c.head_dim);
    take("num_experts", m.num_experts, c.num_experts);
    take("num_experts_per_tok", m.num_experts_per_tok, c.num_experts_per_tok);
    take("moe_intermediate_size", m.moe_intermediate_size, c.moe_intermediate_size);
    take("norm_topk_prob", m.norm_topk_prob, c.norm_topk_prob);
    take("router_aux_loss_coef", m.router_aux_loss_coef, c.router_aux_loss_coef);
    take("decoder_sparse_step", m.decoder_sparse_step, c.decoder_sparse_step);
    take("mlp_only_layers", m.mlp_only_layers, c.mlp_only_layers);
    take("max_seq_len", m.max_seq_len, c.max_position_embeddings);
    take("norm_eps", m.norm_eps, c.rms_norm_eps);
    take("rope_theta", m.rope_theta, c.rope_theta);
    take("tie_embeddings", m.tie_embeddings, c.tie_word_embeddings);
    if (c.num_key_value_heads == c.num_attention_heads) derived.push_back("model.n_kv_heads: 0 ");
  } else {
    const auto& c = llama_;
    take("vocab_size", m.vocab_size, c.vocab_size);
    take("dim", m.dim, c.dim);
    take("n_layers", m.n_layers, c.n_layers);
    take("n_heads", m.n_heads, c.n_heads);
    take("n_kv_heads", m.n_kv_heads, c.kv_heads());
    take("ffn_hidden", m.ffn_hidden, c.ffn_hidden_dim());
    take("max_seq_len", m.max_seq_len, c.max_seq_len);
    take("norm_eps", m.norm_eps, c.norm_eps);
    take("rope_theta", m.rope_theta, c.rope_theta);
    take("tie_embeddings", m.tie_embeddings, c.tie_embeddings);
    if (c.kv_heads() == c.n_heads) derived.push_back("model.n_kv_heads: 0 ");
  }
  notes.erase(std::remove_if(notes.begin(), notes.end(),
                             [&](const std::string& n) {
                               return std::any_of(derived.begin(), derived.end(),
                                                  [&](const std::string& d) {
                                                    return n.rfind(d, 0) == 0;
                                                  });
                             }),
              notes.end());
  return notes;
}

std::unique_ptr<models::CausalLM> ModelSource::build(uint64_t seed, at::Device device) const {
  if (qwen3_moe_) {
    auto c = *qwen3_moe_;
    c.seed = seed;
    return models::causal_lm(models::Qwen3Moe(c, device));
  }
  auto c = llama_;
  c.seed = seed;
  return models::causal_lm(models::Llama(c, device));
}

void ModelSource::load_whole(models::CausalLM& model) {
  if (!hf_) return;
  if (qwen3_moe_) {
    models::load_named_tensors(model.module(), models::load_hf_qwen3_moe(dir_).tensors);
  } else {
    models::load_named_tensors(model.module(), models::load_hf_llama(dir_).tensors);
  }
  loaded_whole_ = true;
}

void ModelSource::load_after_sharding(models::CausalLM& model,
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
        models::load_hf_qwen3_moe_rows(dir_, *qwen3_moe_, parts);
      } else {
        models::load_hf_llama_rows(dir_, llama_, parts);
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
  lo.skip_buffer = [](const std::string& n) { return models::is_non_persistent_buffer(n); };
  state::load_state_dict(dir_, parts, /*optimizer=*/nullptr, group, lo);
}

}  // namespace fsdpp::train::detail
