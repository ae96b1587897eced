#pragma once
// Hugging Face transformers' Qwen3MoeForCausalLM (save_pretrained directories, published Qwen3
// MoE checkpoints) <-> fsdpp's Qwen3Moe.
//
//   auto hf = fsdpp::models::load_hf_qwen3_moe("Qwen3-30B-A3B/");  // config.json + safetensors
//   fsdpp::models::Qwen3Moe model(hf.config);
//   fsdpp::models::load_named_tensors(*model, hf.tensors);
//
//   fsdpp::models::save_hf_qwen3_moe("out/", model->config(), named_tensors_of_model);
//
// Names: fsdpp's are HF's without "model." (lm_head.weight keeps its name), except the experts.
// Published checkpoints, and transformers 5's save_pretrained, store each expert apart:
// model.layers.i.mlp.experts.e.P.weight for P in gate_proj (I, D), up_proj (I, D) and
// down_proj (D, I). fsdpp stacks them into layers.i.mlp.experts.P, (E, I, D) / (E, D, I), on
// load and splits them on save. transformers 5's in-memory fused names
// (mlp.experts.gate_up_proj (E, 2I, D), gate rows first, and mlp.experts.down_proj (E, D, I))
// are read too. No rows are permuted: fsdpp's Qwen3Moe uses transformers' rotate-half RoPE.
//
// Config keys are HF's own (see Qwen3MoeConfig); num_experts is read from num_experts or
// num_local_experts (what transformers 5 writes) and written as both. Refused with a ConfigError
// naming the key: another model_type, hidden_act other than silu, attention_bias, sliding-window
// attention, RoPE scaling.

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <string>

#include "fsdpp/models/hf_llama.h"  // NamedTensors, load_named_tensors
#include "fsdpp/models/qwen3_moe.h"

namespace fsdpp::models {

// Hugging Face's config.json.
Qwen3MoeConfig qwen3_moe_config_from_hf(const std::string& config_json, const std::string& source);
std::string qwen3_moe_config_to_hf(const Qwen3MoeConfig& cfg,
                                   at::ScalarType dtype = at::kFloat);

// Renames, stacks or splits the experts; every tensor the config implies must be there with its
// shape, and no other may be (HF's rotary inv_freq buffers are skipped). Errors name the tensor.
NamedTensors qwen3_moe_tensors_from_hf(const Qwen3MoeConfig& cfg, const NamedTensors& hf);
NamedTensors qwen3_moe_tensors_to_hf(const Qwen3MoeConfig& cfg, const NamedTensors& fsdpp);

struct HfQwen3Moe {
  Qwen3MoeConfig config;
  NamedTensors tensors;  // fsdpp names, experts stacked
};
// A save_pretrained directory: config.json, and model.safetensors or the shards that
// model.safetensors.index.json lists.
HfQwen3Moe load_hf_qwen3_moe(const std::filesystem::path& dir);
// A save_pretrained directory (of `cfg`'s shape) into a model that fully_shard or expert
// parallelism split, or a whole one, each rank reading only the rows (of the stacked experts:
// the experts) it keeps, straight from the files (fsdpp::load_rows; as load_hf_llama_rows).
void load_hf_qwen3_moe_rows(const std::filesystem::path& dir, const Qwen3MoeConfig& cfg,
                            const std::vector<torch::nn::Module*>& parts,
                            const InitOptions& options = {});
// Writes config.json and model.safetensors (HF names, one tensor per expert) into `dir`
// atomically. Tensors keep their dtype, so load then save then load is bit for bit.
void save_hf_qwen3_moe(const std::filesystem::path& dir, const Qwen3MoeConfig& cfg,
                       const NamedTensors& fsdpp);

}  // namespace fsdpp::models
