// The estimator's vocabulary: element types and optimizers by name, and models described as
// FSDP sees them (units of dim-0-sharded parameters).
#include <algorithm>
#include <cctype>
#include <string>

#include "fsdpp/common/error.h"
#include "fsdpp/estimate/memory_estimate.h"

namespace fsdpp {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Qwen3MoeDecoderLayer units in registration order: self_attn (q, k, v, o, q_norm, k_norm), mlp
// (experts' gate, up, down stacked (E, I, C), (E, I, C), (E, C, I), then the router (E, C); or
// the dense gate, up, down of width F), input_layernorm, post_attention_layernorm; q, kv, F and
// I are this rank's sizes.
void add_qwen3_layers(ModelDescription& m, const DecoderShape& s, int64_t q, int64_t kv, int64_t F, int64_t I) {
  const auto& e = *s.moe;
  const int64_t C = s.dim, E = e.num_experts, hd = s.head_dim();
  for (int64_t i = 0; i < s.n_layers; ++i) {
    ModelDescription::Unit u{"layers." + std::to_string(i), {{q, C}, {kv, C}, {kv, C}, {C, q}, {hd, 1}, {hd, 1}}};
    if (e.sparse[static_cast<size_t>(i)]) {
      u.params.insert(u.params.end(), {{E, I * C}, {E, I * C}, {E, C * I}, {E, C}});
    } else {
      u.params.insert(u.params.end(), {{F, C}, {F, C}, {C, F}});
    }
    u.params.insert(u.params.end(), {{C, 1}, {C, 1}});
    m.units.push_back(std::move(u));
  }
}

}  // namespace

int64_t dtype_bytes(EstimateDType t) { return t == EstimateDType::FP32 ? 4 : 2; }

const char* to_string(EstimateDType t) {
  switch (t) {
    case EstimateDType::FP32: return "fp32";
    case EstimateDType::BF16: return "bf16";
    case EstimateDType::FP16: return "fp16";
  }
  return "?";
}

EstimateDType parse_estimate_dtype(const std::string& name) {
  const std::string n = lower(name);
  if (n == "fp32" || n == "float32" || n == "float" || n == "f32") return EstimateDType::FP32;
  if (n == "bf16" || n == "bfloat16") return EstimateDType::BF16;
  if (n == "fp16" || n == "float16" || n == "half" || n == "f16") return EstimateDType::FP16;
  FSDPP_THROW(ConfigError, "[estimate] dtype '{}' is not known; expected fp32, bf16 or fp16", name);
}

EstimateOptimizer parse_estimate_optimizer(const std::string& name) {
  const std::string n = lower(name);
  if (n == "adamw") return EstimateOptimizer::ADAMW;
  if (n == "adam") return EstimateOptimizer::ADAM;
  if (n == "sgd") return EstimateOptimizer::SGD;
  if (n == "sgd_momentum" || n == "sgd-momentum") return EstimateOptimizer::SGD_MOMENTUM;
  FSDPP_THROW(ConfigError, "[estimate] optimizer '{}' is not known; expected adamw, adam, sgd or sgd_momentum",
              name);
}

void DecoderShape::validate() const {
  auto positive = [](const char* field, int64_t v) {
    FSDPP_CHECK_AS(ConfigError, v > 0, "[estimate] {}={} is not positive", field, v);
  };
  positive("vocab_size", vocab_size);
  positive("dim", dim);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  positive("n_kv_heads", n_kv_heads);
  positive("ffn_hidden", ffn_hidden);
  FSDPP_CHECK_AS(ConfigError, dim % n_heads == 0, "[estimate] dim={} is not divisible by n_heads={}", dim,
                 n_heads);
  FSDPP_CHECK_AS(ConfigError, n_heads % n_kv_heads == 0,
                 "[estimate] n_kv_heads={} does not divide n_heads={}", n_kv_heads, n_heads);
  if (moe) {
    positive("num_experts", moe->num_experts);
    positive("moe_intermediate_size", moe->moe_intermediate);
    FSDPP_CHECK_AS(ConfigError, moe->top_k >= 1 && moe->top_k <= moe->num_experts,
                   "[estimate] num_experts_per_tok={} is out of range; expected 1 <= k <= num_experts={}",
                   moe->top_k, moe->num_experts);
    FSDPP_CHECK_AS(ConfigError, static_cast<int64_t>(moe->sparse.size()) == n_layers,
                   "[estimate] {} sparse-layer flags for {} layers; expected one per layer", moe->sparse.size(),
                   n_layers);
  }
}

