// The bytes a step moves outside its matmuls (memory_traffic.h), op by op.
#include "fsdpp/estimate/memory_traffic.h"

#include <algorithm>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/strategy_traits.h"

namespace fsdpp {
namespace {

// Elements read plus written per token by one layer's forward elementwise work, its tp share:
// two RMSNorms (x in, y out) and two residual adds (two in, one out) over the residual stream
// (split by tp under sequence parallelism, whole otherwise); rotary on q and k (in and out);
// Qwen3's norm on every q and k head; attention's own reads of q, k, v and write of its output
// (a fused kernel's, beside the FLOPs counted as compute); SwiGLU's silu(gate) x up (two in,
// one out) over a dense layer's FFN width (a sparse layer's experts are timed with their own
// kernels, expert_kernels.h).
double forward_elements_per_token(const DecoderShape& s, int64_t layer, const EstimateOptions& o) {
  const double tp = o.tensor_parallel;
  const double stream = double(s.dim) / (o.sequence_parallel ? tp : 1.0);
  const double q = double(s.n_heads * s.head_dim()) / tp;
  const double kv = double(s.n_kv_heads * s.head_dim()) / tp;
  const bool sparse = s.moe && layer < static_cast<int64_t>(s.moe->sparse.size()) && s.moe->sparse[layer];
  const double ffn = sparse ? 0.0 : double(s.ffn_hidden) / tp;
  double e = 2 * 2 * stream + 2 * 3 * stream;  // norms, residual adds
  e += 2 * (q + kv);                           // rotary
  if (s.qk_norm) e += 2 * (q + kv);
  e += 2 * q + 2 * kv;                         // attention's q, k, v in, output out
  e += 3 * ffn;                                // SwiGLU's product
  return e;
}

// The layers of the rank's stage: the most loaded stage's share of n_layers.
int64_t layers_of_stage(const DecoderShape& s, const EstimateOptions& o) {
  const int64_t pp = std::max(1, o.pipeline.degree);
  return (s.n_layers + pp - 1) / pp;
}

}  // namespace

MemoryTraffic step_memory_traffic(const ModelDescription& model, const EstimateOptions& o, int shard_degree) {
  FSDPP_CHECK_AS(ConfigError, model.shape.has_value(),
                 "[estimate] the memory traffic of a step needs the model's shape, not only its parameter count");
  const DecoderShape& s = *model.shape;
  const double act = double(dtype_bytes(o.param_dtype));
  const double red = double(dtype_bytes(o.reduce_dtype));
  const double tokens = double(o.batch) * double(o.seq_len);
  MemoryTraffic t;

  // Backward moves about twice the forward's bytes (each op reads its saved inputs and the
  // incoming gradient, writes the outgoing one); checkpointing runs the forward once more.
  const double passes = 3.0 + (o.activation_checkpointing ? 1.0 : 0.0);
  double per_token = 0;
  const int64_t layers = layers_of_stage(s, o);
  for (int64_t l = 0; l < layers; ++l) per_token += forward_elements_per_token(s, l, o);
  t.activations = tokens * per_token * passes * act;

  // The loss (on the last stage): the logits cast to fp32, log-softmax read and written, its
  // backward read and written, the gradient cast back: per logit act + 4 + 8 + 8 + 4 + act.
  t.loss = tokens * double(s.vocab_size) / o.tensor_parallel * (24.0 + 2 * act);

  // FSDP: the rank's slice (tp, stage) whole and sharded over shard_degree ranks.
  const double full = double(tensor_parallel_slice(model, o.tensor_parallel).num_params()) /
                      std::max(1, o.pipeline.degree);
  const auto& traits = traits_of(o.strategy);
  const double local = traits.shards_optimizer_state ? full / std::max(1, shard_degree) : full;
  const double gathers = !traits.shards ? 0.0 : traits.reshard_after_forward ? 2.0 : 1.0;
  const double cast_shard = o.param_dtype == EstimateDType::FP32 ? 0.0 : 4.0 + act;
  const double cast_grad = o.param_dtype == o.reduce_dtype ? 0.0 : act + red;
  t.fsdp = gathers * (local * cast_shard + full * 2 * act)  // cast the shard, copy the gathered out
           + full * (cast_grad + 2 * red);                   // cast the gradient, copy it in

  // The optimizer over the rank's fp32 master shard: AdamW and Adam read the parameter, its
  // gradient and two moments and write three (28 bytes); SGD with momentum reads three and
  // writes two (20); SGD reads two and writes one (12).
  double per_param = 28;
  if (o.optimizer == EstimateOptimizer::SGD_MOMENTUM) per_param = 20;
  if (o.optimizer == EstimateOptimizer::SGD) per_param = 12;
  t.optimizer = local * per_param;
  return t;
}

}  // namespace fsdpp
