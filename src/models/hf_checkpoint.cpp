// fsdpp checkpoints <-> Hugging Face directories for every architecture. See
// include/fsdpp/models/hf_checkpoint.h.
#include "fsdpp/models/hf_checkpoint.h"

#include <ATen/ATen.h>

#include <map>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fsdpp/common/error.h"
#include "fsdpp/data/hf_tokenizer.h"
#include "fsdpp/data/tokenizer_files.h"
#include "fsdpp/models/hf_llama.h"
#include "fsdpp/models/hf_qwen3_moe.h"
#include "fsdpp/state/consolidate.h"
#include "fsdpp/state/safetensors.h"
#include "hf_directory.h"

namespace fs = std::filesystem;
using fsdpp::models::detail::json;
using fsdpp::models::detail::parse_json;
using fsdpp::models::detail::read_text;

namespace fsdpp::models {
namespace {

std::optional<Architecture> from_class(const std::string& name) {
  if (name == "LlamaForCausalLM") return Architecture::kLlama;
  if (name == "Qwen3MoeForCausalLM") return Architecture::kQwen3Moe;
  return std::nullopt;
}

std::optional<Architecture> from_model_type(const std::string& type) {
  if (type == "llama") return Architecture::kLlama;
  if (type == "qwen3_moe") return Architecture::kQwen3Moe;
  return std::nullopt;
}

}  // namespace

const char* architecture_name(Architecture a) {
  return a == Architecture::kQwen3Moe ? "qwen3_moe" : "llama";
}

Architecture architecture_of_hf_config(const std::string& config_json, const std::string& source) {
  const json j = parse_json(config_json, source);
  FSDPP_CHECK_AS(ConfigError, j.is_object(), "[models] '{}' is not a JSON object", source);
  std::string classes;
  if (j.contains("architectures") && j["architectures"].is_array()) {
    for (const auto& c : j["architectures"]) {
      if (!c.is_string()) continue;
      if (auto a = from_class(c.get<std::string>())) return *a;
      classes += (classes.empty() ? "" : ", ") + c.get<std::string>();
    }
  }
  const std::string type = j.value("model_type", std::string());
  if (auto a = from_model_type(type)) return *a;
  FSDPP_THROW(ConfigError,
              "[models] '{}': architectures [{}], model_type '{}' is not a model fsdpp converts; "
              "expected LlamaForCausalLM ('llama') or Qwen3MoeForCausalLM ('qwen3_moe')",
              source, classes, type);
}

Architecture architecture_of_model_config(const std::string& text, const std::string& source) {
  const json j = parse_json(text, source);
  FSDPP_CHECK_AS(ConfigError, j.is_object(), "[models] '{}' is not a JSON object", source);
  if (j.value("format", std::string()) == "fsdpp.llama_config") return Architecture::kLlama;
  if (j.value("model_type", std::string()) == "qwen3_moe") return Architecture::kQwen3Moe;
  FSDPP_THROW(ConfigError,
              "[models] '{}' describes no model fsdpp knows: expected \"format\": "
              "\"fsdpp.llama_config\" (a Llama) or \"model_type\": \"qwen3_moe\" (found format "
              "'{}', model_type '{}')",
              source, j.value("format", std::string()), j.value("model_type", std::string()));
}

std::string describe_model_config(const std::string& text, const std::string& source) {
  if (architecture_of_model_config(text, source) == Architecture::kLlama) {
    const auto c = llama_config_from_json(text, source);
    const int64_t D = c.dim, hd = c.head_dim(), F = c.ffn_hidden_dim();
    const int64_t layer = D * c.n_heads * hd * 2 + 2 * c.kv_heads() * hd * D + 3 * D * F + 2 * D;
    const int64_t total = c.vocab_size * D * (c.tie_embeddings ? 1 : 2) + c.n_layers * layer + D;
    return fmt::format("  model: llama, dim {} x {} layers, {} heads ({} kv), ffn {}, vocab {}, "
                       "max_seq_len {}{}\n  {} parameters\n",
                       D, c.n_layers, c.n_heads, c.kv_heads(), F, c.vocab_size, c.max_seq_len,
                       c.tie_embeddings ? ", tied embeddings" : "", total);
  }
  const auto c = qwen3_moe_config_from_hf(text, source);
  const int64_t D = c.hidden_size, hd = c.head_dim, E = c.num_experts, I = c.moe_intermediate_size;
  const int64_t attn = D * c.num_attention_heads * hd * 2 + 2 * c.num_key_value_heads * hd * D +
                       2 * hd + 2 * D;  // q, o, k, v, q/k norms, the layer's two norms
  int64_t total = c.vocab_size * D * (c.tie_word_embeddings ? 1 : 2) + D, active = total;
  std::vector<int64_t> sparse;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    total += attn;
    active += attn;
    if (c.is_sparse_layer(i)) {
      sparse.push_back(i);
      total += E * D + 3 * E * I * D;
      active += E * D + 3 * c.num_experts_per_tok * I * D;
    } else {
      total += 3 * D * c.intermediate_size;
      active += 3 * D * c.intermediate_size;
    }
  }
  return fmt::format(
      "  model: qwen3_moe, hidden {} x {} layers, {} heads ({} kv) of {}, vocab {}, "
      "max_position_embeddings {}{}\n"
      "  experts: {} per sparse layer (moe_intermediate_size {}), top {}{}, {} sparse layer(s) "
      "[{}]{}\n"
      "  {} parameters, {} active per token\n",
      D, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, hd, c.vocab_size,
      c.max_position_embeddings, c.tie_word_embeddings ? ", tied embeddings" : "", E, I,
      c.num_experts_per_tok, c.norm_topk_prob ? " renormalised" : "", sparse.size(),
      fmt::join(sparse, ", "),
      static_cast<int64_t>(sparse.size()) < c.num_hidden_layers
          ? fmt::format(", dense MLPs of {}", c.intermediate_size)
          : std::string(),
      total, active);
}

