// Qwen3-MoE cut into pipeline stages, the load-balancing statistics carried between them. See
// include/fsdpp/models/qwen3_moe_stages.h.
#include "fsdpp/models/qwen3_moe_stages.h"

#include <ATen/ATen.h>

#include <cmath>
#include <numeric>
#include <string>

#include "model_stage.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/fully_shard.h"

namespace fsdpp::models {
namespace {

// The statistics (2E+1) and the hidden state's dtype, as positions after the sequence.
int64_t extra_positions(const Qwen3MoeConfig& c) {
  return (2 * c.num_experts + 2 + c.hidden_size - 1) / c.hidden_size;
}

at::Tensor pack(const at::Tensor& h, const at::Tensor& stats, const Qwen3MoeConfig& c) {
  const auto dtype = h.scalar_type();
  const auto carried = dtype == at::kDouble ? at::kDouble : at::kFloat;
  const int64_t B = h.size(0), D = h.size(2), k = extra_positions(c);
  auto code = at::full({1}, static_cast<double>(static_cast<int>(dtype)), stats.options());
  auto flat = at::cat({stats, code}).to(carried);
  auto row = at::constant_pad_nd(flat, {0, k * D - flat.size(0)}).view({1, k, D});
  if (B > 1) row = at::cat({row, at::zeros({B - 1, k, D}, row.options())});
  return at::cat({h.to(carried), row}, 1);
}

std::pair<at::Tensor, at::Tensor> unpack(const at::Tensor& x, const Qwen3MoeConfig& c) {
  const int64_t k = extra_positions(c), S = 2 * c.num_experts + 1;
  FSDPP_CHECK(x.dim() == 3 && x.size(1) > k && x.size(2) == c.hidden_size,
              "[models] a Qwen3-MoE stage got a tensor of shape {}; expected the previous "
              "stage's hidden states with {} positions of statistics",
              x.sizes(), k);
  const int64_t T = x.size(1) - k;
  auto block = x.narrow(1, T, k).select(0, 0).reshape({-1});
  const auto dtype = static_cast<at::ScalarType>(std::llround(block[S].item<double>()));
  return {x.narrow(1, 0, T).to(dtype), block.narrow(0, 0, S).to(at::kFloat)};
}

}  // namespace

int64_t qwen3_moe_pipeline_units(const Qwen3MoeConfig& cfg) { return cfg.num_hidden_layers + 2; }

Qwen3MoeStageImpl::Qwen3MoeStageImpl(Qwen3MoeImpl& model, int64_t first_unit, int64_t num_units)
    : torch::nn::Module("Qwen3MoeStage"),
      cfg_(model.config()),
      parallel_(model.parallel),
      tensor_parallel_(model.tensor_parallel),
      first_unit_(first_unit),
      num_units_(num_units) {
  const int64_t L = cfg_.num_hidden_layers, units = L + 2;
  FSDPP_CHECK_AS(ConfigError, num_units >= 1 && first_unit >= 0 && first_unit + num_units <= units,
                 "[models] Qwen3-MoE stage of units [{}, {}) is outside the model's {} units",
                 first_unit, first_unit + num_units, units);
  const int64_t last = first_unit + num_units - 1;
  if (first_unit == 0) embed_tokens = register_module("embed_tokens", model.embed_tokens);
  std::shared_ptr<torch::nn::Module> container;
  for (int64_t u = std::max<int64_t>(first_unit, 1); u <= std::min(last, L); ++u) {
    if (!container) {
      // A plain container, so that the layers keep the whole model's names ("layers.3...").
      container = std::make_shared<torch::nn::Module>("Layers");
      register_module("layers", container);
    }
    auto layer = model.layers->ptr<Qwen3MoeDecoderLayerImpl>(static_cast<size_t>(u - 1));
    container->register_module(std::to_string(u - 1), layer);
    layers.emplace_back(layer);
  }
  if (last == units - 1) {
    FSDPP_CHECK_AS(ConfigError, !model.lm_head.is_empty(),
                   "[models] a Qwen3-MoE with tie_word_embeddings cannot be split into pipeline "
                   "stages: its embedding table is also the head");
    norm = register_module("norm", model.norm);
    lm_head = register_module("lm_head", model.lm_head);
  }
}

at::Tensor Qwen3MoeStageImpl::forward(const at::Tensor& x) { return forward(x, at::Tensor()); }

at::Tensor Qwen3MoeStageImpl::forward(const at::Tensor& x, const at::Tensor& positions) {
  at::Tensor h, stats;
  if (has_embedding()) {
    FSDPP_CHECK_AS(ConfigError, x.dim() == 2 && x.scalar_type() == at::kLong,
                   "[models] the first Qwen3-MoE stage takes tokens (B,T) int64; got {} dims of {}",
                   x.dim(), c10::toString(x.scalar_type()));
    FSDPP_CHECK_AS(ConfigError, x.size(1) >= 1 && x.size(1) <= cfg_.max_position_embeddings,
                   "[models] Qwen3Moe sequence length T={} is out of range; expected 1 <= T <= "
                   "max_position_embeddings={}",
                   x.size(1), cfg_.max_position_embeddings);
    h = tensor_parallel_ ? tensor_parallel_->embed(x, embed_tokens->weight) : embed_tokens(x);
    stats = at::zeros({2 * cfg_.num_experts + 1}, h.options().dtype(at::kFloat));
  } else {
    std::tie(h, stats) = unpack(x, cfg_);
  }
  // Under sequence parallelism h holds this rank's chunk of the positions.
  const int64_t T = h.size(1) * (tensor_parallel_ ? tensor_parallel_->sequence_multiple() : 1);
  // Document masking: every stage its microbatch's positions, checked, their rows and the mask
  // made once for its layers.
  at::Tensor cos, sin, mask;
  if (positions.defined() && !layers.empty()) {
    auto d = qwen3_moe_document_mask(cfg_, positions, {h.size(0), T}, h);
    cos = d.cos, sin = d.sin, mask = d.mask;
  } else {
    std::tie(cos, sin) = qwen3_moe_rope(cfg_, T, h);
  }
  std::vector<at::Tensor> router_logits;
  // Through fsdpp::forward, so that a layer made an FSDP unit gathers its parameters.
  for (auto& layer : layers) {
    auto out = mask.defined() ? fsdpp::forward(layer, h, cos, sin, mask)
                              : fsdpp::forward(layer, h, cos, sin);
    h = out.hidden;
    if (out.router_logits.defined()) router_logits.push_back(out.router_logits);
  }
  if (!router_logits.empty()) {
    stats = stats + router_statistics(router_logits, cfg_.num_experts, cfg_.num_experts_per_tok);
  }
  if (!has_head()) return pack(h, stats, cfg_);
  statistics_ = stats;
  h = norm(h);
  if (tensor_parallel_) h = tensor_parallel_->enter(h, "lm_head");
  return lm_head(h);
}

at::Tensor Qwen3MoeStageImpl::loss(const at::Tensor& logits, const at::Tensor& targets) {
  return loss(logits, targets, TokenLoss{});
}

at::Tensor Qwen3MoeStageImpl::loss(const at::Tensor& logits, const at::Tensor& targets,
                                   const TokenLoss& token_loss) {
  FSDPP_CHECK(has_head() && statistics_.defined(),
              "[models] loss on a Qwen3-MoE stage without the head, or before its forward "
              "(units [{}, {}))",
              first_unit_, first_unit_ + num_units_);
  auto ce = token_loss            ? token_loss(logits, targets)
            : tensor_parallel_ ? tensor_parallel_->loss(logits, targets, 0)
                               : token_cross_entropy(logits, targets);
  auto stats = parallel_ ? parallel_->global_statistics(statistics_) : statistics_;
  statistics_ = at::Tensor();
  const auto aux = load_balancing_loss(stats, cfg_.num_experts);
  // Kept for the caller's metrics without its graph, which would hold the microbatch's tensors
  // (all of them after a zero-bubble schedule's I, which keeps the graph for W) to the next step.
  aux_ = aux.detach();
  return ce + cfg_.router_aux_loss_coef * aux.to(ce.scalar_type());
}

std::vector<Qwen3MoeStage> split_qwen3_moe(Qwen3Moe& model, const std::vector<int>& counts) {
  const auto& cfg = model->config();
  FSDPP_CHECK_AS(ConfigError, !cfg.tie_word_embeddings,
                 "[models] a Qwen3-MoE with tie_word_embeddings cannot be split into pipeline "
                 "stages: its embedding table is also the head, on the first and the last stage");
  return detail::cut_into_stages<Qwen3MoeStage>(
      counts, qwen3_moe_pipeline_units(cfg), "Qwen3-MoE",
      fmt::format("the embedding, {} decoder layers and the head", cfg.num_hidden_layers),
      [&](int64_t first, int c) {
        return Qwen3MoeStage(std::make_shared<Qwen3MoeStageImpl>(*model, first, c));
      });
}

}  // namespace fsdpp::models
