#pragma once
// The estimator's view of fsdpp's Llama: the shape fields of models::LlamaConfig, resolved
// (grouped-query heads and the SwiGLU width as the model computes them), so that an estimate
// follows the model it describes instead of a copy of its rules.
//
//   auto model = fsdpp::describe_decoder(fsdpp::decoder_shape_of(cfg.llama_config(vocab)));

#include "fsdpp/estimate/memory_estimate.h"
#include "fsdpp/models/llama.h"

namespace fsdpp {

DecoderShape decoder_shape_of(const models::LlamaConfig& config);

}  // namespace fsdpp
