#include "fsdpp/estimate/llama_shape.h"

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