HfConversion import_hf_checkpoint(const fs::path& hf_dir, const fs::path& out) {
  HfConversion r;
  r.architecture = architecture_of_hf_config(detail::read_hf_config(hf_dir),
                                             (hf_dir / "config.json").string());
  // The model's tokenizer travels with it: fsdpp's own files when fsdpp exported the directory,
  // else its tokenizer.json (with tokenizer_config.json) or tokenizer.model.
  std::map<std::string, std::string> files;
  if (const auto tok = data::model_tokenizer(hf_dir)) {
    files = data::tokenizer_files(*tok);
    r.tokenizer = true;
  }
  NamedTensors tensors;
  if (r.architecture == Architecture::kLlama) {
    auto hf = load_hf_llama(hf_dir);
    files["model_config.json"] = llama_config_to_json(hf.config);
    tensors = std::move(hf.tensors);
  } else {
    auto hf = load_hf_qwen3_moe(hf_dir);
    // fsdpp-train's own model_config.json for this architecture, in the tensors' dtype.
    files["model_config.json"] =
        qwen3_moe_config_to_hf(hf.config, hf.tensors.front().second.scalar_type());
    tensors = std::move(hf.tensors);
  }
  state::write_full_checkpoint(out, tensors, {}, files);
  r.tensors = static_cast<int64_t>(tensors.size());
  r.files = 1;
  return r;
}

HfConversion export_hf_checkpoint(const fs::path& ckpt, const fs::path& out,
                                  const fs::path& model_config, const HfExportOptions& options) {
  const fs::path cfg_path = model_config.empty() ? ckpt / "model_config.json" : model_config;
  FSDPP_CHECK_AS(ConfigError, fs::exists(cfg_path),
                 "[models] '{}' has no model_config.json (fsdpp-train writes one into every "
                 "checkpoint); give the model's config with --model-config FILE", ckpt.string());
  const std::string cfg_text = read_text(cfg_path);
  HfConversion r;
  r.architecture = architecture_of_model_config(cfg_text, cfg_path.string());
  const auto tok = data::load_tokenizer(ckpt);
  std::map<std::string, std::string> files;
  NamedTensors hf;
  int64_t max_len = 0;
  if (r.architecture == Architecture::kLlama) {
    const LlamaConfig cfg = llama_config_from_json(cfg_text, cfg_path.string());
    hf = llama_tensors_to_hf(cfg, state::read_full_model(ckpt));
    files["config.json"] = llama_config_to_hf(cfg);
    max_len = cfg.max_seq_len;
  } else {
    const Qwen3MoeConfig cfg = qwen3_moe_config_from_hf(cfg_text, cfg_path.string());
    hf = qwen3_moe_tensors_to_hf(cfg, state::read_full_model(ckpt));
    files["config.json"] = qwen3_moe_config_to_hf(cfg, hf.front().second.scalar_type());
    max_len = cfg.max_position_embeddings;
  }
  if (tok) {
    for (auto& [name, bytes] : data::hf_tokenizer_files(*tok, max_len)) files[name] = std::move(bytes);
    for (auto& [name, bytes] : data::tokenizer_files(*tok)) files[name] = std::move(bytes);
    r.tokenizer = true;
  }
  r.files = detail::write_hf_directory(out, hf, files, options.max_shard_bytes);
  r.tensors = static_cast<int64_t>(hf.size());
  return r;
}

}  // namespace fsdpp::models