ParameterCounts count_parameters(const ModelDescription& m) {
  ParameterCounts c;
  c.total = c.active = m.num_params();
  if (!m.shape || !m.shape->moe) return c;
  const auto& e = *m.shape->moe;
  // Only a whole model's counts mean "per token": the experts of every sparse layer, of which a
  // token uses top_k.
  const int64_t per_expert = 3 * e.moe_intermediate * m.shape->dim;
  c.experts = e.num_sparse() * e.num_experts * per_expert;
  c.active = c.total - e.num_sparse() * (e.num_experts - e.top_k) * per_expert;
  return c;
}

ModelDescription expert_parallel_slice(const ModelDescription& model, int degree, bool apart) {
  FSDPP_CHECK_AS(ConfigError, degree >= 1, "[estimate] expert-parallel degree {} is not positive", degree);
  if (degree == 1 && !apart) return model;
  FSDPP_CHECK_AS(ConfigError, model.shape && model.shape->moe,
                 "[estimate] expert parallelism {} needs a model with experts (model.architecture: qwen3_moe, "
                 "or --num-experts)", degree);
  const auto& e = *model.shape->moe;
  FSDPP_CHECK_AS(ConfigError, e.num_experts % degree == 0,
                 "[estimate] num_experts={} is not divisible by the expert-parallel degree {}; each rank holds "
                 "an equal number of experts", e.num_experts, degree);
  ModelDescription m;
  m.shape = model.shape;
  m.units.push_back(model.units[0]);
  for (size_t i = 1; i < model.units.size(); ++i) {
    const auto& u = model.units[i];
    if (!e.sparse[i - 1]) {
      m.units.push_back(u);
      continue;
    }
    // The three stacked expert tensors follow the attention's six parameters.
    ModelDescription::Unit layer{u.name, {}}, experts{u.name + ".mlp.experts", {}, /*experts=*/true};
    for (size_t k = 0; k < u.params.size(); ++k) {
      if (k >= 6 && k < 9) {
        experts.params.push_back({u.params[k].rows / degree, u.params[k].row_numel});
      } else {
        layer.params.push_back(u.params[k]);
      }
    }
    m.units.push_back(std::move(layer));
    m.units.push_back(std::move(experts));
  }
  return m;
}

ModelDescription rank_slice(const ModelDescription& model, int tp, int ep, bool split_experts) {
  const bool has_experts = model.shape && model.shape->moe;
  FSDPP_CHECK_AS(ConfigError, ep == 1 || !split_experts,
                 "[estimate] expert parallelism {} with experts split over tensor parallelism: experts are either "
                 "split over tp or placed over ep (parallel::ParallelizeOptions::split_experts)", ep);
  const ModelDescription local = tensor_parallel_slice(model, tp, split_experts);
  // parallelize's own_mesh: experts over ep, or whole under tp, live on the sparse mesh.
  const bool apart = has_experts && (ep > 1 || (tp > 1 && !split_experts));
  return apart ? expert_parallel_slice(local, ep, /*apart=*/true) : expert_parallel_slice(local, ep);
}

