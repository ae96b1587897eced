#pragma once
// Hugging Face transformers' Llama (LlamaForCausalLM.save_pretrained) <-> fsdpp's Llama.
//
//   auto hf = fsdpp::models::load_hf_llama("tiny-llama/");     // config.json + *.safetensors
//   fsdpp::models::Llama model(hf.config);
//   fsdpp::models::load_named_tensors(*model, hf.tensors);     // fsdpp names, RoPE rows permuted
//
//   fsdpp::models::save_hf_llama("out/", model->config(), named_tensors_of_model);
//
// Names (HF <- fsdpp), per layer i:
//   model.embed_tokens.weight                      tok_embeddings.weight
//   model.layers.i.self_attn.{q,k,v,o}_proj.weight layers.i.attention.{wq,wk,wv,wo}.weight
//   model.layers.i.mlp.gate_proj.weight            layers.i.feed_forward.w1.weight
//   model.layers.i.mlp.up_proj.weight              layers.i.feed_forward.w3.weight
//   model.layers.i.mlp.down_proj.weight            layers.i.feed_forward.w2.weight
//   model.layers.i.input_layernorm.weight          layers.i.attention_norm.weight
//   model.layers.i.post_attention_layernorm.weight layers.i.ffn_norm.weight
//   model.norm.weight                              norm.weight
//   lm_head.weight                                 output.weight (absent when tied)
//
// RoPE: fsdpp (like Meta's Llama) rotates interleaved pairs (x[2j], x[2j+1]) of each head;
// transformers rotates halves (x[j], x[j + head_dim/2]) ("rotate_half"). So the rows of q_proj
// and k_proj are permuted within each head: fsdpp row 2j is HF row j, fsdpp row 2j+1 is HF row
// j + head_dim/2 (the inverse of transformers' convert_llama_weights_to_hf.py permute).
//
// Config (HF config.json <- LlamaConfig): vocab_size, hidden_size (dim), num_hidden_layers,
// num_attention_heads, num_key_value_heads, intermediate_size (ffn_hidden),
// max_position_embeddings (max_seq_len), rms_norm_eps (norm_eps), rope_theta (top level, or
// rope_parameters.rope_theta as transformers 5 writes it), tie_word_embeddings, initializer_range
// (init_std). Refused with a ConfigError naming the field: another model_type, hidden_act other
// than silu, attention or MLP biases, RoPE scaling, head_dim other than hidden_size / heads.

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fsdpp/models/llama.h"

namespace fsdpp::models {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// fsdpp's own description of a model, model_config.json in fsdpp-train checkpoints:
// {"format": "fsdpp.llama_config", "vocab_size": ..., "dim": ..., ...} (every LlamaConfig field,
// ffn_hidden resolved).
std::string llama_config_to_json(const LlamaConfig& cfg);
LlamaConfig llama_config_from_json(const std::string& text, const std::string& source);

// Hugging Face's config.json.
LlamaConfig llama_config_from_hf(const std::string& config_json, const std::string& source);
std::string llama_config_to_hf(const LlamaConfig& cfg);

// Renames and permutes; every tensor the config implies must be there and have its shape, and
// no other tensor may be (HF's rotary inv_freq buffers are skipped). Errors name the tensor.
NamedTensors llama_tensors_from_hf(const LlamaConfig& cfg, const NamedTensors& hf);
NamedTensors llama_tensors_to_hf(const LlamaConfig& cfg, const NamedTensors& fsdpp);

struct HfLlama {
  LlamaConfig config;
  NamedTensors tensors;  // fsdpp names and row order
};
// A save_pretrained directory: config.json, and model.safetensors or the shards that
// model.safetensors.index.json lists.
HfLlama load_hf_llama(const std::filesystem::path& dir);
// Writes config.json and model.safetensors (HF names, HF row order), and `extra_files` (name ->
// contents, e.g. tokenizer files), into `dir` atomically.
void save_hf_llama(const std::filesystem::path& dir, const LlamaConfig& cfg, const NamedTensors& fsdpp,
                   const std::map<std::string, std::string>& extra_files = {});

// Copies named tensors (fsdpp names) into a model's parameters, which must all be named once.
void load_named_tensors(torch::nn::Module& model, const NamedTensors& tensors);

// A save_pretrained directory (of `cfg`'s shape) into a model that fully_shard, tensor
// parallelism or pipeline stages split, or a whole one: each rank reads only the rows it keeps,
// straight from the safetensors files (fsdpp::load_rows), so it never holds the model, only its
// shards and one chunk (plus the attention heads a chunk of wq or wk touches, whose rows HF
// orders otherwise). `parts`: the modules given last to fully_shard (pipeline stages: this
// rank's). The same checks and errors as load_hf_llama.
void load_hf_llama_rows(const std::filesystem::path& dir, const LlamaConfig& cfg,
                        const std::vector<torch::nn::Module*>& parts,
                        const InitOptions& options = {});

// fsdpp-ckpt import-hf / export-hf of this and the other architectures: hf_checkpoint.h.

}  // namespace fsdpp::models
