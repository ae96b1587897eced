#include "fsdpp/estimate/flops.h"

#include "fsdpp/common/error.h"

namespace fsdpp {

double training_flops_per_token(const ModelDescription& model, int64_t seq_len) {
  FSDPP_CHECK_AS(ConfigError, model.shape.has_value(),
                 "[estimate] FLOPs per token need the model's shape (layers, heads); a model "
                 "given as a parameter count has none");
  const DecoderShape& s = *model.shape;
  // The embedding is a lookup; a tied output layer is the same matrix and does multiply.
  const int64_t embedding = s.tie_embeddings ? 0 : s.vocab_size * s.dim;
  const double matmul_params = static_cast<double>(count_parameters(model).active - embedding);
  const double attention = 12.0 * static_cast<double>(s.n_layers) * static_cast<double>(s.n_heads) *
                           static_cast<double>(s.head_dim()) * static_cast<double>(seq_len);
  return 6.0 * matmul_params + attention;
}

}  // namespace fsdpp