int64_t ModelDescription::Unit::numel() const {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

int64_t ModelDescription::num_params() const {
  int64_t n = 0;
  for (const auto& u : units) n += u.numel();
  return n;
}

int64_t MoeShape::num_sparse() const {
  return static_cast<int64_t>(std::count(sparse.begin(), sparse.end(), true));
}

ModelDescription describe_decoder(const DecoderShape& s) {
  s.validate();
  ModelDescription m;
  m.shape = s;
  const int64_t C = s.dim, kv = s.n_kv_heads * s.head_dim(), q = s.n_heads * s.head_dim();
  ModelDescription::Unit root{"(root)", {{s.vocab_size, C}, {C, 1}}};
  if (!s.tie_embeddings) root.params.push_back({s.vocab_size, C});
  m.units.push_back(root);
  if (s.moe) {
    add_qwen3_layers(m, s, q, kv, s.ffn_hidden, s.moe->moe_intermediate);
    return m;
  }
  for (int64_t i = 0; i < s.n_layers; ++i) {
    // attention_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3 (Linear weights are (out, in)).
    m.units.push_back({"layers." + std::to_string(i),
                       {{C, 1}, {q, C}, {kv, C}, {kv, C}, {C, q}, {C, 1}, {s.ffn_hidden, C},
                        {C, s.ffn_hidden}, {s.ffn_hidden, C}}});
  }
  return m;
}

ModelDescription describe_parameter_count(int64_t num_params, int64_t n_units) {
  FSDPP_CHECK_AS(ConfigError, num_params > 0, "[estimate] the parameter count {} is not positive", num_params);
  FSDPP_CHECK_AS(ConfigError, n_units > 0, "[estimate] the number of units {} is not positive", n_units);
  ModelDescription m;
  const int64_t per = num_params / n_units;
  m.units.push_back({"(root)", {{num_params - per * (n_units - 1), 1}}});
  for (int64_t i = 1; i < n_units; ++i) m.units.push_back({"unit." + std::to_string(i), {{per, 1}}});
  return m;
}

ModelDescription tensor_parallel_slice(const ModelDescription& model, int degree, bool split_experts) {
  FSDPP_CHECK_AS(ConfigError, degree >= 1, "[estimate] tensor-parallel degree {} is not positive", degree);
  if (degree == 1) return model;
  const int64_t t = degree;
  auto largest_share = [t](int64_t size) { return (size + t - 1) / t; };
  ModelDescription m;
  m.shape = model.shape;
  if (!model.shape) {
    for (const auto& u : model.units) {
      ModelDescription::Unit local{u.name, {}};
      for (const auto& p : u.params) local.params.push_back({largest_share(p.rows), p.row_numel});
      m.units.push_back(std::move(local));
    }
    return m;
  }
  // The plans' own checks (models::parallelize_llama, models::parallelize_qwen3_moe), in their
  // words: fsdpp-train's memory check meets them before the plan does.
  const auto& s = *model.shape;
  const char* arch = s.moe ? "Qwen3Moe" : "Llama";
  FSDPP_CHECK_AS(ConfigError, s.n_heads % t == 0,
                 "[estimate] {}: n_heads={} is not divisible by the tensor-parallel degree {}; each rank "
                 "computes whole attention heads",
                 arch, s.n_heads, t);
  FSDPP_CHECK_AS(ConfigError, s.n_kv_heads >= t,
                 "[estimate] {}: n_kv_heads={} is smaller than the tensor-parallel degree {}; grouped-query "
                 "attention needs at least one kv head per rank (replicated kv heads are not supported)",
                 arch, s.n_kv_heads, t);
  FSDPP_CHECK_AS(ConfigError, s.n_kv_heads % t == 0,
                 "[estimate] {}: n_kv_heads={} is not divisible by the tensor-parallel degree {}; each rank "
                 "computes whole kv heads",
                 arch, s.n_kv_heads, t);
  FSDPP_CHECK_AS(ConfigError, s.vocab_size >= t && s.ffn_hidden >= t,
                 "[estimate] {}: vocab_size={} and the FFN hidden size {} must be at least the tensor-parallel "
                 "degree {}",
                 arch, s.vocab_size, s.ffn_hidden, t);
  FSDPP_CHECK_AS(ConfigError, !s.moe || !split_experts || s.moe->moe_intermediate >= t,
                 "[estimate] Qwen3Moe: moe_intermediate_size={} is smaller than the tensor-parallel degree {}; "
                 "keep the experts whole (split_experts=false)",
                 s.moe ? s.moe->moe_intermediate : 0, t);
  const int64_t C = s.dim, q = s.n_heads * s.head_dim() / t, kv = s.n_kv_heads * s.head_dim() / t;
  const int64_t V = largest_share(s.vocab_size), F = largest_share(s.ffn_hidden);
  ModelDescription::Unit root{"(root)", {{V, C}, {C, 1}}};
  if (!s.tie_embeddings) root.params.push_back({V, C});
  m.units.push_back(root);
  if (s.moe) {
    // Qwen3-MoE's plan: attention as the Llama's, q_norm and k_norm whole; dense MLPs column /
    // row-wise; the experts split along their width (gate and up (E, I / t, C), down (E, C, I / t)),
    // or whole; the router whole. Units as describe_decoder orders them.
    const int64_t I = s.moe->moe_intermediate;
    add_qwen3_layers(m, s, q, kv, F, split_experts ? largest_share(I) : I);
    return m;
  }
  for (int64_t i = 0; i < s.n_layers; ++i) {
    // Column-parallel weights keep their (out / t, in) rows; row-parallel ones (wo, w2) all C
    // rows of in / t elements, which FSDP then shards along dim 0.
    m.units.push_back({"layers." + std::to_string(i),
                       {{C, 1}, {q, C}, {kv, C}, {kv, C}, {C, q}, {C, 1}, {F, C}, {C, F}, {F, C}}});
  }
  return m;
}

}  // namespace fsdpp
