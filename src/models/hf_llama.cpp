// Hugging Face Llama <-> fsdpp Llama: config, names, RoPE row order. See
// include/fsdpp/models/hf_llama.h.
#include "fsdpp/models/hf_llama.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <map>
#include <set>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "hf_directory.h"
#include "hf_names.h"

namespace fs = std::filesystem;
using namespace fsdpp::models::detail;  // hf_directory.h, hf_names.h: json, field, ...

namespace fsdpp::models {
namespace {

// Every parameter a Llama of this config has, with its shape, and their Hugging Face names.
HfModel hf_model(const LlamaConfig& c) {
  const int64_t D = c.dim, hd = c.head_dim(), H = c.n_heads, Hkv = c.kv_heads(), F = c.ffn_hidden_dim();
  auto layer = [&](TensorShapes& s, const std::string& p, int64_t) {
    s.add(p + "attention.wq.weight", {H * hd, D});
    s.add(p + "attention.wk.weight", {Hkv * hd, D});
    s.add(p + "attention.wv.weight", {Hkv * hd, D});
    s.add(p + "attention.wo.weight", {D, H * hd});
    s.add(p + "feed_forward.w1.weight", {F, D});
    s.add(p + "feed_forward.w2.weight", {D, F});
    s.add(p + "feed_forward.w3.weight", {F, D});
    s.add(p + "attention_norm.weight", {D});
    s.add(p + "ffn_norm.weight", {D});
  };
  HfModel m = hf_decoder("Llama", {"tok_embeddings.weight", "norm.weight", "output.weight"},
                         c.vocab_size, D, c.n_layers, c.tie_embeddings, layer);
  m.names.layer_parts = {
      {"attention.wq.weight", "self_attn.q_proj.weight"},
      {"attention.wk.weight", "self_attn.k_proj.weight"},
      {"attention.wv.weight", "self_attn.v_proj.weight"},
      {"attention.wo.weight", "self_attn.o_proj.weight"},
      {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
      {"feed_forward.w3.weight", "mlp.up_proj.weight"},
      {"feed_forward.w2.weight", "mlp.down_proj.weight"},
      {"attention_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
  };
  return m;
}

// (heads*hd, in): fsdpp (interleaved pairs) -> HF (halves), and back.
at::Tensor to_hf_rows(const at::Tensor& w, int64_t heads, int64_t hd) {
  const int64_t in = w.size(1);
  return w.reshape({heads, hd / 2, 2, in}).transpose(1, 2).reshape({heads * hd, in}).contiguous();
}
at::Tensor from_hf_rows(const at::Tensor& w, int64_t heads, int64_t hd) {
  const int64_t in = w.size(1);
  return w.reshape({heads, 2, hd / 2, in}).transpose(1, 2).reshape({heads * hd, in}).contiguous();
}

}  // namespace

std::string llama_config_to_json(const LlamaConfig& c) {
  json j;
  j["format"] = "fsdpp.llama_config";
  j["vocab_size"] = c.vocab_size;
  j["dim"] = c.dim;
  j["n_layers"] = c.n_layers;
  j["n_heads"] = c.n_heads;
  j["n_kv_heads"] = c.kv_heads();
  j["ffn_hidden"] = c.ffn_hidden_dim();
  j["multiple_of"] = c.multiple_of;
  j["max_seq_len"] = c.max_seq_len;
  j["norm_eps"] = c.norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["tie_embeddings"] = c.tie_embeddings;
  j["seed"] = c.seed;
  j["init_std"] = c.init_std;
  return j.dump(2) + "\n";
}

LlamaConfig llama_config_from_json(const std::string& text, const std::string& source) {
  const json j = parse_json(text, source);
  FSDPP_CHECK_AS(ConfigError, j.is_object() && j.value("format", std::string()) == "fsdpp.llama_config",
                 "[models] '{}' is not an fsdpp model config (expected \"format\": "
                 "\"fsdpp.llama_config\")", source);
  LlamaConfig c;
  c.vocab_size = field<int64_t>(j, "vocab_size", source);
  c.dim = field<int64_t>(j, "dim", source);
  c.n_layers = field<int64_t>(j, "n_layers", source);
  c.n_heads = field<int64_t>(j, "n_heads", source);
  c.n_kv_heads = field<int64_t>(j, "n_kv_heads", source, c.n_kv_heads);
  c.ffn_hidden = field<int64_t>(j, "ffn_hidden", source, c.ffn_hidden);
  c.multiple_of = field<int64_t>(j, "multiple_of", source, c.multiple_of);
  c.max_seq_len = field<int64_t>(j, "max_seq_len", source, c.max_seq_len);
  c.norm_eps = field<double>(j, "norm_eps", source, c.norm_eps);
  c.rope_theta = field<double>(j, "rope_theta", source, c.rope_theta);
  c.tie_embeddings = field<bool>(j, "tie_embeddings", source, c.tie_embeddings);
  c.seed = field<uint64_t>(j, "seed", source, c.seed);
  c.init_std = field<double>(j, "init_std", source, c.init_std);
  c.validate();
  return c;
}

LlamaConfig llama_config_from_hf(const std::string& config_json, const std::string& source) {
  const json j = parse_json(config_json, source);
  check_model_type(j, source, "llama");
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    FSDPP_CHECK_AS(ConfigError, !field<bool>(j, bias, source, false),
                   "[models] '{}': {}=true is not supported (fsdpp's Llama has no biases)", source, bias);
  }
  LlamaConfig c;
  c.vocab_size = field<int64_t>(j, "vocab_size", source);
  c.dim = field<int64_t>(j, "hidden_size", source);
  c.n_layers = field<int64_t>(j, "num_hidden_layers", source);
  c.n_heads = field<int64_t>(j, "num_attention_heads", source);
  c.n_kv_heads = field<int64_t>(j, "num_key_value_heads", source, c.n_heads);
  c.ffn_hidden = field<int64_t>(j, "intermediate_size", source);
  c.max_seq_len = field<int64_t>(j, "max_position_embeddings", source, int64_t{2048});
  c.norm_eps = field<double>(j, "rms_norm_eps", source, 1e-6);
  c.tie_embeddings = field<bool>(j, "tie_word_embeddings", source, false);
  c.init_std = field<double>(j, "initializer_range", source, 0.02);
  c.rope_theta = read_rope_theta(j, source);
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    const int64_t hd = field<int64_t>(j, "head_dim", source);
    FSDPP_CHECK_AS(ConfigError, c.n_heads > 0 && hd * c.n_heads == c.dim,
                   "[models] '{}': head_dim {} is not hidden_size / num_attention_heads = {} / {}; "
                   "fsdpp's Llama needs head_dim * heads == hidden_size", source, hd, c.dim, c.n_heads);
  }
  c.validate();
  return c;
}

std::string llama_config_to_hf(const LlamaConfig& c) {
  json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.ffn_hidden_dim();
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.kv_heads();
  j["head_dim"] = c.head_dim();
  j["max_position_embeddings"] = c.max_seq_len;
  j["rms_norm_eps"] = c.norm_eps;
  write_decoder_keys(j, c.rope_theta);
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["mlp_bias"] = false;
  j["initializer_range"] = c.init_std;
  j["torch_dtype"] = "float32";
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

namespace {

// Rows of fsdpp's tensors from Hugging Face's, after checking that every tensor the config
// implies is there with its shape and nothing else is (HF's rotary inv_freq buffers skipped).
// wq and wk come in rotate-half row order: a range of fsdpp rows reads the whole heads it
// touches and permutes them.
RowReader llama_rows_from_hf(const LlamaConfig& cfg, std::shared_ptr<const detail::HfSource> hf) {
  const HfModel want = hf_model(cfg);
  std::set<std::string> theirs;
  for (const auto& [n, shape] : want.shapes.list()) theirs.insert(want.names.to_hf(n));
  check_no_other_hf_tensors(*hf, theirs, cfg.tie_embeddings, "fsdpp's Llama");
  for (const auto& [n, shape] : want.shapes.list()) {
    const std::string hf_name = want.names.to_hf(n);
    FSDPP_CHECK_AS(ConfigError, hf->contains(hf_name),
                   "[models] tensor '{}' (fsdpp '{}') is missing from the Hugging Face checkpoint",
                   hf_name, n);
    check_shape(hf_name, hf->shape(hf_name), shape);
  }
  const int64_t hd = cfg.head_dim();
  return [hf, want, hd](const std::string& name, int64_t first, int64_t rows) -> at::Tensor {
    check_known_parameter(want, name);
    const std::string theirs = want.names.to_hf(name);
    if (!name.ends_with("attention.wq.weight") && !name.ends_with("attention.wk.weight")) {
      return hf->rows(theirs, first, rows);
    }
    const int64_t h0 = first / hd, h1 = (first + rows + hd - 1) / hd;
    auto heads = from_hf_rows(hf->rows(theirs, h0 * hd, (h1 - h0) * hd), h1 - h0, hd);
    return heads.narrow(0, first - h0 * hd, rows).contiguous();
  };
}

}  // namespace

NamedTensors llama_tensors_from_hf(const LlamaConfig& cfg, const NamedTensors& hf) {
  const auto read = llama_rows_from_hf(cfg, std::make_shared<detail::HfMemory>(hf));
  const HfModel model = hf_model(cfg);
  NamedTensors out;
  for (const auto& [n, shape] : model.shapes.list()) out.emplace_back(n, read(n, 0, shape[0]));
  return out;
}

void load_hf_llama_rows(const fs::path& dir, const LlamaConfig& cfg,
                        const std::vector<torch::nn::Module*>& parts, const InitOptions& options) {
  load_rows(parts, llama_rows_from_hf(cfg, std::make_shared<detail::HfFiles>(dir)), options);
}

NamedTensors llama_tensors_to_hf(const LlamaConfig& cfg, const NamedTensors& fsdpp) {
  NamedTensors parameters;  // the rotary tables are derived, in no checkpoint
  for (const auto& [name, t] : fsdpp) {
    if (!is_non_persistent_buffer(name)) parameters.emplace_back(name, t);
  }
  // wq and wk in Hugging Face's rotate-half row order.
  auto emit = [&cfg](const std::string& n, const std::string& hf_name, at::Tensor t,
                     NamedTensors& out) {
    if (n.ends_with("attention.wq.weight")) t = to_hf_rows(t, cfg.n_heads, cfg.head_dim());
    if (n.ends_with("attention.wk.weight")) t = to_hf_rows(t, cfg.kv_heads(), cfg.head_dim());
    out.emplace_back(hf_name, t);
  };
  return tensors_to_hf(hf_model(cfg), parameters, emit);
}

HfLlama load_hf_llama(const fs::path& dir) {
  HfLlama out;
  out.config = llama_config_from_hf(detail::read_hf_config(dir), (dir / "config.json").string());
  out.tensors = llama_tensors_from_hf(out.config, detail::read_hf_tensors(dir));
  return out;
}

void save_hf_llama(const fs::path& dir, const LlamaConfig& cfg, const NamedTensors& fsdpp,
                   const std::map<std::string, std::string>& extra_files) {
  std::map<std::string, std::string> files = extra_files;
  files["config.json"] = llama_config_to_hf(cfg);
  detail::write_hf_directory(dir, llama_tensors_to_hf(cfg, fsdpp), files);
}

void load_named_tensors(torch::nn::Module& model, const NamedTensors& tensors) {
  auto params = model.named_parameters(/*recurse=*/true);
  std::set<std::string> seen;
  at::NoGradGuard no_grad;
  for (const auto& [name, t] : tensors) {
    auto* p = params.find(name);
    FSDPP_CHECK_AS(ConfigError, p != nullptr, "[models] the model has no parameter '{}'", name);
    FSDPP_CHECK_AS(ConfigError, p->sizes() == t.sizes(), "[models] '{}' has shape {} in the model but {} given",
                   name, p->sizes().vec(), t.sizes().vec());
    p->copy_(t);
    seen.insert(name);
  }
  for (const auto& item : params) {
    FSDPP_CHECK_AS(ConfigError, seen.count(item.key()), "[models] no tensor given for parameter '{}'",
                   item.key());
  }
}

}  // namespace fsdpp::models
