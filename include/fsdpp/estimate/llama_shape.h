#pragma once
// The estimator's view of fsdpp's models: the shape fields of models::LlamaConfig, resolved
// (grouped-query heads and the SwiGLU width as the model computes them), and of
// models::Qwen3MoeConfig (head_dim, the experts, which layers are sparse by its own rule), so
// that an estimate follows the model it describes instead of a copy of its rules.
//
//   auto model = fsdpp::describe_decoder(fsdpp::decoder_shape_of(cfg.llama_config(vocab)));
//   auto moe = fsdpp::describe_decoder(fsdpp::decoder_shape_of(cfg.qwen3_moe_config(vocab)));

#include <filesystem>

#include "fsdpp/estimate/memory_estimate.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/qwen3_moe.h"

namespace fsdpp {

DecoderShape decoder_shape_of(const models::LlamaConfig& config);
// The router logits are taken as kept (fsdpp-train asks for them with every loss).
DecoderShape decoder_shape_of(const models::Qwen3MoeConfig& config);

// The model a directory holds, from its description alone (no weights read): an fsdpp checkpoint
// (model_config.json) or a Hugging Face model directory (config.json), of a Llama or a Qwen3-MoE
// (fsdpp/models/hf_checkpoint.h tells which). ConfigError naming the directory otherwise.
ModelDescription describe_model_directory(const std::filesystem::path& dir);

}  // namespace fsdpp
