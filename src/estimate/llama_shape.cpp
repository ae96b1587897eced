#include "fsdpp/estimate/llama_shape.h"

#include <fstream>
#include <sstream>

#include "fsdpp/common/error.h"
#include "fsdpp/models/hf_checkpoint.h"
#include "fsdpp/models/hf_llama.h"
#include "fsdpp/models/hf_qwen3_moe.h"

namespace fsdpp {

DecoderShape decoder_shape_of(const models::LlamaConfig& c) {
  return DecoderShape{.vocab_size = c.vocab_size,
                      .dim = c.dim,
                      .n_layers = c.n_layers,
                      .n_heads = c.n_heads,
                      .n_kv_heads = c.kv_heads(),
                      .ffn_hidden = c.ffn_hidden_dim(),
                      .tie_embeddings = c.tie_embeddings,
                      .max_seq_len = c.max_seq_len};
}

}  // namespace fsdpp

namespace fsdpp {

DecoderShape decoder_shape_of(const models::Qwen3MoeConfig& c) {
  DecoderShape s{.vocab_size = c.vocab_size,
                 .dim = c.hidden_size,
                 .n_layers = c.num_hidden_layers,
                 .n_heads = c.num_attention_heads,
                 .n_kv_heads = c.num_key_value_heads,
                 .ffn_hidden = c.intermediate_size,
                 .tie_embeddings = c.tie_word_embeddings,
                 .max_seq_len = c.max_position_embeddings,
                 .head_size = c.head_dim,
                 .qk_norm = true};
  MoeShape m;
  m.num_experts = c.num_experts;
  m.top_k = c.num_experts_per_tok;
  m.moe_intermediate = c.moe_intermediate_size;
  m.router_logits = true;  // causal_lm asks for them whenever it computes a loss
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) m.sparse.push_back(c.is_sparse_layer(i));
  if (m.num_experts > 0) s.moe = m;
  return s;
}

}  // namespace fsdpp

namespace fsdpp {

ModelDescription describe_model_directory(const std::filesystem::path& dir) {
  auto read = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  std::error_code ec;
  const auto own = dir / "model_config.json", hf = dir / "config.json";
  if (std::filesystem::is_regular_file(own, ec)) {
    const std::string text = read(own), source = own.string();
    // Qwen3-MoE's model_config.json is Hugging Face's config.json itself.
    return models::architecture_of_model_config(text, source) == models::Architecture::kLlama
               ? describe_decoder(decoder_shape_of(models::llama_config_from_json(text, source)))
               : describe_decoder(decoder_shape_of(models::qwen3_moe_config_from_hf(text, source)));
  }
  FSDPP_CHECK_AS(ConfigError, std::filesystem::is_regular_file(hf, ec),
                 "[estimate] '{}' holds neither model_config.json (an fsdpp checkpoint) nor config.json (a "
                 "Hugging Face model directory)", dir.string());
  const std::string text = read(hf), source = hf.string();
  return models::architecture_of_hf_config(text, source) == models::Architecture::kLlama
             ? describe_decoder(decoder_shape_of(models::llama_config_from_hf(text, source)))
             : describe_decoder(decoder_shape_of(models::qwen3_moe_config_from_hf(text, source)));
}

}  // namespace fsdpp
