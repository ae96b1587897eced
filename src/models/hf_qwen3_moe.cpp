// Hugging Face Qwen3-MoE <-> fsdpp Qwen3Moe: config, names, experts stacked and split. See
// include/fsdpp/models/hf_qwen3_moe.h.
#include "fsdpp/models/hf_qwen3_moe.h"

#include <ATen/ATen.h>

#include <map>
#include <set>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "hf_directory.h"
#include "hf_names.h"

namespace fs = std::filesystem;
using namespace fsdpp::models::detail;  // hf_directory.h: json, field, ...

namespace fsdpp::models {
namespace {

// Every fsdpp parameter of this config with its shape, in the model's order, and their Hugging
// Face names: "model." + fsdpp's (experts apart: split_expert_name).
HfModel hf_model(const Qwen3MoeConfig& c) {
  const int64_t D = c.hidden_size, hd = c.head_dim, H = c.num_attention_heads;
  const int64_t Hkv = c.num_key_value_heads, E = c.num_experts, I = c.moe_intermediate_size;
  auto layer = [&](TensorShapes& s, const std::string& p, int64_t i) {
    s.add(p + "self_attn.q_proj.weight", {H * hd, D});
    s.add(p + "self_attn.k_proj.weight", {Hkv * hd, D});
    s.add(p + "self_attn.v_proj.weight", {Hkv * hd, D});
    s.add(p + "self_attn.o_proj.weight", {D, H * hd});
    s.add(p + "self_attn.q_norm.weight", {hd});
    s.add(p + "self_attn.k_norm.weight", {hd});
    if (c.is_sparse_layer(i)) {
      s.add(p + "mlp.experts.gate_proj", {E, I, D});
      s.add(p + "mlp.experts.up_proj", {E, I, D});
      s.add(p + "mlp.experts.down_proj", {E, D, I});
      s.add(p + "mlp.gate.weight", {E, D});
    } else {
      s.add(p + "mlp.gate_proj.weight", {c.intermediate_size, D});
      s.add(p + "mlp.up_proj.weight", {c.intermediate_size, D});
      s.add(p + "mlp.down_proj.weight", {D, c.intermediate_size});
    }
    s.add(p + "input_layernorm.weight", {D});
    s.add(p + "post_attention_layernorm.weight", {D});
  };
  return hf_decoder("Qwen3Moe", {"embed_tokens.weight", "norm.weight", "lm_head.weight"},
                    c.vocab_size, D, c.num_hidden_layers, c.tie_word_embeddings, layer);
}

bool is_stacked_expert(const std::string& name) {
  return name.find(".mlp.experts.") != std::string::npos;
}

// "layers.3.mlp.experts.gate_proj" -> ("model.layers.3.mlp.experts.", "gate_proj").
std::pair<std::string, std::string> split_expert_name(const std::string& name) {
  const auto at = name.rfind('.');
  return {"model." + name.substr(0, at + 1), name.substr(at + 1)};
}

}  // namespace

Qwen3MoeConfig qwen3_moe_config_from_hf(const std::string& config_json, const std::string& source) {
  const json j = parse_json(config_json, source);
  check_model_type(j, source, "qwen3_moe");
  FSDPP_CHECK_AS(ConfigError, !field<bool>(j, "attention_bias", source, false),
                 "[models] '{}': attention_bias=true is not supported (fsdpp's Qwen3Moe has no "
                 "biases)", source);
  FSDPP_CHECK_AS(ConfigError, !field<bool>(j, "use_sliding_window", source, false),
                 "[models] '{}': use_sliding_window=true is not supported; expected false",
                 source);
  Qwen3MoeConfig c;
  // Defaults are Qwen3MoeConfig's (transformers) where a key may be left out.
  c.vocab_size = field<int64_t>(j, "vocab_size", source);
  c.hidden_size = field<int64_t>(j, "hidden_size", source);
  c.intermediate_size = field<int64_t>(j, "intermediate_size", source);
  c.moe_intermediate_size = field<int64_t>(j, "moe_intermediate_size", source);
  c.num_hidden_layers = field<int64_t>(j, "num_hidden_layers", source);
  c.num_attention_heads = field<int64_t>(j, "num_attention_heads", source);
  c.num_key_value_heads =
      field<int64_t>(j, "num_key_value_heads", source, c.num_attention_heads);
  c.head_dim = field<int64_t>(j, "head_dim", source,
                              c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads
                                                        : int64_t{0});
  // transformers 5 writes num_local_experts (num_experts is its attribute_map alias); published
  // checkpoints write num_experts.
  c.num_experts = j.contains("num_experts") && !j["num_experts"].is_null()
                      ? field<int64_t>(j, "num_experts", source)
                      : field<int64_t>(j, "num_local_experts", source, int64_t{128});
  c.num_experts_per_tok = field<int64_t>(j, "num_experts_per_tok", source, int64_t{8});
  c.norm_topk_prob = field<bool>(j, "norm_topk_prob", source, false);
  c.decoder_sparse_step = field<int64_t>(j, "decoder_sparse_step", source, int64_t{1});
  c.mlp_only_layers = field<std::vector<int64_t>>(j, "mlp_only_layers", source,
                                                  std::vector<int64_t>{});
  c.router_aux_loss_coef = field<double>(j, "router_aux_loss_coef", source, 0.001);
  c.max_position_embeddings = field<int64_t>(j, "max_position_embeddings", source, int64_t{32768});
  c.rms_norm_eps = field<double>(j, "rms_norm_eps", source, 1e-6);
  c.tie_word_embeddings = field<bool>(j, "tie_word_embeddings", source, false);
  c.initializer_range = field<double>(j, "initializer_range", source, 0.02);
  c.rope_theta = read_rope_theta(j, source);
  c.validate();
  return c;
}

std::string qwen3_moe_config_to_hf(const Qwen3MoeConfig& c, at::ScalarType dtype) {
  json j;
  j["architectures"] = {"Qwen3MoeForCausalLM"};
  j["model_type"] = "qwen3_moe";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["num_experts"] = c.num_experts;        // published checkpoints' key
  j["num_local_experts"] = c.num_experts;  // transformers 5's
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["decoder_sparse_step"] = c.decoder_sparse_step;
  j["mlp_only_layers"] = c.mlp_only_layers;
  j["router_aux_loss_coef"] = c.router_aux_loss_coef;
  j["output_router_logits"] = false;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  write_decoder_keys(j, c.rope_theta);
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["use_sliding_window"] = false;
  j["sliding_window"] = nullptr;
  j["initializer_range"] = c.initializer_range;
  const std::string dt = dtype == at::kBFloat16 ? "bfloat16"
                         : dtype == at::kHalf   ? "float16"
                                                : "float32";
  j["torch_dtype"] = dt;  // transformers 4
  j["dtype"] = dt;        // 5
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

namespace {

// Where each stacked expert tensor comes from: one tensor per expert (published checkpoints), or
// transformers 5's in-memory layout (gate_up_proj (E, 2I, D) and down_proj (E, D, I)).
struct ExpertSource {
  bool fused = false;
  std::string prefix, proj;  // "model.layers.3.mlp.experts.", "gate_proj"
};

// Rows of fsdpp's tensors (for stacked experts: experts) from Hugging Face's, after checking
// that every tensor the config implies is there with its shape and nothing else is.
RowReader qwen3_moe_rows_from_hf(const Qwen3MoeConfig& cfg,
                                 std::shared_ptr<const detail::HfSource> hf) {
  std::set<std::string> used;
  auto take = [&](const std::string& name) {
    FSDPP_CHECK_AS(ConfigError, hf->contains(name),
                   "[models] tensor '{}' is missing from the Hugging Face checkpoint", name);
    used.insert(name);
  };
  const int64_t E = cfg.num_experts, I = cfg.moe_intermediate_size;
  const HfModel want = hf_model(cfg);
  std::map<std::string, ExpertSource> experts;
  for (const auto& [name, shape] : want.shapes.list()) {
    if (!is_stacked_expert(name)) {
      const std::string theirs = want.names.to_hf(name);
      take(theirs);
      check_shape(theirs, hf->shape(theirs), shape);
      continue;
    }
    const auto [prefix, proj] = split_expert_name(name);
    const std::string fused = prefix + (proj == "down_proj" ? "down_proj" : "gate_up_proj");
    ExpertSource src{.prefix = prefix, .proj = proj};
    src.fused = hf->contains(fused) && !hf->contains(prefix + "0." + proj + ".weight");
    if (src.fused) {
      take(fused);
      auto fused_shape = shape;
      if (proj != "down_proj") fused_shape[1] = 2 * I;
      check_shape(fused, hf->shape(fused), fused_shape);
    } else {
      for (int64_t e = 0; e < E; ++e) {
        const std::string n = fmt::format("{}{}.{}.weight", prefix, e, proj);
        take(n);
        check_shape(n, hf->shape(n), {shape.begin() + 1, shape.end()});
      }
    }
    experts[name] = src;
  }
  check_no_other_hf_tensors(*hf, used, cfg.tie_word_embeddings, "a Qwen3Moe of this config");
  return [hf, want, experts, I](const std::string& name, int64_t first,
                                int64_t rows) -> at::Tensor {
    check_known_parameter(want, name);
    const auto it = experts.find(name);
    if (it == experts.end()) return hf->rows(want.names.to_hf(name), first, rows);
    const ExpertSource& src = it->second;
    if (src.fused) {
      if (src.proj == "down_proj") return hf->rows(src.prefix + "down_proj", first, rows);
      return hf->rows(src.prefix + "gate_up_proj", first, rows)
          .narrow(1, src.proj == "gate_proj" ? 0 : I, I)
          .contiguous();
    }
    std::vector<at::Tensor> per_expert;
    for (int64_t e = first; e < first + rows; ++e) {
      per_expert.push_back(hf->whole(fmt::format("{}{}.{}.weight", src.prefix, e, src.proj)));
    }
    return at::stack(per_expert);
  };
}

}  // namespace

NamedTensors qwen3_moe_tensors_from_hf(const Qwen3MoeConfig& cfg, const NamedTensors& hf) {
  const auto read = qwen3_moe_rows_from_hf(cfg, std::make_shared<detail::HfMemory>(hf));
  const HfModel model = hf_model(cfg);
  NamedTensors out;
  for (const auto& [name, shape] : model.shapes.list()) {
    out.emplace_back(name, read(name, 0, shape[0]));
  }
  return out;
}

void load_hf_qwen3_moe_rows(const fs::path& dir, const Qwen3MoeConfig& cfg,
                            const std::vector<torch::nn::Module*>& parts,
                            const InitOptions& options) {
  load_rows(parts, qwen3_moe_rows_from_hf(cfg, std::make_shared<detail::HfFiles>(dir)), options);
}

NamedTensors qwen3_moe_tensors_to_hf(const Qwen3MoeConfig& cfg, const NamedTensors& fsdpp) {
  // A stacked expert tensor as one tensor per expert, as published checkpoints hold them.
  auto emit = [&cfg](const std::string& name, const std::string& hf_name, const at::Tensor& t,
                     NamedTensors& out) {
    if (!is_stacked_expert(name)) {
      out.emplace_back(hf_name, t);
      return;
    }
    const auto [prefix, proj] = split_expert_name(name);
    for (int64_t e = 0; e < cfg.num_experts; ++e) {
      out.emplace_back(fmt::format("{}{}.{}.weight", prefix, e, proj), t[e].contiguous());
    }
  };
  return tensors_to_hf(hf_model(cfg), fsdpp, emit);
}

HfQwen3Moe load_hf_qwen3_moe(const fs::path& dir) {
  HfQwen3Moe out;
  out.config = qwen3_moe_config_from_hf(detail::read_hf_config(dir), (dir / "config.json").string());
  out.tensors = qwen3_moe_tensors_from_hf(out.config, detail::read_hf_tensors(dir));
  return out;
}

void save_hf_qwen3_moe(const fs::path& dir, const Qwen3MoeConfig& cfg, const NamedTensors& fsdpp) {
  const auto hf = qwen3_moe_tensors_to_hf(cfg, fsdpp);
  const at::ScalarType dtype = hf.front().second.scalar_type();  // the embedding's
  detail::write_hf_directory(dir, hf, {{"config.json", qwen3_moe_config_to_hf(cfg, dtype)}});
}

}  // namespace fsdpp::models
